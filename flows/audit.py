"""The compliance audit: verify, reconcile, account, report, record."""

from __future__ import annotations

from prefect import flow

from tasks.audit import read_ledger, reconcile, verify_ledger, write_audit_report
from tasks.report import update_index
from tasks.track import read_mirror, track_audit
from transit_release.audit import DEFAULT_DELTA_PRIME
from transit_release.home import Home


@flow(name="privacy-audit")
def privacy_audit(home: str = ".", ledger: str | None = None, delta_prime: float = DEFAULT_DELTA_PRIME) -> dict:
    """Check the ledger, the published releases and the MLflow mirror against one another."""
    where = Home.at(home, ledger)
    problems = verify_ledger(where)
    entries = read_ledger(where)
    mirror = read_mirror(where)
    result = reconcile(where, entries, problems, mirror, delta_prime)
    report_path = write_audit_report(where, result)
    run_id = track_audit(where, result, report_path)
    update_index(where)
    return {**result, "report": report_path, "mlflow_run_id": run_id}
