"""What the anchor check costs a charge, on a home holding a year of weekly Opal releases.

Builds a home with ``--releases`` published releases of 168 spends each (the ledger, a manifest per release with
its ledger head, and an MLflow store with each release's run mirroring its spends, 28 partition runs and two
anchor runs), then times, on that home:

* reading every anchor (:func:`transit_release.integrity.anchors.home_anchors`: release directories, manifests, MLflow's
  SQLite store read directly);
* the reverse check (:func:`transit_release.integrity.anchors.check_records`);
* a charge of 168 spends without and with the anchor check (``Ledger.charge``);
* for comparison, reading the same MLflow records through MLflow's client in a fresh process (import included),
  which is what the check would cost if it went through MLflow.

    python benchmarks/bench_anchor_check.py [--releases 52] [--repeat 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(base: Path, n_releases: int):
    from transit_release.reports.tracking import store_template
    from transit_release.accounting.events import StabilityHistogramEvent
    from transit_release.accounting.ledger import Ledger
    from transit_release.config import MARGINALS, load_release_config
    from transit_release.files.home import Home

    home = Home.at(base / "home").prepare()
    shutil.copyfile(store_template(), home.mlflow_db)
    cfg = load_release_config()
    ledger = Ledger(home.ledger, key=b"")
    store = sqlite3.connect(home.mlflow_db)
    store.execute("INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage) "
                  "VALUES (1, 'transit-release', 'file:///x', 'active'), (2, 'transit-release-ledger', 'file:///y', "
                  "'active')")

    def run(exp: int, tags: dict, params: dict | None = None) -> None:
        rid = uuid.uuid4().hex
        store.execute("INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, "
                      "start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id) VALUES "
                      "(?, ?, 'LOCAL', '', '', 'bench', 'FINISHED', 0, 0, '', 'active', 'file:///z', ?)",
                      (rid, rid, exp))
        store.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)",
                          [(k, v, rid) for k, v in tags.items()])
        store.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)",
                          [(k, v, rid) for k, v in (params or {}).items()])

    modes = ("bus", "ferry", "lightrail", "train")
    for i in range(n_releases):
        rid = f"opal-week-{i:03d}"
        monday = date(2016, 1, 4) + timedelta(weeks=i)
        events = [StabilityHistogramEvent(release_id=rid, mode=mode, date=(monday + timedelta(days=d)).strftime(
            "%Y%m%d"), marginal=m.name, epsilon=cfg.budgets[m.name].epsilon, delta=cfg.budgets[m.name].delta,
            threshold=34, noise_scale="2", sensitivity=1, unit_of_privacy="trip", neighbouring="replace-one",
            input_fingerprint="f" * 64, code_version="bench") for mode in modes for d in range(7) for m in MARGINALS]
        charged = ledger.charge(events)
        head = ledger.head()
        run(2, {"release_id": rid, "event": "charge", "head_seq": str(head.seq), "head_hash": head.hash})
        d = home.releases / rid
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"release_id": rid, "ledger_head": head.to_dict()}))
        ledger.record_publication(rid, hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest())
        head = ledger.head()
        run(2, {"release_id": rid, "event": "publication", "head_seq": str(head.seq), "head_hash": head.hash})
        run(1, {"release_id": rid, "published": "true"},
            {f"spend.{e.seq}": f"{e.event().component} 1.0 1e-07" for e in charged})
        for p in range(28):
            run(1, {"release_id": rid, "partition": f"p{p}", "mlflow.parentRunId": "x"})
    store.commit()
    store.close()
    return home, ledger


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", type=int, default=52)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from tests.test_accounting import partition_events
    from transit_release.integrity.anchors import check_records, home_anchors

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        home, ledger = build(Path(tmp), args.releases)
        print(f"home: {args.releases} releases, {ledger.head().seq} ledger entries, "
              f"{len(home_anchors(home))} anchors (built in {time.perf_counter() - t:.1f} s)")
        print(f"home_anchors:  {timed(lambda: home_anchors(home), args.repeat) * 1000:8.1f} ms (best of "
              f"{args.repeat})")
        print(f"check_records: {timed(lambda: check_records(home, ledger, set()), args.repeat) * 1000:8.1f} ms")
        n = iter(range(10_000))
        plain = timed(lambda: ledger.charge(partition_events(f"plain{next(n)}", date="20170101")), args.repeat)
        anchored = timed(lambda: ledger.charge(partition_events(f"anchored{next(n)}", date="20170102"),
                                               anchors=lambda: home_anchors(home)), args.repeat)
        print(f"charge of 6 spends: {plain * 1000:8.1f} ms without the anchor check, {anchored * 1000:8.1f} ms with it")
        probe = ("import time; t = time.perf_counter(); from mlflow.tracking import MlflowClient; "
                 "from mlflow.entities import ViewType; c = MlflowClient(tracking_uri='sqlite:///{db}'); "
                 "n = sum(len(c.search_runs([e.experiment_id], run_view_type=ViewType.ALL, max_results=1000)) "
                 "for e in c.search_experiments()); print(n, time.perf_counter() - t)")
        out = subprocess.run([sys.executable, "-c", probe.format(db=home.mlflow_db)], capture_output=True, text=True,
                             cwd=ROOT, timeout=600)
        if out.returncode != 0:
            print(out.stderr[-1500:])
        runs, seconds = out.stdout.split()[-2:] if out.returncode == 0 else ("?", "nan")
        print(f"through MLflow's client in a fresh process (import included): {float(seconds) * 1000:8.1f} ms "
              f"for {runs} runs")


if __name__ == "__main__":
    main()
