"""The sequence release: read → screen → budget → charge → noisy prefix tree → evaluate → publish → track."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from tasks.budget import charge_budget, load_policy
from tasks.ingest import fingerprint_inputs
from tasks.publish import commit_release
from tasks.report import update_index, write_summary
from tasks.sequences import (evaluate_sequences, plan_sequence_spend, read_sequences, resolve_sequence_release,
                             sanitize_sequences, stage_sequence_release, track_sequence_release, tree_budget)
from tasks.track import mark_published
from transit_release.home import Home
from transit_release.version import code_version


@flow(name="sequence-release")
def sequence_release(input: str, epsilon: float, height: int, variant: str = "hybrid", taxonomy: str | None = None,
                     fanout: int | None = None, home: str = ".", release_id: str | None = None,
                     scope: str | None = None, policy: str | None = None, ledger: str | None = None,
                     quarantine_limit: float = 0.01, queries: int = 40_000,
                     top_k: list[int] | None = None) -> dict:
    """Publish an ε-DP release of passenger sequences (one spend: the whole tree)."""
    where = Home.at(home, ledger)
    budget_policy = load_policy(policy)
    data = read_sequences(input, quarantine_limit)
    budget, tax = tree_budget(data, epsilon, height, variant, taxonomy, fanout)
    fingerprint = fingerprint_inputs([input])
    target = resolve_sequence_release(where, release_id, input, budget, fingerprint)
    if target.already_published:
        return {"release_id": target.release_id, "status": "already published: nothing drawn or spent"}
    scope_name = scope or Path(input).stem
    event = plan_sequence_spend(target.release_id, scope_name, budget, fingerprint, code_version())
    charged = charge_budget(where, [event], budget_policy)
    release = sanitize_sequences(data, budget, tax, charged, target.release_id)
    metrics = evaluate_sequences(data, release, height, queries, top_k if top_k is not None else [100, 200, 300])
    staged = stage_sequence_release(where, target.release_id, scope_name, release, data, budget, event,
                                    code_version())
    run_id = track_sequence_release(where, staged.manifest, charged, metrics, data.quarantine_counts)
    write_summary(where, target.release_id, metrics)
    commit_release(where, staged)
    mark_published(where, run_id)
    update_index(where)
    return {"release_id": target.release_id, "status": "published", "release_dir": str(staged.final_dir),
            "epsilon": staged.manifest["privacy"]["epsilon"], "metrics": metrics, "mlflow_run_id": run_id,
            "mlflow_ui": where.mlflow_ui_command()}
