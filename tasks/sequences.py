"""Tasks of the sequence release (prefix tree)."""

from __future__ import annotations

import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from prefect import get_run_logger

from tasks import data_task
from tasks.budget import ReleaseTarget
from tasks.track import mlflow_client, log_to_run, experiment_id
from transit_release import publish, sequence_release
from transit_release.accounting.ledger import Ledger
from transit_release.errors import InputDataError
from transit_release.home import Home
from transit_release.mechanisms.prefix_tree import Taxonomy, TreeBudget, check_tree_size
from transit_release.noise import NoiseSource
from transit_release.sequence_io import SequenceInput, format_sequences, read_sequence_file


@data_task(name="read-sequences")
def read_sequences(path: str, quarantine_limit: float) -> SequenceInput:
    """Read and screen the sequences; too many bad lines abort (counts and line numbers only)."""
    data = read_sequence_file(path)
    bad = sum(data.quarantine_counts.values())
    if data.lines and bad / data.lines > quarantine_limit:
        parts = ", ".join(f"{r} {c:,}" for r, c in data.quarantine_counts.items())
        raise InputDataError(f"sequence file {Path(path).name}: {bad:,} of {data.lines:,} lines "
                             f"({bad / data.lines:.2%}) would be quarantined, more than the limit of "
                             f"{quarantine_limit:.2%}: {parts}")
    if bad:
        get_run_logger().warning("quarantined %d of %d lines, by reason %s", bad, data.lines, data.quarantine_counts)
    return data


@data_task(name="tree-budget")
def tree_budget(data: SequenceInput, epsilon: float, height: int, variant: str, taxonomy: str | None,
                fanout: int | None) -> tuple[TreeBudget, Taxonomy | None]:
    if variant == "hybrid":
        if (taxonomy is None) == (fanout is None):
            raise InputDataError("the hybrid variant needs exactly one of --taxonomy FILE or --fanout F")
        tax = (sequence_release.load_taxonomy(taxonomy, data.vocabulary) if taxonomy
               else Taxonomy.from_fanout(data.sequences.n_locations, fanout))
    else:
        tax = None
    try:
        budget = TreeBudget.of(epsilon, height, variant, tax)
        check_tree_size(budget, data.sequences.n_locations)
        return budget, tax
    except ValueError as exc:
        raise InputDataError(str(exc)) from None


@data_task(name="resolve-sequence-release")
def resolve_sequence_release(home: Home, requested: str | None, input_path: str, budget: TreeBudget,
                             fingerprint: str) -> ReleaseTarget:
    rid = publish.check_release_id(requested or f"sequences-{Path(input_path).stem}")
    wanted = ("prefix_tree", float(budget.epsilon), fingerprint)
    same = lambda earlier: wanted in {(e.component, e.epsilon, e.input_fingerprint) for e in earlier}  # noqa: E731
    return ReleaseTarget(rid, publish.already_published(home.releases, Ledger(home.ledger), rid, same))


@data_task(name="plan-sequence-spend")
def plan_sequence_spend(release_id: str, scope: str, budget: TreeBudget, fingerprint: str, code_version: str):
    return sequence_release.plan_spend(release_id, scope, budget, fingerprint, code_version)


@data_task(name="sanitize-sequences")
def sanitize_sequences(data: SequenceInput, budget: TreeBudget, taxonomy: Taxonomy | None, charged: list,
                       release_id: str) -> list:
    """Build the noisy tree only after its spend is on the ledger."""
    if not any(e.event().kind == "prefix_tree" and e.release_id == release_id for e in charged):
        raise RuntimeError("no ledger charge for this sequence release: noise is never drawn before its spend")
    _, release = sequence_release.sanitize(data.sequences, budget, taxonomy, NoiseSource.from_environment(),
                                           release_id)
    return release


@data_task(name="evaluate-sequences")
def evaluate_sequences(data: SequenceInput, release: list, height: int, queries: int, top_k: list[int]) -> dict:
    return sequence_release.evaluate(data.sequences, release, height, queries, tuple(top_k))


@data_task(name="stage-sequence-release")
def stage_sequence_release(home: Home, release_id: str, scope: str, release: list, data: SequenceInput,
                           budget: TreeBudget, event, code_version: str) -> publish.StagedRelease:
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = sequence_release.build_manifest(release_id, scope, budget, event,
                                               NoiseSource.from_environment().kind, code_version, created)
    text = format_sequences(release, data.vocabulary, header=f"{release_id}: one passenger sequence per line")
    n_lines = sum(c for _, c in release)
    return publish.stage_release(home.releases, release_id, {}, manifest,
                                 sequence_release.render_datacard(manifest, n_lines), texts={"sequences.txt": text})


@data_task(name="track-sequence-release")
def track_sequence_release(home: Home, manifest: dict, charged: list, metrics: dict, quarantine: dict) -> str:
    client = mlflow_client(home)
    exp = experiment_id(client, home)
    p = manifest["privacy"]
    rid = manifest["release_id"]
    tags = {"release_id": rid, "kind": "sequences", "mechanism": "prefix_tree", "unit_of_privacy": p["unit_of_privacy"],
            "neighbouring": "add-remove-one", "scope": manifest["scope"], "period": manifest["scope"],
            "noise_source": manifest["noise_source"],
            "code_version": manifest["code_version"], "published": "false"}
    run = client.create_run(exp, run_name=rid, tags=tags).info.run_id
    params = {"mechanism": "prefix_tree", "epsilon": p["epsilon"], "height": p["height"], "fanout": p["fanout"],
              "variant": manifest["privacy"]["mechanism"].split(", ")[1].split(" ")[0],
              "station_threshold": p["station_threshold"], "generalized_threshold": p["generalized_threshold"]}
    for e in charged:
        ev = e.event()
        params.update({"prefix_tree.epsilon": ev.epsilon, "prefix_tree.delta": ev.delta,
                       "prefix_tree.ledger_seq": e.seq})
    m = {"privacy.epsilon": p["epsilon"], "privacy.delta": p["delta"], **metrics,
         "rows.released": manifest["files"]["sequences.txt"]["rows"],
         **{f"input.quarantined.{k}": v for k, v in quarantine.items()}}
    log_to_run(client, run, params, m)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "manifest.json"
        f.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        client.log_artifact(run, str(f))
        g = Path(tmp) / "ledger_spends.json"
        g.write_text(json.dumps([{"seq": e.seq, "hash": e.hash, "event": e.data()} for e in charged], indent=1))
        client.log_artifact(run, str(g))
    client.set_terminated(run, "FINISHED", end_time=int(time.time() * 1000))
    return run
