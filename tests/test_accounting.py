import sqlite3

import pytest

from transit_release.accounting.accountant import compose, compose_one
from transit_release.accounting.events import StabilityHistogramEvent, event_from_dict, event_from_json
from transit_release.accounting.ledger import Ledger
from transit_release.config import MARGINALS, load_release_config
from transit_release.errors import BudgetExceededError, LedgerIntegrityError

DELTA = 1.25e-7


def event(release="r1", mode="bus", date="20160808", marginal="tap_on_time", eps=1.0, delta=DELTA):
    return StabilityHistogramEvent(release_id=release, mode=mode, date=date, marginal=marginal, epsilon=eps,
                                   delta=delta, threshold=34, noise_scale="2", sensitivity=1,
                                   unit_of_privacy="trip", neighbouring="replace-one",
                                   input_fingerprint="f" * 64, code_version="0.1.0")


def partition_events(release="r1", mode="bus", date="20160808"):
    cfg = load_release_config()
    return [event(release, mode, date, m.name, cfg.budgets[m.name].epsilon, cfg.budgets[m.name].delta)
            for m in MARGINALS]


def test_event_round_trip_through_flat_json():
    e = event()
    d = e.to_dict()
    assert d["kind"] == "stability_histogram"
    assert all(not isinstance(v, (dict, list)) for v in d.values())
    assert event_from_dict(d) == e
    assert event_from_json(e.to_json()) == e


def test_event_with_unknown_fields_is_refused():
    d = event().to_dict() | {"surprise": 1}
    with pytest.raises(ValueError, match=r"unexpected fields \['surprise'\]"):
        event_from_dict(d)
    with pytest.raises(ValueError, match="unknown privacy event kind 'nope'"):
        event_from_dict({**event().to_dict(), "kind": "nope"})


def test_events_are_immutable():
    with pytest.raises(AttributeError):
        event().epsilon = 3.0  # type: ignore[misc]


def test_nothing_spent_is_zero():
    report = compose_one([])
    assert report.overall.epsilon == 0 and report.overall.delta == 0


def test_six_marginals_of_one_partition_compose_to_8_and_six_deltas():
    report = compose_one(partition_events())
    assert report.per_partition["bus/20160808"].epsilon == 8.0
    assert report.per_partition["bus/20160808"].delta == 6 / 8_000_000
    assert report.overall.delta == 7.5e-7


def test_a_week_of_partitions_composes_in_parallel():
    events = [e for mode in ("bus", "ferry", "lightrail", "train")
              for day in range(8, 15) for e in partition_events(mode=mode, date=f"201608{day:02d}")]
    report = compose_one(events)
    assert len(report.per_partition) == 28
    assert report.overall.epsilon == 8.0
    assert report.overall.delta == 6 / 8_000_000
    assert report.per_mode()["ferry"].epsilon == 8.0


def test_the_same_partition_released_twice_spends_twice():
    report = compose_one(partition_events("r1") + partition_events("r2"))
    assert report.overall.epsilon == 16.0
    assert report.overall.delta == 12 / 8_000_000


def test_compose_separates_units_of_privacy():
    import dataclasses

    other = dataclasses.replace(event(), unit_of_privacy="card-day")
    reports = compose([event(), other])
    assert set(reports) == {("trip", "replace-one"), ("card-day", "replace-one")}
    with pytest.raises(ValueError, match="mix units of privacy"):
        compose_one([event(), other])


def test_ledger_charges_and_chains(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    written = ledger.charge(partition_events())
    assert [e.seq for e in written] == [1, 2, 3, 4, 5, 6]
    ledger.record_publication("r1", "a" * 64)
    assert ledger.verify() == 7
    assert [e.event() for e in ledger.spends("r1")] == partition_events()
    assert set(ledger.published()) == {"r1"}


def test_ledger_refuses_update_and_delete(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.charge([event()])
    con = sqlite3.connect(tmp_path / "ledger.sqlite")
    with pytest.raises(sqlite3.DatabaseError, match="append-only: UPDATE refused"):
        con.execute("UPDATE entries SET payload = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only: DELETE refused"):
        con.execute("DELETE FROM entries")
    con.close()
    assert ledger.verify() == 1


def test_a_failed_check_writes_nothing(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")

    def refuse(existing, events):
        raise BudgetExceededError("bus/20160808", 8.0, 0.0)

    with pytest.raises(BudgetExceededError):
        ledger.charge(partition_events(), check=refuse)
    assert ledger.entries() == []


def test_edits_behind_the_triggers_are_detected(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.charge(partition_events())
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_no_update")
    con.execute("UPDATE entries SET payload = replace(payload, '\"epsilon\":2.0', '\"epsilon\":0.5') WHERE seq = 5")
    con.commit()
    con.close()
    with pytest.raises(LedgerIntegrityError, match="entry 5 was modified after it was recorded"):
        ledger.verify()


def test_deleted_rows_are_detected(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.charge(partition_events())
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_no_delete")
    con.execute("DELETE FROM entries WHERE seq = 3")
    con.commit()
    con.close()
    with pytest.raises(LedgerIntegrityError, match="entry 3 is missing"):
        ledger.verify()


def test_budget_error_message_is_exact():
    err = BudgetExceededError("bus/2016-08-09", 2.0, 1.0)
    assert str(err) == ("Cannot release 'bus/2016-08-09' without exceeding the budget. "
                        "Requested: ε=2.000; remaining: ε=1.000; short by ε=1.000")
    assert err.requested_epsilon == 2.0 and err.remaining_epsilon == 1.0


def test_advanced_composition_is_reported_and_tighter_over_many_small_spends():
    import math

    from transit_release.accounting.accountant import ADVANCED_COMPOSITION, PrivacyLoss, advanced_composition

    losses = [PrivacyLoss.of(0.1, 1e-9)] * 100
    adv = advanced_composition(losses, delta_prime=1e-6)
    expected = math.sqrt(2 * math.log(1e6) * 100 * 0.01) + 100 * 0.1 * math.expm1(0.1)
    assert adv.epsilon == pytest.approx(expected, rel=1e-12)
    assert adv.delta == pytest.approx(100 * 1e-9 + 1e-6, rel=1e-12)
    assert adv.epsilon < 10.0  # basic composition: 100 × 0.1
    assert "Dwork, Rothblum & Vadhan" in ADVANCED_COMPOSITION
    events = [event(release=f"r{i}", eps=0.1, delta=1e-9) for i in range(100)]
    report = compose_one(events)
    assert report.overall.epsilon == pytest.approx(10.0)
    assert report.advanced_overall(1e-6).epsilon == pytest.approx(expected, rel=1e-12)
