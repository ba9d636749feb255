"""Audit steps: verify each record, reconcile them, account, report."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from tasks import data_task
from transit_release import audit, recovery, release_index
from transit_release.accounting.ledger import Ledger, key_from_environment
from transit_release.home import Home


@data_task(name="read-ledger")
def read_ledger(home: Home) -> list:
    return Ledger(home.ledger, key=b"", read_only=True).entries() if home.ledger.exists() else []


@data_task(name="verify-ledger")
def verify_ledger(home: Home) -> list:
    """The hash chain, the database's integrity and, with a key, every MAC."""
    if not home.ledger.exists():
        return []
    return audit.check_ledger(Ledger(home.ledger, key=key_from_environment(home.root) or b"", read_only=True).verify)


@data_task(name="reconcile-records")
def reconcile(home: Home, entries: list, ledger_problems: list, mirror: list, anchors: list,
              delta_prime: float, allow_unbounded_person_loss: bool = False) -> dict:
    published_ids, charged, spends, published = audit.summarise(entries)
    release_problems, staging, manifests = audit.check_releases(home, published, {e.release_id for e in spends})
    ledger = Ledger(home.ledger, key=b"", read_only=True) if home.ledger.exists() else None
    keyed = ledger.keyed() if ledger else False
    anchor_problems, matched = (audit.check_anchors(ledger.check_anchor, manifests, anchors, keyed,
                                                    published_ids if home.mlflow_db.exists() else ())
                                if ledger else ([], {}))
    key_configured = key_from_environment(home.root) is not None
    pending = [i.release_id for i in recovery.pending_intents(ledger)] if ledger else []
    result = audit.AuditResult(
        entries=len(entries), releases_published=published_ids, charged_not_published=charged,
        pending_publications=pending, staging_leftovers=staging,
        leftovers=[str(p.relative_to(home.root)) for p in recovery.leftovers(home, ledger)],
        anchors_checked=matched, keyed=keyed,
        threat_model=audit.threat_model(keyed, key_configured, matched, allow_unbounded_person_loss),
        discrepancies=(ledger_problems + release_problems + anchor_problems
                       + audit.check_mirror(spends, published, mirror)
                       + audit.check_person_statements(entries, manifests)),
        card_unbounded_periods=audit.card_unbounded_periods(entries),
        loss=audit.cumulative_loss(entries, delta_prime))
    return result.to_dict()


@data_task(name="write-audit-report")
def write_audit_report(home: Home, result: dict, caps: dict) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    from transit_release import report  # matplotlib: imported when a report is drawn
    path = report.write_audit_report(home.reports / f"audit-{stamp}", result, caps)
    (path.parent / release_index.AUDIT_SUMMARY).write_text(json.dumps(release_index.audit_summary(result), indent=1),
                                                           encoding="utf-8")
    return str(path)
