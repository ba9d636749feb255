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


# ---- events and the ledger refuse spends that give budget back -----------------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("epsilon", -1.0, "epsilon must be finite and non-negative. Found -1.0"),
    ("epsilon", float("nan"), "epsilon must be finite and non-negative. Found nan"),
    ("epsilon", float("inf"), "epsilon must be finite and non-negative. Found inf"),
    ("delta", -1e-7, "delta must be finite and non-negative"),
    ("delta", 1.0, "delta must be below 1"),
    ("epsilon", None, "epsilon must be a number. Found NoneType"),
    ("epsilon", True, "epsilon must be a number. Found bool"),
    ("release_id", "", "release_id must not be empty"),
    ("threshold", 3.5, "threshold must be an integer"),
])
def test_events_refuse_impossible_values_at_construction(field, value, message):
    import dataclasses

    from transit_release.accounting.events import InvalidEventError

    with pytest.raises(InvalidEventError, match=message):
        dataclasses.replace(event(), **{field: value})


def _raw_insert(path, payload: str, seq: int = 1, prev: str = "0" * 64):
    from transit_release.accounting.ledger_chain import entry_hash

    con = sqlite3.connect(path)
    digest = entry_hash(prev, seq, "2026-01-01T00:00:00+00:00", "spend", "forged", payload)
    try:
        con.execute("INSERT INTO entries VALUES (?, ?, 'spend', 'forged', ?, ?, ?)",
                    (seq, "2026-01-01T00:00:00+00:00", payload, prev, digest))
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize("patch", ['"epsilon":-8.0', '"epsilon":NaN', '"epsilon":"8"', '"delta":-1e-6'])
def test_the_database_refuses_a_spend_that_gives_budget_back(tmp_path, patch):
    path = tmp_path / "ledger.sqlite"
    Ledger(path)
    key = patch.split(":")[0].strip('"')
    payload = event().to_json().replace(f'"{key}":{1.0 if key == "epsilon" else DELTA}', patch)
    assert patch in payload
    with pytest.raises(sqlite3.DatabaseError, match="refuses a spend whose epsilon or delta is negative"):
        _raw_insert(path, payload)
    payload_missing = event().to_json().replace('"epsilon":1.0,', "")
    with pytest.raises(sqlite3.DatabaseError, match="refuses a spend"):
        _raw_insert(path, payload_missing)


def test_a_forged_refund_behind_the_trigger_breaks_verification_and_charging(tmp_path):
    """The probe's attack: drop the trigger, append a 'refund' with a recomputed chain (events refuse a
    negative ε, so the JSON is written by hand)."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    written = ledger.charge(partition_events("r1"))
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_spend_is_a_cost")
    con.commit()
    con.close()
    payload = event(release="forged").to_json().replace('"epsilon":1.0', '"epsilon":-8.0')
    _raw_insert(path, payload, seq=7, prev=written[-1].hash)
    with pytest.raises(LedgerIntegrityError, match="entry 7 is not a valid spend"):
        ledger.verify()
    with pytest.raises(LedgerIntegrityError, match="entry 7 is not a valid spend"):  # before any check runs
        ledger.charge(partition_events("r2"), check=lambda existing, evs: [e.event() for e in existing])


def test_one_release_id_is_charged_once(tmp_path):
    from transit_release.errors import ReleaseExistsError

    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.charge(partition_events("r1"))
    with pytest.raises(ReleaseExistsError, match="release 'r1' was already charged by another run"):
        ledger.charge(partition_events("r1", date="20160809"))
    assert len(ledger.entries()) == 6


# ---- the keyed chain and the anchors -------------------------------------------------------------------

def test_keyed_chain_detects_a_recomputed_forgery(tmp_path):
    from transit_release.accounting.ledger_chain import entry_hash

    path, key = tmp_path / "ledger.sqlite", b"k" * 32
    ledger = Ledger(path, key=key)
    ledger.charge(partition_events("r1"))
    assert ledger.verify() == 6 and ledger.keyed()
    # an insider rewrites entry 6 (a smaller ε) and recomputes the whole chain: unkeyed, it would pass
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_no_update")
    rows = con.execute("SELECT seq, recorded_at, entry_type, release_id, payload FROM entries ORDER BY seq").fetchall()
    prev = "0" * 64
    for seq, at, kind, rid, payload in rows:
        if seq == 6:
            payload = payload.replace('"epsilon":2.0', '"epsilon":0.5')
        digest = entry_hash(prev, seq, at, kind, rid, payload)
        con.execute("UPDATE entries SET payload = ?, prev_hash = ?, hash = ? WHERE seq = ?", (payload, prev, digest, seq))
        prev = digest
    con.commit()
    con.close()
    assert Ledger(path, key=b"").verify() == 6  # without the key the forgery is consistent
    with pytest.raises(LedgerIntegrityError, match="entry 6's MAC does not match the key"):
        Ledger(path, key=key).verify()
    # and the budget is never checked against it: the next charge is refused, nothing written
    with pytest.raises(LedgerIntegrityError, match="entry 6's MAC does not match the key"):
        Ledger(path, key=key).charge(partition_events("r2"))
    assert len(Ledger(path, key=b"").entries()) == 6


def test_a_spend_edited_in_place_stops_the_next_charge(tmp_path):
    """The finding: `charge` checked the cap against a ledger it never verified; with every spend set to ε = 0 in
    place (chain visibly broken) a second release was charged and published over the cap."""
    path = tmp_path / "ledger.sqlite"
    Ledger(path).charge(partition_events("r1"))
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_no_update")
    con.execute("""UPDATE entries SET payload = replace(payload, '"epsilon":2.0', '"epsilon":0.0') WHERE seq = 6""")
    con.commit()
    con.close()
    with pytest.raises(LedgerIntegrityError, match="entry 6 was modified after it was recorded"):
        Ledger(path).charge(partition_events("r2"))
    assert [e.release_id for e in Ledger(path).entries()] == ["r1"] * 6


def test_keyed_ledger_is_never_appended_to_without_its_key_and_never_launders(tmp_path):
    from transit_release.errors import ConfigError

    path, key = tmp_path / "ledger.sqlite", b"k" * 32
    Ledger(path, key=b"").charge(partition_events("r0"))  # history written before the key existed
    with pytest.raises(LedgerIntegrityError, match="6 entr\\(y/ies\\) carry no MAC"):
        Ledger(path, key=key).charge(partition_events("r1"))
    assert Ledger(path, key=key).adopt_key() == 6  # the operator's explicit step
    Ledger(path, key=key).charge(partition_events("r1"))
    with pytest.raises(ConfigError, match="is keyed: set TRANSIT_RELEASE_LEDGER_KEY_FILE"):
        Ledger(path, key=b"").charge(partition_events("r2"))
    assert Ledger(path, key=key).verify() == 12


def test_a_key_file_inside_the_home_is_refused(tmp_path):
    from transit_release.accounting.ledger_key import read_key_file
    from transit_release.errors import ConfigError

    (tmp_path / "key").write_bytes(b"x" * 40)
    with pytest.raises(ConfigError, match="lies inside the home"):
        read_key_file(tmp_path / "key", home=tmp_path)
    (tmp_path / "short").write_bytes(b"x")
    (tmp_path / "short").chmod(0o600)
    with pytest.raises(ConfigError, match="holds 1 bytes; use at least 32"):
        read_key_file(tmp_path / "short")
    (tmp_path / "open").write_bytes(b"x" * 40)
    (tmp_path / "open").chmod(0o644)
    with pytest.raises(ConfigError, match=r"other accounts may read or change it \(mode 0644\); `chmod 600 "):
        read_key_file(tmp_path / "open")


def test_anchors_notice_truncation_and_rewritten_history(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.charge(partition_events("r1"))
    head = ledger.head()
    assert (head.seq, ledger.check_anchor(head.seq, head.hash)) == (6, None)
    ledger.charge(partition_events("r2"))
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER entries_no_delete")
    con.execute("DELETE FROM entries WHERE seq > 3")  # charged spends deleted, chain still consistent
    con.commit()
    con.close()
    assert ledger.verify() == 3
    assert "entry 6 it anchors is missing" in ledger.check_anchor(head.seq, head.hash)
    assert "different hash" in Ledger(path).check_anchor(3, "f" * 64)


# ---- periods: disjoint compose in parallel, overlapping sequentially, free text with everything ---------

def seq_event(rid, scope, eps=1.0):
    from transit_release.accounting.events import PrefixTreeEvent

    return PrefixTreeEvent(release_id=rid, scope=scope, epsilon=eps, delta=0.0, height=12, variant="hybrid",
                           fanout="4", sensitivity=1, unit_of_privacy="passenger-sequence",
                           neighbouring="add-remove-one", input_fingerprint="f" * 64, code_version="0")


def test_sequence_releases_of_disjoint_periods_compose_in_parallel_and_overlaps_add_up():
    jan, feb = "2026-01-01..2026-01-31", "2026-02-01..2026-02-28"
    assert compose_one([seq_event("a", jan), seq_event("b", feb)]).overall.epsilon == 1.0
    both = compose_one([seq_event("a", jan), seq_event("b", feb), seq_event("c", "2026-01-15..2026-02-14", 0.5)])
    assert both.overall.epsilon == 1.5
    assert both.per_partition[jan].epsilon == 1.5 and both.per_partition[feb].epsilon == 1.5
    assert compose_one([seq_event("a", jan), seq_event("b", jan)]).overall.epsilon == 2.0


def test_free_text_scopes_compose_sequentially_with_everything():
    """The finding: two ε = 50 releases of one file under different free-text scopes counted as 50, not 100."""
    report = compose_one([seq_event("a", "metro-file", 50), seq_event("b", "other-name", 50)])
    assert report.overall.epsilon == 100.0
    mixed = compose_one([seq_event("a", "2026-01-01..2026-01-31"), seq_event("b", "2026-02-01..2026-02-28"),
                         seq_event("c", "legacy-scope", 0.25)])
    assert mixed.overall.epsilon == 1.25


def ngram_event(rid, start, end, eps=1.0):
    from transit_release.accounting.events import NGramEvent

    return NGramEvent(release_id=rid, period_start=start, period_end=end, epsilon=eps, delta=1e-13, max_length=20,
                      max_gram=5, n_locations=68, sensitivity=20, unit_of_privacy="passenger-sequence",
                      neighbouring="add-remove-one", input_fingerprint="f" * 64, code_version="0")


def test_ngram_events_round_trip_and_compose_by_period_with_prefix_trees():
    from transit_release.accounting.events import InvalidEventError

    e = ngram_event("n", "2026-01-01", "2026-01-31")
    assert e.to_dict()["kind"] == "ngram" and e.component == "ngram" and e.scope == "2026-01-01..2026-01-31"
    assert event_from_json(e.to_json()) == e
    # one unit of privacy: an n-gram and a prefix-tree release of January add up; February is a fresh budget
    report = compose_one([e, seq_event("t", "2026-01-01..2026-01-31", 0.5),
                          ngram_event("f", "2026-02-01", "2026-02-28")])
    assert report.per_partition["2026-01-01..2026-01-31"].epsilon == 1.5
    assert report.per_partition["2026-02-01..2026-02-28"].epsilon == 1.0
    assert report.overall.epsilon == 1.5 and report.overall.delta == 1e-13  # the worst day
    with pytest.raises(InvalidEventError, match="period_start..period_end must be ISO dates in order"):
        ngram_event("x", "2026-02-01", "2026-01-01")


def _open_ledger(path: str) -> str:
    try:
        Ledger(path, key=b"")
        return "ok"
    except Exception as exc:  # the test reports what a process saw
        return f"{type(exc).__name__}: {exc}"


def test_processes_that_create_one_ledger_at_once_all_find_it_whole(tmp_path):
    """A fresh home's first releases race to create the ledger: none may see another's half-made schema (it reads
    as dropped triggers, and the release is refused with 'restore the ledger from a backup')."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        for attempt in range(12):
            path = str(tmp_path / f"ledger-{attempt}.sqlite")
            assert pool.map(_open_ledger, [path] * 6) == ["ok"] * 6, attempt
            assert Ledger(path, key=b"").verify() == 0


def test_a_ledger_locked_past_its_timeout_says_so_and_charges_nothing(tmp_path):
    from transit_release.errors import LedgerBusyError

    path = tmp_path / "ledger.sqlite"
    Ledger(path).charge([event("r0")])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LedgerBusyError) as caught:
            Ledger(path, timeout_s=0.2).charge([event("r1")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(caught.value) == (f"{path}: the privacy ledger stayed locked by another process for more than 0.2 s; "
                                 "nothing was written or charged. Try again when the other run has finished")
    assert [e.release_id for e in Ledger(path).entries()] == ["r0"]
