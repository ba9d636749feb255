"""A home holding eight published releases of every kind, built from the library without a Prefect flow.

Each release is planned, charged on a real ledger, staged and committed with the functions the flows call
(:func:`transit_release.files.publish.stage_release` with the open-data files, :func:`transit_release.files.publish.commit_release`),
its manifest stating where one passenger stood at publication (:func:`~transit_release.accounting.person.person_loss`
of the ledger so far; basic composition only: its privacy-loss-distribution figure costs a second or two per
release, and the flows' tests state it). Its MLflow run is a real run of the release experiment (named by the id,
tagged published) beside a ledger anchor run of the same id, which the index must never link. The public tables
are small made-up outputs; the internal reports are small pages with the utility summary the index reads. About
twenty seconds for 32 releases.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from tests.test_opendata import UNIVERSE, opal_tables
from transit_release import opendata
from transit_release.accounting.accountant import cumulative_for
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_chain import SPEND
from transit_release.accounting.person import person_loss
from transit_release.accounting.policy import load_budget_policy
from transit_release.config import load_release_config
from transit_release.files import publish
from transit_release.inputs.screening import Period
from transit_release.inputs.sets import format_sets
from transit_release.opendata import settings
from transit_release.releases import opal, sequences, sets, trajectories
from transit_release.reports import release_index

KINDS = ("opal", "sequences", "trajectories", "sets")
PER_KIND = 8


def _release(kind: str, i: int, rng: np.random.Generator):
    """(release id, events, tables, texts, manifest, render_datacard, summary) of the ``i``-th release of ``kind``;
    periods are consecutive weeks from 5 January 2026, each published the Monday after (kinds an hour apart)."""
    created = (date(2026, 1, 12) + timedelta(days=7 * i)).isoformat() + f"T0{KINDS.index(kind) + 1}:00:00+00:00"
    copies = [int(x) for x in rng.integers(1, 9, 3)]
    period = Period(date(2026, 1, 5) + timedelta(days=7 * i), date(2026, 1, 11) + timedelta(days=7 * i))
    if kind == "opal":
        config = load_release_config(None, unit="card")
        rid = opal.release_id_for(period.start, period.end, "card")
        events = opal.plan_spends(period, config, rid, "f" * 64, "v1")
        manifest = opal.build_manifest(rid, period, config, "os-entropy", "v1", created)
        thresholds = {x["file"]: x["threshold"] for x in manifest["privacy"]["marginals"].values()}
        tables = opal_tables(rng, thresholds) if i % 4 else {k: v.iloc[:0] for k, v in opal_tables(rng, thresholds).items()}
        return rid, events, tables, {}, manifest, opal.render_datacard, {"trip_coverage": 0.2 + 0.05 * i}
    if kind == "sequences":
        rid = f"sequences-ngram-{period.start:%Y%m%d}-{period.end:%Y%m%d}"
        budget, _ = sequences.budget_for("ngram", UNIVERSE, 1.0, lmax=6, nmax=3)
        event = sequences.plan_spend(rid, period, budget, "f" * 64, "v1")
        release = sequences.SequenceRelease([((0, 1), copies[0]), ((2,), copies[1]), ((3, 4, 5), copies[2])],
                                            [((0,), 12.5 + copies[0]), ((0, 1), 9.0)])
        tables, texts, manifest = sequences.outputs(rid, period, UNIVERSE, budget, event, "os-entropy", "v1", created,
                                                    release)
        manifest = {**manifest, "created_at": created}
        summary = {"grams.top100.relative_error": 0.4 - 0.03 * i, "sequences.input": 20000.0,
                   "sequences.released": 18000.0 + 100 * i, "count_query.relative_error.max_q5": 0.3}
        return rid, [event], tables, texts, manifest, sequences.render_datacard, summary
    if kind == "trajectories":
        rid = f"trajectories-safepath-{period.start:%Y%m%d}-{period.end:%Y%m%d}"
        setup = trajectories.safepath_setup(UNIVERSE, 1.0, 6, location_taxonomy_height=3)
        event = trajectories.plan_spend(rid, period, setup, "f" * 64, "v1")
        release = [(((0, 7), (3, 17)), copies[0]), (((2, 8),), copies[1])]
        manifest = trajectories.build_manifest(rid, period, UNIVERSE, setup, event, "os-entropy", "v1", created)
        summary = {"points.top100.relative_error": 0.5 - 0.02 * i, "trajectories.input": 5000.0,
                   "trajectories.released": 4000.0}
        return (rid, [event], {"trajectories": trajectories.trajectory_table(release, UNIVERSE)},
                {"trajectories.txt": trajectories.trajectory_text(release, UNIVERSE, rid)}, manifest,
                trajectories.render_datacard, summary)
    rid = f"sets-diffpart-{period.start:%Y%m%d}-{period.end:%Y%m%d}"
    budget = sets.set_budget(UNIVERSE, 1.0, 6)
    event = sets.plan_spend(rid, period, budget, "f" * 64, "v1")
    release = [((0, 1), copies[0]), ((2,), copies[1]), ((4, 29), copies[2])]
    manifest = sets.build_manifest(rid, period, UNIVERSE, sets.describe_input(True, ("train",)), budget, event,
                                   "os-entropy", "v1", created)
    summary = {"itemsets.top100.relative_error": 0.25 + 0.01 * i, "sets.input": 20000.0, "sets.released": 19000.0}
    return (rid, [event], {"sets": sets.set_table(release, UNIVERSE)},
            {"sets.txt": format_sets(release, UNIVERSE, header=rid)}, manifest, sets.render_datacard, summary)


def build(home: Path, per_kind: int = PER_KIND, with_pld: bool = False) -> list[str]:
    """Publish ``per_kind`` releases of every kind into ``home`` in publication order (the kinds interleaved);
    write its index. Returns the release ids, in publication order. ``with_pld``: the manifests state a
    passenger's loss by privacy-loss distributions too, as releases do (a second or two more per release)."""
    from transit_release.reports.tracking import ANCHOR_EXPERIMENT, EXPERIMENT, mlflow_client
    from transit_release.files.home import Home

    home.mkdir(parents=True, exist_ok=True)
    where = Home(home)
    where.prepare()
    policy = load_budget_policy()
    ledger = Ledger(where.ledger)
    client = mlflow_client(where)
    exp, anchors = (client.create_experiment(name) for name in (EXPERIMENT, ANCHOR_EXPERIMENT))
    rng = np.random.default_rng(42)
    order = []
    for i in range(per_kind):
        for kind in KINDS:
            rid, events, tables, texts, manifest, render, summary = _release(kind, i, rng)
            charged = ledger.charge(events)  # within every cap of the shipped policy (distinct periods)
            recorded = [e.event() for e in ledger.entries() if e.entry_type == SPEND]
            these = [e.event() for e in charged]
            head = ledger.head()
            manifest = {**manifest, "ledger_head": {"seq": head.seq, "hash": head.hash, "keyed": False},
                        "privacy": {**manifest["privacy"], "population": these[0].population,
                                    "person_at_publication": {**person_loss(recorded, with_pld=with_pld).to_dict(),
                                                              "ledger_entries": head.seq},
                                    "budget_policy": policy.public_summary(),
                                    "cumulative_at_publication": cumulative_for(recorded, these)}}
            manifest = opendata.with_publication(manifest, settings.load(home))
            staged = publish.stage_release(where.releases, rid, tables, manifest,
                                           render(manifest) + opendata.card_section(manifest), texts,
                                           staging_root=where.staging_root(where.releases),
                                           describe=opendata.describe_release)
            run = client.create_run(exp, run_name=rid, tags={"release_id": rid, "published": "true"}).info.run_id
            publish.commit_release(staged, ledger, run)
            client.create_run(anchors, run_name=f"{rid} publication", tags={"release_id": rid})  # made after it
            report = where.reports / rid
            report.mkdir(parents=True, exist_ok=True)
            (report / release_index.SUMMARY).write_text(json.dumps(summary), encoding="utf-8")
            (report / "report.html").write_text(f"<!doctype html><title>{rid}</title><h1>{rid}</h1>", encoding="utf-8")
            if kind == "opal":
                for site in ("raw", "release"):
                    (report / "data_docs" / site).mkdir(parents=True, exist_ok=True)
                    (report / "data_docs" / site / "index.html").write_text("<!doctype html><title>Data Docs</title>")
            order.append(rid)
    release_index.write_index(where.releases, where.reports, policy)
    return order
