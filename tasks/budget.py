"""Release identity and the privacy ledger: decide the id, check the policy, then charge before any noise."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from tasks import data_task
from transit_release.runtime.faults import crash_point
from transit_release.accounting.ledger import Ledger, refuse_second_charge
from transit_release.accounting.ledger_schema import storage_error
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.errors import ConfigError, LedgerIntegrityError
from transit_release.files.home import Home, check_release_id, live_release_ids
from transit_release.files.publish import resolve_release_id
from transit_release.inputs.tables import recognising_earlier_fingerprints
from transit_release.integrity.anchors import check_ledger_whole, check_records, home_anchors, refuse_an_emptied_ledger
from transit_release.runtime.outcome import exit_code


@dataclass(frozen=True)
class ReleaseTarget:
    release_id: str
    already_published: bool


@data_task(name="resolve-release")
def resolve_release(home: Home, release_id: str, same: Callable[[list], bool], fingerprint=None,
                    inputs: list[str] | None = None, earlier_ids: list[str] = (),
                    earlier_same: Callable[[list], bool] | None = None) -> ReleaseTarget:
    """Check the id; detect an identical earlier publication before anything is written.

    Re-publishing an already published release id from the same input and parameters draws no
    noise and spends nothing; any other reuse of an id is refused, so no earlier release, report or
    record is touched. ``same(earlier_events)`` says whether the earlier spends match this run; given this
    run's ``fingerprint`` (or its future) and its ``inputs``, spends recorded with the earlier fingerprints are
    recognised too (:func:`recognising_earlier_fingerprints`). ``earlier_ids``: the default ids an earlier version
    gave the same release; one published from the same input and parameters is this release, already published.
    ``earlier_same`` (default ``same``) judges their spends: a kind whose default mechanism changed recognises the
    former default mechanism's spend there.
    """
    release_id = check_release_id(release_id)
    earlier_same = earlier_same or same
    if fingerprint is not None and inputs:
        same = recognising_earlier_fingerprints(same, fingerprint, inputs, home.fingerprint_key)
        earlier_same = recognising_earlier_fingerprints(earlier_same, fingerprint, inputs, home.fingerprint_key)
    return ReleaseTarget(*resolve_release_id(home, Ledger(home.ledger), release_id, same, earlier_ids, earlier_same))


def same_spend(component: str, epsilon: float, fingerprint: str) -> Callable[[list], bool]:
    """``same`` for :func:`resolve_release` of a one-spend release kind: an earlier spend of this component, ε and
    input fingerprint."""
    wanted = (component, float(epsilon), fingerprint)
    return lambda earlier: wanted in {(e.component, e.epsilon, e.input_fingerprint) for e in earlier}


@data_task(name="check-earlier-charge")
def refuse_a_dead_runs_charge(home: Home, release_id: str) -> None:
    """With the release's lock held (:mod:`transit_release.runtime.release_lock`): a release already charged and not
    published was charged by a run that is dead; refused with what became of it and what ``repair`` does."""
    from transit_release.integrity.recovery import refuse_a_dead_runs_charge as refuse

    if home.ledger.exists():
        refuse(Ledger(home.ledger, key=b"", read_only=True), release_id)


def input_content(content):
    """The content a kind read (:class:`~transit_release.inputs.content.InputContent`), gathered from the folder
    the partition steps left it in when that is what the kind gives."""
    from pathlib import Path

    from transit_release.inputs.content import InputContent, gather_partitions

    if content is None:
        return InputContent(())
    return gather_partitions(Path(content)) if isinstance(content, (str, Path)) else content


@data_task(name="record-claim")
def record_claim(home: Home, content, events: list) -> str:
    """Key what the records are (:mod:`transit_release.accounting.claims`) and refuse at once (exit 3, nothing
    charged) a release whose records a charged release of another population read, or whose date-less file a charged
    release read for another period; else record them privately,
    before the charge, which checks again inside the ledger's transaction. Returns the attempt's token (no data)."""
    from transit_release.accounting.claims import ClaimStore, charged_populations, claim_of, refuse_claim

    store = ClaimStore.of(home)
    claim = claim_of(home.fingerprint_key(), input_content(content))
    existing = _recorded(home)
    refuse_claim(store, claim, existing, events)
    same = [rid for rid, p in charged_populations(existing).items() if p == events[0].population]
    return store.record(events[0].release_id, claim, same)


@data_task(name="forget-claim")
def forget_claim(home: Home, attempt: str, release_id: str) -> None:
    """Remove the claim of a run the ledger never charged (best effort: it would be ignored anyway). A run that
    failed after its charge committed (its confirmation refused) keeps it: its spends count, so does its claim."""
    from transit_release.accounting.claims import ClaimStore

    try:
        if release_id in {e.release_id for e in _recorded(home) if e.entry_type == "spend"}:
            return
        ClaimStore.of(home).forget(attempt)
    except (OSError, sqlite3.Error, LedgerIntegrityError):
        pass


@data_task(name="check-budget")
def check_budget(home: Home, events: list, policy: BudgetPolicy, content=None) -> dict:
    """The dry run's verdict: would the ledger and the policy allow these spends now, and (given the records'
    ``content``) no release of another population read the same records? Reads the ledger, writes nothing. A
    ledger the charge would refuse is refused here too, by the same checks, read only: the home's records, the
    ledger's keying, chain, MACs and schema, the key's records beside the key, every anchor."""
    from transit_release.errors import BudgetError

    try:
        existing = check_ledger_whole(home, "it would charge nothing")
        policy.check(existing, events)
        if content is not None:
            from transit_release.accounting.claims import ClaimStore, claim_of, refuse_claim

            refuse_claim(ClaimStore.of(home), claim_of(home.fingerprint_key(), input_content(content)), existing,
                         events)
    except (BudgetError, LedgerIntegrityError, ConfigError) as exc:
        return {"allowed": False, "reason": str(exc), "exit": exit_code(exc)}
    except sqlite3.Error as exc:
        storage = storage_error(home.ledger, exc)
        if storage is not None:
            raise storage from None  # the dry run fails (exit 1): a full disk says nothing of the ledger
        return {"allowed": False, "reason": f"{home.ledger}: not a readable privacy ledger ({exc})", "exit": 4}
    return {"allowed": True, "reason": "", "exit": 0}


def _recorded(home: Home) -> list:
    """The ledger's entries, read only: without creating a ledger that does not exist yet, and without giving a
    file of an older schema version the objects it lacks (the charge does that, after its checks)."""
    return Ledger(home.ledger, read_only=True).entries() if home.ledger.exists() else []


_refuse_an_emptied_ledger = refuse_an_emptied_ledger


@data_task(name="precheck-budget")
def precheck_budget(home: Home, events: list, policy: BudgetPolicy) -> None:
    """Refuse at once, before MLflow or anything else is touched, what the policy would refuse now (the charge
    checks again, atomically, inside the ledger's transaction). The ledger's integrity first, as every command
    checks it before Prefect starts (a scheduled run starts here): exit 4 with the charge's reason."""
    existing = check_ledger_whole(home, "nothing was charged")
    if events:
        refuse_second_charge(existing, events[0].release_id)  # the charge's own first refusal, in the same order
    policy.check(existing, events)


@data_task(name="charge-budget")
def charge_budget(home: Home, events: list, policy: BudgetPolicy, attempt: str | None = None) -> list:
    """Check the budget policy (and, given the ``attempt`` :func:`record_claim` recorded, that no release of
    another population read the same records) and write every spend to the ledger, in one transaction,
    before any noise is drawn. A refusal writes nothing; so does a ledger that lacks any anchor
    the home holds (:mod:`transit_release.integrity.anchors`)."""
    crash_point("before-charge")
    ledger = Ledger(home.ledger)
    _refuse_an_emptied_ledger(home, ledger.head().seq)
    # the home's records must agree with the ledger; every anchor they hold is checked again inside the charge's
    # transaction: a ledger older than any of them is refused
    check_records(home, ledger, live_release_ids(home) - {events[0].release_id} if events else set())
    check = policy.check
    if attempt is not None:
        from transit_release.accounting.claims import ClaimStore, overlap_check

        overlap = overlap_check(ClaimStore.of(home), attempt)

        def check(existing, requested):
            policy.check(existing, requested)
            overlap(existing, requested)
    charged = ledger.charge(events, check=check, anchors=lambda: home_anchors(home))
    if events:
        CHARGED_HERE.append(events[0].release_id)
    crash_point("after-charge")
    return charged


#: The release ids this process has charged (the command says what a run that stopped left of them).
CHARGED_HERE: list[str] = []


@data_task(name="declared-population")
def declared_population(home: Home, policy: BudgetPolicy, name: str | None) -> str:
    """The population a release names, declared in the budget policy (before any input is read; exit 2 otherwise:
    :meth:`~transit_release.accounting.policy.BudgetPolicy.population`)."""
    from transit_release.accounting.policy import recorded_populations

    return policy.population(name, recorded_populations(home.ledger)).name


@data_task(name="load-budget-policy")
def load_policy(path: str | None) -> BudgetPolicy:
    return load_budget_policy(path)
