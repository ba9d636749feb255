"""Budget policy: caps, exact refusal messages, and concurrent charges."""

from __future__ import annotations

import multiprocessing as mp
from datetime import datetime, timezone

import pytest

from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.accounting.units import UNITS
from transit_release.errors import BudgetExceededError, ConfigError, UncappedSpendError
from tests.test_accounting import partition_events


OTHER_UNITS = [{"name": f"{u}-cap", "unit_of_privacy": u, "per": UNITS[u].per, "epsilon": 1.0, "delta": 1e-9}
               for u in sorted(UNITS) if u != "trip"]


def policy(eps=8.0, delta=1e-6, period="all-time", modes=None, extra=()):
    cap = {"name": "trip-partition", "unit_of_privacy": "trip", "per": "partition", "period": period,
           "epsilon": eps, "delta": delta}
    if modes:
        cap["modes"] = modes
    return BudgetPolicy.from_dict({"policy": {"caps": [cap, *extra, *OTHER_UNITS]}})


def test_default_policy_caps_a_partition_at_one_opal_release():
    cap = {c.name: c for c in load_budget_policy().caps}["trip-partition"]
    assert cap.epsilon == 8.0 and cap.delta == 1e-6 and cap.period == "all-time"


def test_a_release_that_fits_is_charged(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    assert len(ledger.charge(partition_events("r1"), check=policy().check)) == 6


def test_refusal_names_partition_request_remaining_and_difference(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    ledger.charge(partition_events("r1"), check=policy(eps=10).check)
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge(partition_events("r2"), check=policy(eps=10).check)
    assert str(info.value) == (
        "Cannot release 'bus/20160808' without exceeding the budget. Requested: ε=8.000; remaining: ε=2.000; "
        "short by ε=6.000. Requested: δ=7.5e-07; remaining: δ=2.5e-07; short by δ=5e-07 "
        "(cap 'trip-partition': ε ≤ 10, δ ≤ 1e-06 per partition, all time)")
    assert info.value.requested_epsilon == 8.0 and info.value.remaining_epsilon == 2.0
    assert len(ledger.entries()) == 6  # nothing of r2 was written


def test_several_partitions_over_the_cap_are_counted(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    events = partition_events("r1", date="20160808") + partition_events("r1", date="20160809")
    ledger.charge(events, check=policy().check)
    again = partition_events("r2", date="20160808") + partition_events("r2", date="20160809")
    with pytest.raises(BudgetExceededError, match=r"; 1 more partition\(s\) also exceed it\)$"):
        ledger.charge(again, check=policy().check)


def test_mode_specific_cap(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    ferry_only = policy(eps=4.0, modes=["ferry"], extra=[{"name": "all-modes", "unit_of_privacy": "trip",
                                                           "per": "partition", "epsilon": 8, "delta": 1e-6}])
    ledger.charge(partition_events("r1", mode="bus"), check=ferry_only.check)
    with pytest.raises(BudgetExceededError, match="Cannot release 'ferry/20160808'"):
        ledger.charge(partition_events("r2", mode="ferry"), check=ferry_only.check)


def test_calendar_year_period_counts_only_this_years_spends(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    yearly = policy(period="calendar-year")
    ledger.charge(partition_events("r1"), check=yearly.check)
    existing = ledger.entries()
    next_year = datetime(datetime.now(timezone.utc).year + 1, 1, 1, tzinfo=timezone.utc)
    yearly.check(existing, partition_events("r2"), now=next_year)  # renewed: fits
    with pytest.raises(BudgetExceededError, match="calendar year"):
        yearly.check(existing, partition_events("r2"))


def test_policy_file_errors(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("policy:\n  caps:\n    - {name: a, unit_of_privacy: trip, per: partition, epsilon: 1, delta: 0, "
                 "period: weekly}\n")
    with pytest.raises(ConfigError, match=r"caps\[0\]: period must be one of \['all-time', 'calendar-year'\]"):
        load_budget_policy(p)


TRIP_CAP = "{name: t, unit_of_privacy: trip, per: partition, epsilon: 8, delta: 1.0e-6}"


@pytest.mark.parametrize("text,message", [
    ("policy:\n  cap:\n    - " + TRIP_CAP, r"'policy:' must hold 'caps:' \(and optionally 'populations:' and "
                                              r"'allow_unbounded_person_loss:'\); unknown keys \['cap'\]"),
    ("policy:\n  caps: []", "'caps:' must be a non-empty list"),
    ("policy:\n  caps: 5", "'caps:' must be a non-empty list"),
    ("policy:\n  caps:\n    - " + TRIP_CAP + "\n  extra: 1", r"unknown keys \['extra'\]"),
    ("polcy:\n  caps: []", "expected exactly one top-level key 'policy:'"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trips, per: partition, epsilon: 8, delta: 0}",
     "unknown unit_of_privacy 'trips'"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: partition, epsilon: .nan, delta: 0}",
     "'epsilon' must be finite. Found nan"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: partition, epsilon: .inf, delta: 0}",
     "'epsilon' must be finite. Found inf"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: partition, epsilon: true, delta: 0}",
     "'epsilon' must be a number. Found bool"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: partition, delta: 0}", "'epsilon' is missing"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: partition, epsilon: 1, delta: 0, mode: [bus]}",
     r"unknown keys \['mode'\]"),
    ("policy:\n  caps:\n    - {name: t, unit_of_privacy: trip, per: period, epsilon: 1, delta: 0}",
     "a cap on unit 'trip' is measured per 'partition'. Found 'period'"),
    ("policy:\n  caps:\n    - " + TRIP_CAP, r"every unit of privacy the project can spend needs a cap; missing: \['card'"),
    ("policy:\n  caps: {name: t}", "'caps:' must be a non-empty list"),
])
def test_a_policy_that_would_fail_open_is_refused(tmp_path, text, message):
    p = tmp_path / "p.yaml"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_budget_policy(p)


def test_caps_restricted_to_some_modes_must_cover_every_mode():
    with pytest.raises(ConfigError, match=r"the caps of unit 'trip' cover only the modes \['ferry'\]"):
        BudgetPolicy.from_dict({"policy": {"caps": [
            {"name": "f", "unit_of_privacy": "trip", "per": "partition", "epsilon": 1, "delta": 0,
             "modes": ["ferry"]}, *OTHER_UNITS]}})


def test_a_spend_no_cap_covers_is_refused(tmp_path):
    import dataclasses

    p = policy()
    uncovered = BudgetPolicy(tuple(c for c in p.caps if c.unit_of_privacy != "trip"))
    with pytest.raises(UncappedSpendError, match="no cap of the budget policy covers a spend of unit 'trip' for "
                                                 "mode 'bus' \\(6 spend\\(s\\) in all\\): refused"):
        uncovered.check([], partition_events("r1"))
    odd = [dataclasses.replace(e, unit_of_privacy="card-day") for e in partition_events("r1")]
    with pytest.raises(UncappedSpendError, match="unit 'card-day'"):
        p.check([], odd)
    assert Ledger(tmp_path / "l.sqlite").entries() == []


def test_the_default_policy_caps_every_unit_and_the_person():
    assert {c.unit_of_privacy for c in load_budget_policy().caps} == set(UNITS) | {"person"}


def _charge(args):
    path, release = args
    try:
        Ledger(path).charge(partition_events(release), check=policy(eps=16.0, delta=1e-5).check)
        return "ok"
    except BudgetExceededError:
        return "refused"


def test_four_concurrent_charges_against_a_cap_that_fits_two(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path)
    with mp.get_context("spawn").Pool(4) as pool:
        outcomes = pool.map(_charge, [(path, f"r{i}") for i in range(4)])
    assert sorted(outcomes) == ["ok", "ok", "refused", "refused"]
    ledger = Ledger(path)
    assert ledger.verify() == 12
    assert len({e.release_id for e in ledger.entries()}) == 2


def test_the_budget_is_checked_without_the_write_lock_and_again_if_the_ledger_moved(tmp_path):
    """The policy's composition can take seconds: it runs on a snapshot, without the write lock (another run
    charges meanwhile), and again inside the transaction when the head moved, so the cap still holds."""
    path = tmp_path / "l.sqlite"
    ledger, other = Ledger(path, timeout_s=2), Ledger(path, timeout_s=2)
    seen = []

    def check(existing, events):
        seen.append(len(existing))
        if len(seen) == 1:
            other.charge(partition_events("r0"), check=policy().check)  # would time out if the lock were held
        policy().check(existing, events)

    with pytest.raises(BudgetExceededError, match="Cannot release 'bus/20160808'"):
        ledger.charge(partition_events("r1"), check=check)
    assert seen == [0, 6]
    assert {e.release_id for e in ledger.entries()} == {"r0"}
    calls = []
    assert len(ledger.charge(partition_events("r2", date="20160809"),
                             check=lambda existing, events: calls.append(1))) == 6
    assert calls == [1]  # the head did not move: checked once, on the snapshot


def test_the_number_of_caps_is_bounded_with_a_clear_message():
    """The finding: a policy of 20,000 caps took more than 120 s in `budget`, inside the ledger's write lock."""
    from transit_release.accounting.policy import MAX_CAPS

    caps = [{"name": f"c{i}", "unit_of_privacy": "trip", "per": "partition", "epsilon": 1.0, "delta": 1e-9}
            for i in range(MAX_CAPS + 1 - len(OTHER_UNITS))]
    with pytest.raises(ConfigError, match=rf"budget policy: {MAX_CAPS + 1} caps; at most {MAX_CAPS} are supported"):
        BudgetPolicy.from_dict({"policy": {"caps": caps + OTHER_UNITS}})
    assert len(BudgetPolicy.from_dict({"policy": {"caps": caps[1:] + OTHER_UNITS}}).caps) == MAX_CAPS
