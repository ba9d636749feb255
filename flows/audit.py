"""The compliance audit: verify, reconcile, account, report, record."""

from __future__ import annotations

from prefect import flow

from tasks.audit import discard_snapshot, read_ledger, reconcile, snapshot_ledger, verify_ledger, write_audit_report
from tasks.budget import load_policy
from tasks.home import prepare_home
from tasks.report import update_index
from tasks.track import read_anchors, read_mirror, read_mirrored_spends, track_audit
from tasks.summary import REPORTS_OUTCOME
from transit_release.integrity.audit import DEFAULT_DELTA_PRIME
from transit_release.runtime.disclosure import refusals_kept_private


@flow(name="privacy-audit", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def privacy_audit(home: str = ".", ledger: str | None = None, delta_prime: float = DEFAULT_DELTA_PRIME,
                  policy: str | None = None, report_folder: str | None = None) -> dict:
    """Check the ledger, the published releases, the MLflow mirror and the ledger's anchors against one another.
    Every check and the loss read one snapshot of the ledger.

    ``report_folder`` (e.g. ``audit-scheduled``, a scheduled audit's): the report replaces the one in
    ``release_reports/<report_folder>/`` instead of adding a dated folder; the index keeps every audit's figures."""
    where = prepare_home(home, ledger, releasing=False)
    budget_policy = load_policy(policy)
    caps = {c.unit_of_privacy: {"name": c.name, "epsilon": c.epsilon, "delta": c.delta, "measure": c.measure}
            for c in reversed(budget_policy.caps)}  # the first cap of each unit, in its own measure
    snapshot = snapshot_ledger(where)
    try:
        problems = verify_ledger(where, snapshot)
        entries = read_ledger(where, snapshot)
        mirror = read_mirror(where)
        # the spends MLflow mirrors for releases the ledger lacks are counted in the loss (and said so)
        result = reconcile(where, entries, problems, mirror, read_anchors(where), delta_prime,
                           read_mirrored_spends(where, mirror, entries), budget_policy.allow_unbounded_person_loss,
                           snapshot=snapshot, policy=budget_policy)
    finally:
        discard_snapshot(snapshot)
    report_path = write_audit_report(where, result, caps, report_folder)
    run_id = track_audit(where, result, report_path)
    update_index(where, budget_policy)
    return {**result, "report": report_path, "mlflow_run_id": run_id}
