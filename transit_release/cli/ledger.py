"""The commands on the ledger and what it records: ``budget`` (read-only, no Prefect), ``audit`` (the audit flow,
on a Prefect API), ``repair`` (the ledger, the home's folders and MLflow's store directly) and ``backup`` (a copy
of the ledger and its anchors outside the home). May touch the ledger, the home and MLflow's store as each says."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transit_release.cli import server
from transit_release.cli.exits import EXIT_AUDIT_FAILED
from transit_release.cli.options import add_home, number
from transit_release.cli.printing import print_audit, print_budget
from transit_release.errors import ConfigError
from transit_release.files.home import Home


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``budget``, ``audit``, ``repair`` and ``backup``."""
    b = sub.add_parser("budget", help="what each unit of privacy has spent and what remains under each cap")
    add_home(b)
    b.add_argument("--policy", help="budget policy YAML (default: the built-in policy)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")

    a = sub.add_parser("audit", help="verify the ledger, releases and MLflow; report the cumulative privacy loss")
    add_home(a)
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.add_argument("--delta-prime", type=number, default=1e-7, help="slack δ' of the advanced-composition bound")
    a.add_argument("--policy", help="budget policy YAML whose caps the report draws (default: the built-in policy)")

    rp = sub.add_parser("repair", help="complete or roll back interrupted publications; remove what dead runs left")
    add_home(rp)
    rp.add_argument("--adopt-ledger-key", action="store_true",
                    help="MAC the existing ledger entries with the key of TRANSIT_RELEASE_LEDGER_KEY_FILE "
                         "(introducing a key on a ledger with history), or record the high-water mark of a keyed "
                         "ledger whose home was moved; check the audit first")

    bk = sub.add_parser("backup", help="copy the ledger (SQLite's online backup) with the anchors it holds into DIR")
    add_home(bk)
    bk.add_argument("--to", required=True, help="a new or empty directory outside the home")


def budget(args, home: Home) -> int:
    """Spent and remaining under each cap, from the ledger and the policy alone (no Prefect, no MLflow)."""
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.integrity.anchors import check_ledger_whole

    home.check_is_home("show")
    policy = load_budget_policy(args.policy)
    # figures of a ledger that fails its checks would not be true: exit 4 with the audit's reason, as a charge
    entries = check_ledger_whole(home, "no figures are shown")
    print_budget(home, policy, entries, args.json)
    return 0


def audit(args, home: Home) -> int:
    """The privacy audit flow on a Prefect API; exit 4 when it fails."""
    from transit_release.accounting.policy import load_budget_policy

    import math

    if not (math.isfinite(args.delta_prime) and 0 < args.delta_prime < 1):
        raise ConfigError(f"--delta-prime {args.delta_prime:g}: the slack δ' of the advanced composition bound must "
                          "lie strictly between 0 and 1 (default 1e-07); nothing was audited")
    home.check_is_home("audit")  # nothing is created in a directory that is not a home
    load_budget_policy(args.policy)
    with server.prefect_api(home, args.verbose):
        from flows.audit import privacy_audit

        result = privacy_audit(home=str(home.root), ledger=args.ledger, delta_prime=args.delta_prime,
                               policy=args.policy)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print_audit(result)
    if not result["ok"]:
        print("transit-release: audit failed: " + "; ".join(result["discrepancies"]), file=sys.stderr)
        return EXIT_AUDIT_FAILED
    return 0


def repair(args, home: Home) -> int:
    """No Prefect needed: the ledger, the file system and MLflow's store directly."""
    home.check_is_home("repair")  # first: nothing is read or made in a --home that is not one
    from transit_release.accounting.ledger import Ledger
    from transit_release.integrity import recovery
    from transit_release.reports.tracking import read_anchors, tag_published_runs

    from transit_release.integrity.anchors import check_ledger_whole

    if not args.adopt_ledger_key:  # (adopting a key makes its own checks, on a ledger these refuse)
        check_ledger_whole(home, "nothing was repaired")
    home.prepare()
    ledger = Ledger(home.ledger)
    if args.adopt_ledger_key:
        print(recovery.adopt_ledger_key(home, ledger, read_anchors(home)))
    result = recovery.repair(home, ledger)
    tagged = tag_published_runs(home, sorted(ledger.published())) if home.mlflow_db.exists() else []
    for rid in result.completed:
        print(f"completed the interrupted publication of {rid}")
    for rid in result.rolled_back:
        print(f"rolled back the interrupted publication of {rid} (its spends stay counted)")
    for rid in tagged:
        print(f"tagged the MLflow run of {rid} as published")
    for p in result.removed:
        print(f"removed {p}")
    if result.catalogue_rewritten:
        print("rewrote releases/catalog.jsonld: it did not list every published release")
    if not (result.completed or result.rolled_back or tagged or result.removed or result.catalogue_rewritten):
        print("nothing to repair")
    return 0


def backup(args, home: Home) -> int:
    """No Prefect, no MLflow import: the ledger, the release directories and MLflow's store read directly."""
    from transit_release.accounting.ledger import Ledger
    from transit_release.integrity import recovery
    from transit_release.integrity.anchors import home_anchors

    home.check_is_home("back up")
    if not home.ledger.is_file():
        raise ConfigError(f"{home.ledger}: no ledger to back up")
    record = recovery.backup_ledger(home, Ledger(home.ledger, read_only=True), Path(args.to), home_anchors(home))
    print(f"backed up {record['entries']} ledger entries (head: entry {record['head']['seq']}) and "
          f"{len(record['anchors'])} anchor(s) to {Path(args.to).resolve()}")
    print("to restore: stop every run, copy ledger.sqlite over the home's (removing its -wal and -shm files); the "
          "next charge refuses it if the home recorded anything after this backup")
    return 0
