"""Release identity and the privacy ledger: decide the id, check the policy, then charge before any noise."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from tasks import data_task
from transit_release.faults import crash_point
from transit_release.accounting.ledger import Ledger, check_key_records, key_from_environment, refuse_second_charge
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.anchors import check_records, home_anchors
from transit_release.recovery import live_release_ids
from transit_release.home import Home, check_release_id
from transit_release.errors import ConfigError, LedgerIntegrityError
from transit_release.publish import MANIFEST, recognising_earlier_fingerprints, resolve_release_id


@dataclass(frozen=True)
class ReleaseTarget:
    release_id: str
    already_published: bool


@data_task(name="resolve-release")
def resolve_release(home: Home, release_id: str, same: Callable[[list], bool], fingerprint=None,
                    inputs: list[str] | None = None, earlier_ids: list[str] = ()) -> ReleaseTarget:
    """Check the id; detect an identical earlier publication before anything is written.

    Re-publishing an already published release id from the same input and parameters draws no
    noise and spends nothing; any other reuse of an id is refused, so no earlier release, report or
    record is touched. ``same(earlier_events)`` says whether the earlier spends match this run; given this
    run's ``fingerprint`` (or its future) and its ``inputs``, spends recorded with the earlier fingerprints are
    recognised too (:func:`recognising_earlier_fingerprints`). ``earlier_ids``: the default ids an earlier version
    gave the same release; one published from the same input and parameters is this release, already published.
    """
    release_id = check_release_id(release_id)
    if fingerprint is not None and inputs:
        same = recognising_earlier_fingerprints(same, fingerprint, inputs, home.fingerprint_key)
    return ReleaseTarget(*resolve_release_id(home, Ledger(home.ledger), release_id, same, earlier_ids))


def same_spend(component: str, epsilon: float, fingerprint: str) -> Callable[[list], bool]:
    """``same`` for :func:`resolve_release` of a one-spend release kind: an earlier spend of this component, ε and
    input fingerprint."""
    wanted = (component, float(epsilon), fingerprint)
    return lambda earlier: wanted in {(e.component, e.epsilon, e.input_fingerprint) for e in earlier}


@data_task(name="check-budget")
def check_budget(home: Home, events: list, policy: BudgetPolicy) -> dict:
    """The dry run's verdict: would the ledger and the policy allow these spends now? Reads the ledger, writes
    nothing. A ledger the charge would refuse is refused here too, by the same checks, read only: the home's
    records, the ledger's keying, chain, MACs and schema, the key's records beside the key, every anchor."""
    from transit_release.errors import BudgetError

    try:
        if home.ledger.exists():
            ledger = Ledger(home.ledger, read_only=True)
            _refuse_an_emptied_ledger(home, ledger.head().seq, "it would charge nothing")
            check_records(home, ledger, live_release_ids(home))
            existing = ledger.check_before_charge(lambda: home_anchors(home))
        else:  # what a charge would create: an empty ledger, which the key's records may say was emptied
            _refuse_an_emptied_ledger(home, 0, "it would charge nothing")
            check_key_records(key_from_environment(home.root), home.ledger, None)
            existing = []
        policy.check(existing, events)
    except (BudgetError, LedgerIntegrityError, ConfigError) as exc:
        return {"allowed": False, "reason": str(exc)}
    except sqlite3.Error as exc:
        return {"allowed": False, "reason": f"{home.ledger}: not a readable privacy ledger ({exc})"}
    return {"allowed": True, "reason": ""}


def _recorded(home: Home) -> list:
    """The ledger's entries, read only: without creating a ledger that does not exist yet, and without giving a
    file of an older schema version the objects it lacks (the charge does that, after its checks)."""
    return Ledger(home.ledger, read_only=True).entries() if home.ledger.exists() else []


def _refuse_an_emptied_ledger(home: Home, head: int, outcome: str = "nothing was charged") -> None:
    """A new or emptied ledger must not restart the budget of a home that published."""
    if head:
        return
    earlier = sorted(p.parent.name for root in (home.releases, home.test_releases) if root.is_dir()
                     for p in root.glob(f"*/{MANIFEST}"))
    if earlier:
        raise LedgerIntegrityError(f"the ledger {home.ledger} is empty, but this home has published {len(earlier)} "
                                   f"release(s) (first: {earlier[0]}): it is not this home's ledger, or the ledger was "
                                   f"lost; restore it from a backup. {outcome[0].upper()}{outcome[1:]}")


@data_task(name="precheck-budget")
def precheck_budget(home: Home, events: list, policy: BudgetPolicy) -> None:
    """Refuse at once, before MLflow or anything else is touched, what the policy would refuse now (the charge
    checks again, atomically, inside the ledger's transaction)."""
    existing = _recorded(home)
    if events:
        refuse_second_charge(existing, events[0].release_id)  # the charge's own first refusal, in the same order
    policy.check(existing, events)


@data_task(name="charge-budget")
def charge_budget(home: Home, events: list, policy: BudgetPolicy) -> list:
    """Check the budget policy and write every spend to the ledger, in one transaction,
    before any noise is drawn. A refusal writes nothing; so does a ledger that lacks any anchor
    the home holds (:mod:`transit_release.anchors`)."""
    crash_point("before-charge")
    ledger = Ledger(home.ledger)
    _refuse_an_emptied_ledger(home, ledger.head().seq)
    # the home's records must agree with the ledger; every anchor they hold is checked again inside the charge's
    # transaction: a ledger older than any of them is refused
    check_records(home, ledger, live_release_ids(home) - {events[0].release_id} if events else set())
    charged = ledger.charge(events, check=policy.check, anchors=lambda: home_anchors(home))
    if events:
        CHARGED_HERE.append(events[0].release_id)
    crash_point("after-charge")
    return charged


#: The release ids this process has charged (the command says what a run that stopped left of them).
CHARGED_HERE: list[str] = []


@data_task(name="load-budget-policy")
def load_policy(path: str | None) -> BudgetPolicy:
    return load_budget_policy(path)
