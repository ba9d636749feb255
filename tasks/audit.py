"""Audit steps: verify each record, reconcile them, account, report."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from tasks import data_task
from transit_release import audit, release_index, report
from transit_release.accounting.ledger import Ledger
from transit_release.home import Home


@data_task(name="read-ledger")
def read_ledger(home: Home) -> list:
    return Ledger(home.ledger).entries() if home.ledger.exists() else []


@data_task(name="verify-ledger")
def verify_ledger(home: Home) -> list:
    if not home.ledger.exists():
        return []
    return audit.check_ledger(Ledger(home.ledger).verify)


@data_task(name="reconcile-records")
def reconcile(home: Home, entries: list, ledger_problems: list, mirror: list, delta_prime: float) -> dict:
    published_ids, charged, spends, published = audit.summarise(entries)
    release_problems, leftovers = audit.check_releases(home.releases, published)
    result = audit.AuditResult(
        entries=len(entries), releases_published=published_ids, charged_not_published=charged,
        staging_leftovers=leftovers,
        discrepancies=ledger_problems + release_problems + audit.check_mirror(spends, published, mirror),
        loss=audit.cumulative_loss(entries, delta_prime))
    return result.to_dict()


@data_task(name="write-audit-report")
def write_audit_report(home: Home, result: dict) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = report.write_audit_report(home.reports / f"audit-{stamp}", result)
    (path.parent / release_index.AUDIT_SUMMARY).write_text(json.dumps(release_index.audit_summary(result), indent=1),
                                                           encoding="utf-8")
    return str(path)
