"""MLflow: one run per release, ledger anchors, audits.

A release's run (experiment ``transit-release``, named by the release id, tagged ``transit_release.role =
release``) mirrors the ledger (every spend as a ``spend.<seq>`` parameter) and carries the internal utility metrics
(the same names in every release of a kind, so that the runs view compares weeks side by side; an Opal release's
partitions as metric histories, one value per day of the period, and as the table ``partitions.csv``), the
manifest, the report and its figures. The ledger head is anchored in MLflow after every charge and every
publication (the experiment ``transit-release-ledger``, role ``ledger-anchor``), so rewriting or truncating the
ledger file alone is noticed by the audit; audits are runs of ``transit-release-audit`` (role ``audit``). MLflow is
for review; the ledger stays the source of truth.

Each run is written in a few transactions (one ``log_batch`` per hundred parameters), and the report's files are
copied once, without the Data Docs (they stay in the report's folder, which the run names).

MLflow is imported inside the functions (importing this module costs no MLflow import), and this is the one place
of the library that touches it: the flows' tasks (:mod:`tasks.track`) are each one call of a function here.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_chain import anchor_mac
from transit_release.files.home import Home, cache_dir
from transit_release.files.publish import rows_released
from transit_release.integrity import audit

EXPERIMENT = "transit-release"
AUDIT_EXPERIMENT = "transit-release-audit"
ANCHOR_EXPERIMENT = "transit-release-ledger"

#: The tag that says what a run of the tool is: a release's own run (:data:`RELEASE_ROLE`), a ledger anchor or an
#: audit. A release's run is the one run of the experiment ``transit-release`` with ``release_id = <id>`` and this
#: tag ``= release`` (anchor runs carry the release id too, in their own experiment).
ROLE_TAG = "transit_release.role"
RELEASE_ROLE, ANCHOR_ROLE, AUDIT_ROLE = "release", "ledger-anchor", "audit"


@contextmanager
def _store_lock(home: Home):
    """Serialise the creation of the MLflow store and experiments across processes: MLflow's
    SQLite migrations and ``create_experiment`` race when several releases start at once."""
    home.root.mkdir(parents=True, exist_ok=True)
    with open(home.root / ".mlflow.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def store_template() -> Path:
    """An empty MLflow store made by the installed MLflow: its tables at the current schema version and no
    experiment. Creating a store runs MLflow's ~50 schema migrations (about 3 s); a new home copies this one
    instead, and MLflow adds its default experiment itself when the copy is first opened, as for a store it
    created. Made once per versions of the libraries that shape the schema."""
    import alembic
    import mlflow
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    path = cache_dir() / (f"mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}-"
                           f"alembic-{alembic.__version__}-empty-store.db")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
        with sqlite3.connect(tmp) as db:  # the default experiment is made per store, where it is opened
            db.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(tmp, path)  # atomic: concurrent makers race harmlessly
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _new_store(home: Home) -> None:
    """The home's store from the template (under the store lock, so no other process is creating it; a copy a
    killed run left half-made is removed first)."""
    for stale in home.root.glob(f".{home.mlflow_db.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    tmp = home.mlflow_db.with_name(f".{home.mlflow_db.name}.{uuid.uuid4().hex}.tmp")
    try:
        shutil.copyfile(store_template(), tmp)  # created under the home's umask, like MLflow's own file
        os.replace(tmp, home.mlflow_db)
    finally:
        tmp.unlink(missing_ok=True)


def mlflow_client(home: Home):
    from mlflow.tracking import MlflowClient

    with _store_lock(home):
        if not home.mlflow_db.exists():
            _new_store(home)
        client = MlflowClient(tracking_uri=home.mlflow_uri)
        client.search_experiments(max_results=1)  # opened under the lock (MLflow adds a new store's default experiment)
    return client


#: MLflow 3's UI opens an experiment without this tag on its (empty) GenAI traces view; with it, on the runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def _experiment(client, home: Home, name: str, artifacts: Path) -> str:
    with _store_lock(home):
        exp = client.get_experiment_by_name(name)
        if exp is None:
            return client.create_experiment(name, artifact_location=artifacts.as_uri(), tags=EXPERIMENT_KIND)
        for key, value in EXPERIMENT_KIND.items():  # an experiment made before the tag was set
            if exp.tags.get(key) != value:
                client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id


def experiment_id(client, home: Home) -> str:
    return _experiment(client, home, EXPERIMENT, home.mlflow_artifacts)


def log_to_run(client, run_id: str, params: dict, metrics: dict, tags: dict | None = None,
               series: dict[str, list[tuple[int, int, float]]] | None = None) -> None:
    """Parameters, metrics (``series``: metric histories, ``key → [(step, timestamp in ms, value)]``) and tags in as
    few ``log_batch`` calls (transactions) as MLflow's limits allow (100 parameters, 1000 metrics, 100 tags each);
    missing and NaN values are left out."""
    from mlflow.entities import Metric, Param, RunTag

    def finite(v) -> bool:
        return v is not None and not math.isnan(float(v))

    now = int(time.time() * 1000)
    p = [Param(k, str(v)) for k, v in params.items()]
    m = [Metric(k, float(v), now, 0) for k, v in metrics.items() if finite(v)]
    m += [Metric(k, float(v), at, step) for k, points in (series or {}).items() for step, at, v in points if finite(v)]
    t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    for i in range(max(math.ceil(len(p) / 100), math.ceil(len(m) / 1000), math.ceil(len(t) / 100), 1)):
        client.log_batch(run_id, metrics=m[i * 1000:(i + 1) * 1000], params=p[i * 100:(i + 1) * 100],
                         tags=t[i * 100:(i + 1) * 100])


def check_store(home: Home) -> None:
    """Before any spend: the MLflow store opens and its experiments exist (a failure here costs nothing)."""
    client = mlflow_client(home)
    experiment_id(client, home)
    _experiment(client, home, ANCHOR_EXPERIMENT, home.mlflow_artifacts / "ledger")


def anchor_ledger(home: Home, release_id: str, event: str) -> dict:
    """Record the ledger's head (sequence number and hash) in MLflow, outside the ledger file."""
    ledger = Ledger(home.ledger)
    head = ledger.head()
    client = mlflow_client(home)
    exp = _experiment(client, home, ANCHOR_EXPERIMENT, home.mlflow_artifacts / "ledger")
    tags = {"release_id": release_id, "event": event, "head_seq": str(head.seq), "head_hash": head.hash,
            "keyed": str(ledger.keyed()).lower(), ROLE_TAG: ANCHOR_ROLE}
    if ledger.key:  # only the key's holder can make an anchor that passes for this tool's
        tags["head_mac"] = anchor_mac(ledger.key, head.seq, head.hash)
    run = client.create_run(exp, run_name=f"{release_id} {event}", tags=tags).info.run_id
    client.set_terminated(run, "FINISHED")
    return head.to_dict()


def spend_mirror(charged: list) -> dict[str, str]:
    """``spend.<seq>`` → ``<component> <ε> <δ>``: the ledger's spends as run parameters (what the audit compares)."""
    out = {}
    for e in charged:
        ev = e.event()
        out[f"spend.{e.seq}"] = f"{ev.component} {ev.epsilon!r} {ev.delta!r}"
    return out


#: What of a release's report folder its run keeps (the report and its figures; the validation results): the Data
#: Docs stay in the folder, which the run's ``report`` tag names.
REPORT_ARTIFACTS = ("*.html", "*.png", "*.json")


def _within_home(home: Home, path: Path) -> str:
    """``path`` relative to the home (``release_reports/<id>/report.html``): a run names its report the same way
    wherever the home is (moved, restored from a backup), and no run says where the home lives."""
    try:
        return Path(path).resolve().relative_to(home.root.resolve()).as_posix()
    except ValueError:
        return str(path)


def track_release(home: Home, manifest: dict, charged: list, record: dict, report_dir: str | None) -> str:
    """One run per release (named by its id) with the same tags and metric names for every kind; returns its id."""
    client = mlflow_client(home)
    exp = experiment_id(client, home)
    privacy = manifest["privacy"]
    rid = manifest["release_id"]
    period = manifest.get("period") or {}
    tags = {"release_id": rid, ROLE_TAG: RELEASE_ROLE, "kind": record["kind"], "mechanism": record["mechanism"],
            "unit_of_privacy": privacy["unit_of_privacy"],
            "neighbouring": charged[0].event().neighbouring if charged else "",
            "period_start": period.get("start", ""), "period_end": period.get("end", ""),
            "period": f"{period.get('start', '')}..{period.get('end', '')}",
            "noise_source": manifest["noise_source"], "code_version": manifest["code_version"],
            "published": "false", **record.get("tags", {})}
    if report_dir:
        tags["report"] = _within_home(home, Path(report_dir) / "report.html")
    run = client.create_run(exp, run_name=rid, tags=tags).info.run_id
    seqs = [e.seq for e in charged]
    cumulative = privacy.get("cumulative_at_publication") or {}
    params = {"mechanism": record["mechanism"], "epsilon": privacy["epsilon"], "delta": privacy["delta"],
              "ledger.first_seq": min(seqs), "ledger.last_seq": max(seqs), "ledger.spends": len(seqs),
              "ledger.head_seq": manifest.get("ledger_head", {}).get("seq"),
              **record.get("params", {}), **spend_mirror(charged)}
    metrics = {"privacy.epsilon": privacy["epsilon"], "privacy.delta": privacy["delta"],
               "privacy.spends": len(seqs), "privacy.cumulative_epsilon": cumulative.get("epsilon"),
               "privacy.cumulative_delta": cumulative.get("delta"),
               "rows.released": rows_released(manifest["files"]),
               **record.get("metrics", {})}
    log_to_run(client, run, params, metrics, series=record.get("series"))
    with tempfile.TemporaryDirectory() as tmp:
        files = {"ledger_spends.json": [{"seq": e.seq, "hash": e.hash, "event": e.data()} for e in charged],
                 "manifest.json": manifest, **record.get("artifacts", {})}
        texts = {name: json.dumps(content, indent=1, ensure_ascii=False) for name, content in files.items()}
        for name, text in {**texts, **record.get("texts", {})}.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        client.log_artifacts(run, tmp)
    if report_dir and Path(report_dir).is_dir():
        for f in sorted(f for pattern in REPORT_ARTIFACTS for f in Path(report_dir).glob(pattern)):
            client.log_artifact(run, str(f), artifact_path="report")  # copied once, straight from the report
    client.set_terminated(run, "FINISHED")
    return run


def mark_published(home: Home, run_id: str) -> None:
    """Tag the run once the release is visible (runs of failed publications stay ``false``)."""
    mlflow_client(home).set_tag(run_id, "published", "true")


def _all_runs(client, experiment_name: str) -> list:
    from mlflow.entities import ViewType

    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        return []
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=1000,
                                  page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _mirrored_spends(params: dict) -> dict[int, tuple[str, float, float]]:
    """The spends a run mirrors: ``spend.<seq>`` parameters, or the older per-component form
    (``<component>.ledger_seq`` with ``<component>.epsilon`` and ``.delta``) of runs made before it."""
    seqs = {}
    for k, v in params.items():
        try:
            if k.startswith("spend.") and k[6:].isdigit():
                component, eps, delta = v.rsplit(" ", 2)
                seqs[int(k[6:])] = (component, float(eps), float(delta))
            elif k.endswith(".ledger_seq"):
                component = k[: -len(".ledger_seq")]
                seqs[int(v)] = (component, float(params[f"{component}.epsilon"]), float(params[f"{component}.delta"]))
        except (KeyError, ValueError):
            seqs[-1] = (f"unreadable parameter {k}", float("nan"), float("nan"))  # the audit names the difference
    return seqs


def read_mirror(home: Home) -> list:
    """Every run of the release experiment, deleted ones included, as the audit needs them."""
    from transit_release.integrity.audit import MirrorRun

    if not home.mlflow_db.exists():
        return []
    out = []
    try:
        runs = _all_runs(mlflow_client(home), EXPERIMENT)
    except Exception:  # noqa: BLE001 - a store that cannot be read: read_anchors reports it, once
        return []
    for r in runs:
        tags = r.data.tags
        if "release_id" not in tags:
            continue
        out.append(MirrorRun(run_id=r.info.run_id, release_id=tags["release_id"],
                             parent="mlflow.parentRunId" not in tags,
                             deleted=r.info.lifecycle_stage == "deleted",
                             published_tag=tags.get("published"), ledger_seqs=_mirrored_spends(r.data.params),
                             partition=tags.get("partition")))
    return out


def read_anchors(home: Home) -> list[dict]:
    """The ledger heads anchored in MLflow (deleted anchor runs included: deleting one hides nothing)."""
    if not home.mlflow_db.exists():
        return []
    out = []
    try:
        runs = _all_runs(mlflow_client(home), ANCHOR_EXPERIMENT)
    except Exception as exc:  # noqa: BLE001 - the audit reports a store it cannot read, it does not crash on it
        return [{"problem": f"the MLflow store {home.mlflow_db.name} cannot be read ({type(exc).__name__})"}]
    for r in runs:
        t = r.data.tags
        if "head_seq" in t and "head_hash" in t:
            try:
                seq = int(t["head_seq"])
            except ValueError:
                seq = -1  # a forged tag: no ledger holds entry -1, so the audit names it
            out.append({"run_id": r.info.run_id, "release_id": t.get("release_id", ""), "event": t.get("event", ""),
                        "seq": seq, "hash": t["head_hash"], "keyed": t.get("keyed") == "true",
                        "mac": t.get("head_mac"), "deleted": r.info.lifecycle_stage == "deleted"})
    return out


def read_mirrored_spends(home: Home, mirror: list, entries: list) -> dict[str, list[dict]]:
    """Release id → the spends its MLflow run recorded (``ledger_spends.json``: seq, hash, event), for the releases of
    ``mirror`` (:func:`read_mirror`) that the ledger's ``entries`` lack: the audit counts them in the loss. A run
    whose artifact cannot be read is left out (its release is a discrepancy already)."""
    wanted = {r.release_id for r in mirror} - {e.release_id for e in entries}
    if not wanted or not home.mlflow_db.exists():
        return {}
    out: dict[str, list[dict]] = {}
    try:
        client = mlflow_client(home)
        runs = _all_runs(client, EXPERIMENT)
    except Exception:  # noqa: BLE001 - reported by read_anchors
        return {}
    for r in runs:
        rid = r.data.tags.get("release_id")
        if rid not in wanted or "mlflow.parentRunId" in r.data.tags:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = client.download_artifacts(r.info.run_id, "ledger_spends.json", tmp)
                spends = json.loads(Path(path).read_text(encoding="utf-8"))
            except Exception:  # noqa: BLE001 - an artifact removed or altered: counted as far as it can be read
                continue
        if isinstance(spends, list):  # the run's start stands for the spends' time (a little after their charge)
            at = datetime.fromtimestamp(r.info.start_time / 1000, timezone.utc).isoformat(timespec="microseconds")
            out.setdefault(rid, []).extend({"recorded_at": at, **s} for s in spends if isinstance(s, dict))
    return out


def tag_published_runs(home: Home, published: list[str]) -> list[str]:
    """Repair: tag ``published=true`` on the runs of releases the ledger records as published."""
    if not home.mlflow_db.exists():
        return []
    client = mlflow_client(home)
    fixed = []
    for r in _all_runs(client, EXPERIMENT):
        tags = r.data.tags
        if (tags.get("release_id") in published and "mlflow.parentRunId" not in tags
                and tags.get("published") != "true" and r.info.lifecycle_stage != "deleted"):
            client.set_tag(r.info.run_id, "published", "true")
            fixed.append(tags["release_id"])
    return sorted(fixed)


def track_audit(home: Home, result: dict, report_path: str) -> str:
    """One run per audit in the ``transit-release-audit`` experiment."""
    client = mlflow_client(home)
    exp_id = _experiment(client, home, AUDIT_EXPERIMENT, home.mlflow_artifacts / "audit")
    tags = {"kind": "audit", "status": "passed" if result["ok"] else "failed", ROLE_TAG: AUDIT_ROLE}
    run = client.create_run(exp_id, run_name=Path(report_path).parent.name, tags=tags).info.run_id
    metrics = {"entries": result["entries"], "releases_published": len(result["releases_published"]),
               "releases_charged_not_published": len(result["charged_not_published"]),
               "discrepancies": len(result["discrepancies"])}
    params = {}
    for population, person in result["loss"].get(audit.PERSON, {}).items():
        metrics[f"person.{population}.epsilon"] = person["basic"]["epsilon"]
        metrics[f"person.{population}.delta"] = person["basic"]["delta"]
        metrics[f"person.{population}.bounded"] = float(person["bounded"])
        if person["pld"]:
            metrics[f"person.{population}.pld_epsilon"] = person["pld"]["epsilon"]
    for unit, loss in audit.unit_losses(result["loss"]).items():
        metrics[f"{unit}.epsilon"] = loss["basic"]["epsilon"]
        metrics[f"{unit}.delta"] = loss["basic"]["delta"]
        if loss.get("advanced"):
            metrics[f"{unit}.advanced_epsilon"] = loss["advanced"]["epsilon"]
            params[f"{unit}.advanced_delta_prime"] = loss["advanced"]["delta_prime"]
        for mode, x in loss["per_mode"].items():
            metrics[f"{unit}.{mode}.epsilon"] = x["epsilon"]
    log_to_run(client, run, params, metrics)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "audit.json"
        p.write_text(json.dumps(result, indent=2), encoding="utf-8")
        client.log_artifact(run, str(p))
    client.log_artifacts(run, str(Path(report_path).parent), artifact_path="report")
    client.set_terminated(run, "FINISHED")
    return run
