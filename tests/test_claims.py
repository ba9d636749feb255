"""One person, one population (#40): declared populations, what each release read (its order-independent content
and keyed card ids, kept privately), and the refusal of a release that overlaps another population's."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_accounting import ngram_event
from tests.test_card_level import card_events
from transit_release.accounting import claims
from transit_release.accounting.claims import ClaimStore, claim_of, refuse_overlap
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.errors import ConfigError, PopulationOverlapError, UndeclaredPopulationError
from transit_release.inputs import content
from transit_release.inputs.content import InputContent
from transit_release.inputs.sequences import read_sequence_file
from transit_release.inputs.sets import read_set_file
from transit_release.inputs.trajectories import read_trajectory_file
from transit_release.inputs.universe import LocationUniverse

WEEK = ("2016-08-08", "2016-08-14")
KEY = bytes(range(32))


# ---- what "the same input" means: the order-independent content -----------------------------------------------

def _write(path: Path, lines: list[str], header: str = "") -> Path:
    path.write_text(header + "".join(f"{x}\n" for x in lines), encoding="utf-8")
    return path


SEQS = ["A B C", "B C", "A B C", "C A", "A"]


@pytest.mark.parametrize("role,reader,lines", [
    ("sequences", read_sequence_file, SEQS),
    ("trajectories", read_trajectory_file, ["A@1 B@3", "B@30", "A@1 B@3", "C@100 C@101"]),
    ("sets", read_set_file, ["A B", "B C A", "C", "A B"]),
])
def test_a_record_file_matches_reordered_commented_or_without_its_last_newline(tmp_path, role, reader, lines):
    universe = LocationUniverse(("A", "B", "C", "D"), "public list")
    other_universe = LocationUniverse(("A", "B", "C", "D", "E"), "a copied and extended list")
    digest = lambda p, u=universe: content.of_record_input(role, reader(p, u)).digests[0]  # noqa: E731
    base = digest(_write(tmp_path / "a.txt", lines))
    same = [_write(tmp_path / "b.txt", lines[::-1]),  # rows reordered
            _write(tmp_path / "c.txt", lines, "# an added comment\n"),  # a comment line
            tmp_path / "d.txt"]
    same[2].write_text("\n".join(lines), encoding="utf-8")  # no trailing newline
    for p in same:
        assert digest(p) == base, p.name
    assert digest(tmp_path / "a.txt", other_universe) == base  # the ids, not their place in the universe
    assert base.records == len(lines) and base.role == role
    # one record less, one more, or one changed: another content
    assert digest(_write(tmp_path / "e.txt", lines[1:])) != base
    assert digest(_write(tmp_path / "f.txt", lines + lines[:1])) != base
    changed = [lines[0].replace("A", "D", 1)] + lines[1:]
    assert digest(_write(tmp_path / "g.txt", changed)) != base


def test_a_set_is_its_items_whatever_their_order_and_repeats(tmp_path):
    u = LocationUniverse(("A", "B", "C"), "public list")
    a = content.of_record_input("sets", read_set_file(_write(tmp_path / "a.txt", ["A B", "C"]), u)).digests[0]
    b = content.of_record_input("sets", read_set_file(_write(tmp_path / "b.txt", ["B A A", "C"]), u)).digests[0]
    s = content.of_record_input("sequences", read_sequence_file(_write(tmp_path / "s.txt", ["A B", "C"]), u))
    assert a == b and s.digests[0].lanes != a.lanes  # a sequence is ordered: another kind of content


def trips_frame(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    on = pd.Timestamp("2016-08-08 06:00") + pd.to_timedelta(rng.integers(0, 7 * 1440, n), unit="min")
    off_missing = rng.random(n) < 0.1
    return pd.DataFrame({
        "card_id": rng.integers(1, 60, n).astype(np.int64),
        "mode": rng.choice(["bus", "train", "ferry"], n),
        "tap_on_time": on, "tap_on_stop": rng.integers(1, 30, n).astype(np.int64),
        "tap_off_time": (on + pd.Timedelta(minutes=12)).where(~off_missing),
        "tap_off_stop": pd.array(np.where(off_missing, None, rng.integers(1, 30, n)), dtype="Int64")})


_MODE_BLOCK = {"bus": 0, "train": 30, "ferry": 60}


def stop_table() -> pd.DataFrame:
    """30 stops of each of bus (ids 1..30), train (31..60) and ferry (61..90); a bus stop's location is its
    postcode (two stops per postcode), another's its name."""
    return pd.DataFrame({"stop_id": np.arange(1, 91), "mode": np.repeat(["bus", "train", "ferry"], 30),
                         "name": [f"S{i}" for i in range(1, 31)] * 3,
                         "postcode": pd.array(np.tile(2000 + np.arange(30) // 2, 3), "Int64")})


def trips_on_stop_table(n: int = 200, seed: int = 0) -> pd.DataFrame:
    """:func:`trips_frame` with each trip's stops among its mode's stops of :func:`stop_table`."""
    clean = trips_frame(n, seed)
    shift = clean["mode"].map(_MODE_BLOCK).to_numpy()
    return clean.assign(tap_on_stop=clean["tap_on_stop"] + shift, tap_off_stop=clean["tap_off_stop"] + shift)


def test_trips_match_whatever_their_order_and_their_card_numbers():
    clean, stops = trips_on_stop_table(), stop_table()
    base = content.of_clean_trips(clean, stops)
    shuffled = clean.sample(frac=1.0, random_state=3).reset_index(drop=True)
    assert content.of_clean_trips(shuffled, stops).digests == base.digests
    np.testing.assert_array_equal(content.of_clean_trips(shuffled, stops).cards, base.cards)
    renumbered = clean.assign(card_id=clean["card_id"] + 1000)  # the same trips under other card ids
    assert content.of_clean_trips(renumbered, stops).digests == base.digests
    assert content.of_clean_trips(clean.iloc[1:], stops).digests != base.digests
    assert list(base.cards) == sorted(set(clean["card_id"]))


def test_trips_match_with_their_stop_ids_relabelled_and_their_cards_renumbered(tmp_path):
    """atk40 M1: the stop ids relabelled consistently in the stop table and the trips, and the card ids renumbered,
    are the same trips (every release counts the stops' public locations, not their ids), refused under another
    population; a trip moved to another location is not the same trips."""
    clean, stops = trips_on_stop_table(), stop_table()
    base = content.of_clean_trips(clean, stops)
    relabel = {i: 1_000_000 + 7 * (91 - i) for i in range(1, 91)}  # another id for every stop, another order
    relabelled = clean.assign(card_id=50_000_000 + (clean["card_id"] * 7919) % 1000,
                              tap_on_stop=clean["tap_on_stop"].map(relabel),
                              tap_off_stop=clean["tap_off_stop"].map(relabel).astype("Int64"))
    copied = stops.assign(stop_id=stops["stop_id"].map(relabel)).sample(frac=1.0, random_state=1)
    extended = pd.concat([copied, pd.DataFrame({"stop_id": [5], "mode": ["train"], "name": ["Elsewhere"],
                                                "postcode": pd.array([2999], "Int64")})], ignore_index=True)
    got = content.of_clean_trips(relabelled, extended)
    assert got.digests == base.digests and not np.intersect1d(got.cards, base.cards).size
    message, _, _ = _refused(tmp_path, base, got, "first", "escape-stops-cards")
    assert message.startswith("release 'escape-stops-cards' of population 'riders-b' reads records of "
                                      "people already released under population 'default': release 'first' read "
                                      "the same trips (its clean rows, in any order); one person cannot be in two "
                                      "populations.")
    moved = clean.copy()
    row = int(np.flatnonzero(moved["mode"].to_numpy() == "train")[0])
    moved.loc[row, "tap_on_stop"] = (moved.loc[row, "tap_on_stop"] - 30) % 30 + 31  # another train station
    assert content.of_clean_trips(moved, stops).digests != base.digests


def _no_period(roles: list[str]) -> list[str]:
    """The roles matched, the period's label-free shapes (``pshape:``, ``pnshape:``; atk9) left out: they match
    every re-extract that keeps each place's tap-ons, which the tests of the other claims are not about."""
    return [r for r in roles if not r.lstrip("*").startswith((content.PSHAPE_PREFIX, content.PNSHAPE_PREFIX,
                                                              content.USHAPE_PREFIX, content.SSHAPE_PREFIX))]


def _streamed(tmp_path: Path, clean: pd.DataFrame, stops: pd.DataFrame, week: tuple[str, str] = WEEK):
    """The content the Opal release claims of ``clean`` written as a trips file (streamed, partition by partition,
    as its flow runs the steps), and the passenger kinds' content of the same file (one frame)."""
    from schemas import TripsFile
    from schemas.validation import check
    from transit_release.config import load_release_config
    from transit_release.inputs import screening, streaming
    from transit_release.inputs.screening import parse_period
    from transit_release.inputs.tables import read_trips
    from transit_release.preprocessing import build_location_index

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "trips.csv"
    clean.to_csv(path, index=False)
    cfg = load_release_config()
    period = parse_period(*week)
    work = tmp_path / "work"
    streamed = streaming.stream_trips(path, stops, period, cfg.quality, cfg.modes, work / "spill", work / "q",
                                      partial(check, TripsFile), batch_bytes=4096)
    index = build_location_index(stops, cfg.modes)
    for mode, date in streaming.partition_labels(period, cfg.modes):
        streaming.prepare_partition(work / "spill", work / "staging", work / "q", work / "pairs", mode, date,
                                    cfg.modes.index(mode), index, cfg.bin_minutes, None, None,
                                    lambda rows: None, lambda enc: None, shards=3, content=work / "content")
    in_memory = screening.screen_trips(read_trips(path), stops, period, cfg.quality, cfg.modes).clean
    return streamed, content.gather_partitions(work / "content"), in_memory


def test_the_streamed_partitions_give_the_in_memory_content(tmp_path):
    """The Opal release (streamed, partition by partition) and a passenger kind read from taps (one frame) must
    see the same trips file as the same content: the overlap between them is what #40's first escape was."""
    clean = trips_on_stop_table(400)
    clean = pd.concat([clean, clean.iloc[:5]], ignore_index=True)  # exact repeats: quarantined either way
    streamed, streamed_content, in_memory = _streamed(tmp_path, clean, stop_table())
    frame = content.of_clean_trips(in_memory, stop_table())
    assert streamed.tally.rows == 405
    # the streamed release claims the per-card tap-on sets too (``ons:<mode>``: a card's taps span its partitions,
    # so each partition saves its distinct (card, tap-on) pairs and the gathering digests them per mode)
    assert streamed_content.digests == frame.digests
    assert [d.role for d in streamed_content.digests if d.role.startswith("ons:")] == ["ons:bus", "ons:ferry",
                                                                                        "ons:train"]
    assert streamed_content.digests[0].records == len(in_memory) > 350
    np.testing.assert_array_equal(streamed_content.cards, frame.cards)


def test_an_opal_re_extract_of_fields_it_does_not_read_under_another_population_is_refused(tmp_path):
    """Issue #40 (known gap, closed): the Opal release claims each card's tap-on locations per mode too, so an
    Opal release of a re-extract with fresh card pseudonyms, the times shifted by seconds, the tap-offs emptied,
    the bus postcodes changed and the train names spaced, under another population, is refused; one tap moved
    is other content."""
    clean, stops = trips_on_stop_table(400), stop_table()
    extract, renamed = _fields_no_kind_reads(clean, stops)
    renamed = renamed.assign(postcode=renamed["postcode"] + 100)
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", extract, renamed)
    mine, theirs = {d.role: d for d in full.digests}, {d.role: d for d in got.digests}
    # nothing else of what it claims matches: the rows differ in times, tap-offs, postcodes; the cards are new (the
    # tap-ons by day and place match for the modes whose places did not change: atk5)
    same = _no_period([r for r in theirs if theirs[r] == mine.get(r)])
    assert same == ["ons:bus", "ons:ferry", "days:ferry", "ons:train", "days:train"]
    assert not np.intersect1d(full.cards, got.cards).size
    message, _, _ = _refused(tmp_path, full, got, "opal", "opal-again")
    assert message.startswith(
        "release 'opal-again' of population 'riders-b' reads records of people already released under population "
        "'default': release 'opal' read the same bus, ferry, train tap-ons per card (each card's set of tap-on "
        "stations by name; times and tap-offs aside); one person cannot be in two populations.")
    moved = extract.copy()
    at = int(np.flatnonzero(moved["mode"].to_numpy() == "bus")[0])
    moved.iloc[at, moved.columns.get_loc("tap_on_stop")] = 1 + int(moved.iloc[at]["tap_on_stop"]) % 30
    _, other, _ = _streamed(tmp_path / "c", moved, renamed)
    assert {d.role: d for d in other.digests}["ons:bus"] != mine["ons:bus"]


def test_a_bus_re_extract_with_the_stop_names_changed_and_the_postcodes_kept_is_refused(tmp_path):
    """atk4 (MAJOR 1): the Opal release and the station sets count a bus tap by its stop's postcode, so a
    re-extract of the bus rows with fresh card pseudonyms, times shifted by seconds and the bus stops renamed (or
    their names blanked), postcodes kept, reads the same; it claims the same ``places:bus`` (each card's set of
    bus tap-on postcodes) and is refused under another population, streamed (Opal) or in one frame (sets)."""
    clean, stops = trips_on_stop_table(400), stop_table()
    bus = clean[clean["mode"] == "bus"]
    extract = bus.assign(card_id=bus["card_id"] * 7 + 5_000_000,
                         tap_on_time=bus["tap_on_time"] + pd.Timedelta(seconds=17),
                         tap_off_time=bus["tap_off_time"] + pd.Timedelta(seconds=17)).sample(frac=1.0, random_state=2)
    renamed = stops.assign(name=np.where(stops["mode"] == "bus", [f"Renamed bus stop {i}" for i in range(90)],
                                         stops["name"]))
    blanked = stops.assign(name=stops["name"].where(stops["mode"] != "bus", None))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    mine = {d.role: d for d in full.digests}
    for i, table in enumerate((renamed, blanked)):
        _, streamed, in_memory = _streamed(tmp_path / f"b{i}", extract, table)
        theirs = {d.role: d for d in streamed.digests}
        assert _no_period([r for r in theirs if theirs[r] == mine.get(r)]) == ["places:bus", "stations:bus", "days:bus"]
        assert {d.role: d for d in content.of_clean_trips(in_memory, table).digests}["places:bus"] == mine[
            "places:bus"]
    message, _, _ = _refused(tmp_path, full, streamed, "opal", "bus-again")
    assert message.startswith(
        "release 'bus-again' of population 'riders-b' reads records of people already released under population "
        "'default': release 'opal' read the same bus tap-ons per card (each card's set of tap-on locations as the "
        "Opal release counts them, a bus stop's postcode; stop names, times and tap-offs aside); one person cannot "
        "be in two populations.")


def test_a_re_extract_with_each_trip_s_tap_on_and_tap_off_swapped_is_refused(tmp_path):
    """atk4 (MINOR 3): a station set is a card's tap-on and tap-off places, so a re-extract with each trip's
    tap-on and tap-off stops swapped (and fresh card pseudonyms) builds the same sets; it claims the same
    ``stations:<mode>`` as the Opal release of the original and is refused under another population."""
    clean, stops = trips_on_stop_table(400), stop_table()
    has_off = clean["tap_off_stop"].notna()
    swapped = clean.assign(card_id=clean["card_id"] + 777_000,
                           tap_on_stop=clean["tap_off_stop"].where(has_off, clean["tap_on_stop"]).astype("int64"),
                           tap_off_stop=clean["tap_off_stop"].where(~has_off, clean["tap_on_stop"]).astype("Int64"))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, _, gated = _streamed(tmp_path / "b", swapped, stops)  # the gate's clean rows, as station sets read them
    got = content.of_clean_trips(gated, stops)
    mine, theirs = {d.role: d for d in full.digests}, {d.role: d for d in got.digests}
    same = _no_period([r for r in theirs if theirs[r] == mine.get(r)])
    assert same == ["stations:bus", "stations:ferry", "stations:train"]
    message, _, _ = _refused(tmp_path, full, got, "opal", "swapped")
    assert "read the same bus, ferry, train stations per card (each card's set of tap-on and tap-off locations; " \
           "times and which tap aside); one person cannot be in two populations." in message


def test_a_re_extract_with_a_mode_relabelled_and_fresh_cards_is_refused(tmp_path):
    """atk5 (MAJOR 1): every per-mode digest names its mode, so swapping train and lightrail in the trips and the
    stop table, with fresh card pseudonyms, escaped them all, though a release reads the same riders the same way.
    The per-card sets and the tap-ons by day carry no mode in their tokens and are also compared whatever their
    mode: the extract of the former train rows, now lightrail, is refused after the Opal release of the original."""
    clean, stops = trips_on_stop_table(400), stop_table()
    swap = {"train": "lightrail", "lightrail": "train"}
    train = clean[clean["mode"] == "train"]
    extract = train.assign(mode="lightrail", card_id=train["card_id"] + 50_000_000)
    relabelled = stops.assign(mode=stops["mode"].map(lambda m: swap.get(m, m)))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", extract, relabelled)
    assert not {d.role: d for d in got.digests}.keys() & {"ons:train", "stations:train", "days:train"}
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    assert _no_period([r for r in theirs if theirs[r] in mine.values()]) == ["*ons:lightrail", "*stations:lightrail",
                                                                 "*days:lightrail"]
    message, _, _ = _refused(tmp_path, full, got, "opal", "relabelled")
    assert message.startswith(
        "release 'relabelled' of population 'riders-b' reads records of people already released under population "
        "'default': release 'opal' read the same train tap-ons per card (each card's set of tap-on stations by "
        "name; times and tap-offs aside); one person cannot be in two populations.")


def test_an_opal_re_extract_with_a_fresh_card_per_day_and_times_moved_inside_their_bins_is_refused(tmp_path):
    """atk5 (MAJOR 2): a fresh card id per (card, mode, date) makes other per-card sets, and times moved by a
    minute inside their 15-minute bins other rows, yet the Opal release reads the same cells. The tap-ons by day
    and place (``days:<mode>``: no card, no time of day) match; one tap-on moved to another day does not."""
    clean, stops = trips_on_stop_table(400), stop_table()
    day = clean["tap_on_time"].dt.normalize()
    split = clean.assign(card_id=pd.factorize(pd.MultiIndex.from_arrays([clean["card_id"], clean["mode"], day]))[0]
                         + 70_000_000)
    moved = split.assign(tap_on_time=split["tap_on_time"] + pd.Timedelta(minutes=1),
                         tap_off_time=split["tap_off_time"] + pd.Timedelta(minutes=1))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", moved, stops)
    mine, theirs = {d.role: d for d in full.digests}, {d.role: d for d in got.digests}
    assert _no_period([r for r in theirs if theirs[r] == mine.get(r)]) == ["days:bus", "days:ferry", "days:train"]
    message, _, _ = _refused(tmp_path, full, got, "opal", "split")
    assert ("read the same bus, ferry, train tap-ons by day and location (each tap-on's date and location, "
            "whatever its card and its time of day); one person cannot be in two populations.") in message
    other = moved.copy()
    other.iloc[0, other.columns.get_loc("tap_on_time")] += pd.Timedelta(days=1)
    other_mode = other.iloc[0]["mode"]
    _, again, _ = _streamed(tmp_path / "c", other, stops)
    assert {d.role: d for d in again.digests}[f"days:{other_mode}"] != mine[f"days:{other_mode}"]


def test_a_week_re_dated_with_a_fresh_card_per_day_is_refused_day_by_day(tmp_path):
    """atk6 (MAJOR 1): every date moved by a week and a fresh card per card and day: the per-card sets, the card
    ids and the dated digests all differ, yet an Opal release of the new week reads the same partitions under new
    dates. Each day's tap-ons by place (``day:<mode>@<date>``, compared whatever the mode and the date) match, so
    it is refused; so is an extract of one of the days. Days under :data:`MIN_DAY_TAP_ONS` tap-ons claim none."""
    clean, stops = _week_taps()
    day = clean["tap_on_time"].dt.normalize()
    per_day = clean.assign(card_id=pd.factorize(pd.MultiIndex.from_arrays([clean["card_id"], day]))[0] + 60_000_000)
    moved = per_day.assign(tap_on_time=per_day["tap_on_time"] + pd.Timedelta(days=7),
                           tap_off_time=per_day["tap_off_time"] + pd.Timedelta(days=7))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", moved, stops, ("2016-08-15", "2016-08-21"))
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    same = _no_period([r for r in theirs if theirs[r] in mine.values()])
    dated = ("*day:", "*shape:", "*nshape:")
    assert same and all(r.startswith(dated) for r in same)
    assert len(same) == sum(r.startswith(dated) for r in theirs) > 20  # every day claimed matches
    message, store, ledger = _refused(tmp_path, full, got, "opal", "next-week")
    assert ("read the same bus, ferry, train tap-ons of a day (one day's tap-ons by location, whatever the date, "
            "the cards and the times of day); one person cannot be in two populations.") in message
    monday = moved[moved["tap_on_time"] < pd.Timestamp("2016-08-16")]
    _, one_day, _ = _streamed(tmp_path / "c", monday, stops, ("2016-08-15", "2016-08-15"))
    with pytest.raises(PopulationOverlapError):
        _charge(store, ledger, _sets("one-day", "riders-b"), one_day)
    few = {d.role: d for d in content.of_clean_trips(clean.iloc[:300], stops).digests}
    assert not [r for r in few if r.startswith(("day:", "shape:"))]  # about 14 tap-ons a mode and day: none


def test_one_mode_re_extracted_with_its_stations_renamed_and_fresh_cards_is_refused(tmp_path):
    """atk7 (MAJOR): one mode's rows with fresh card pseudonyms (one to one) and a stop table spelling that mode's
    stations otherwise ("Central" for "S1"): every claim keyed by a station's name differed, yet a release reads the
    same records under other labels. Each day's tap-on counts per place, sorted, labels left out
    (``shape:<mode>@<date>``, compared whatever the mode and the date), match: refused, for an Opal release and for
    a passenger kind read from the same taps."""
    clean, stops = _week_taps()
    train = clean[clean["mode"] == "train"]
    extract = train.assign(card_id=train["card_id"] * 3 + 40_000_000)
    renamed = stops.assign(name=np.where(stops["mode"] == "train", "Renamed " + stops["name"].str[::-1] + " St",
                                         stops["name"]))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, gated = _streamed(tmp_path / "b", extract, renamed)
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    same = _no_period([r for r in theirs if theirs[r] in mine.values()])
    assert same and all(r.startswith("*shape:train@") for r in same)
    kinds = claim_of(KEY, content.of_clean_trips(gated, renamed)).fingerprints  # what a passenger kind claims
    assert _no_period([r for r in kinds if kinds[r] in mine.values()]) == same
    message, _, _ = _refused(tmp_path, full, got, "opal", "renamed")
    assert ("read the same train tap-on counts of a day (one day's tap-ons counted per location, whatever the "
            "locations' names, the date, the cards and the times of day); one person cannot be in two "
            "populations.") in message


def test_bus_rows_over_a_stop_table_renaming_the_stops_and_correcting_a_postcode_are_refused(tmp_path):
    """atk8 (MAJOR): the sequences and trajectories from taps read a bus stop by its name, the postcode-keyed claims
    by its postcode: bus rows with fresh card pseudonyms over a newer stop table that renames every bus stop and
    moves the busiest one's postcode escaped both. Each bus day's tap-on counts per stop name, sorted, labels aside
    (``nshape:bus@<date>``), match: refused."""
    clean, stops = _week_taps()
    bus = clean[clean["mode"] == "bus"]
    extract = bus.assign(card_id=bus["card_id"] * 5 + 30_000_000)
    busiest = int(bus["tap_on_stop"].value_counts().index[0])
    newer = stops.assign(name=np.where(stops["mode"] == "bus", "Bus stand " + stops["stop_id"].astype(str),
                                       stops["name"]),
                         postcode=stops["postcode"].where(stops["stop_id"] != busiest, stops["postcode"] + 1))
    full = content.of_clean_trips(clean, stops)
    got = content.of_clean_trips(extract, newer)
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    same = _no_period([r for r in theirs if theirs[r] in mine.values()])
    assert same and all(r.startswith("*nshape:bus@") for r in same)
    message, _, _ = _refused(tmp_path, full, got, "seq-bus", "seq-bus-b")
    assert ("read the same bus tap-on counts of a day by stop name (one day's tap-ons counted per stop name, "
            "whatever the names, the postcodes, the date, the cards and the times of day)") in message


def test_a_small_mode_re_extracted_with_its_stations_renamed_and_fresh_cards_is_refused(tmp_path):
    """atk9 (MAJOR): a mode of a few stations, or of days under 50 tap-ons, claims no day ``shape``; re-extracted
    with its stations renamed and fresh card pseudonyms, every name-keyed claim differed. The period's tap-on counts
    per place, sorted, labels aside (``pshape:<mode>``, 50 tap-ons at 2 places or more), match: refused. A mode of
    one station is no shape at all (the threat model says so)."""
    clean, stops = trips_on_stop_table(400), stop_table()
    ferry = clean[clean["mode"] == "ferry"]
    assert ferry.groupby(ferry["tap_on_time"].dt.date).size().max() < content.MIN_DAY_TAP_ONS  # no day claims
    extract = ferry.assign(card_id=ferry["card_id"] + 90_000_000)
    renamed = stops.assign(name=np.where(stops["mode"] == "ferry", stops["name"] + " (F)", stops["name"]))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", extract, renamed)
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    assert [r for r in theirs if theirs[r] in mine.values()] == ["pshape:ferry", "sshape:ferry", "*pshape:ferry",
                                                                 "*sshape:ferry"]
    message, _, _ = _refused(tmp_path, full, got, "opal", "ferry-b")
    assert ("read the same ferry tap-on counts of the period (its tap-ons counted per location, whatever the "
            "locations' names, the cards and the times); one person cannot be in two populations.") in message
    one = content.period_shapes("ferry", content.token_counts(np.full(80, 7, dtype=np.uint64)))
    assert one == ()  # one place: no shape


def test_bus_rows_relabelled_as_train_with_the_stops_renamed_are_refused(tmp_path):
    """atk10 (MAJOR): bus rows relabelled as train (in the trips and the stop table), the stops renamed one to one,
    fresh card pseudonyms: the bus counts per stop name (``nshape``, ``pnshape``) are the train counts per place
    (``shape``, ``pshape``) of the re-extract, compared as one family whatever the mode: refused."""
    clean, stops = _week_taps()
    bus = clean[clean["mode"] == "bus"]
    extract = bus.assign(mode="train", card_id=bus["card_id"] * 11 + 20_000_000)
    relabelled = stops.assign(mode=np.where(stops["mode"] == "bus", "train", stops["mode"]),
                              name=np.where(stops["mode"] == "bus", "Halt " + stops["stop_id"].astype(str),
                                            stops["name"]))
    relabelled = relabelled[(stops["mode"] == "bus") | (stops["mode"] != "train")]  # the bus stops, now train
    full = content.of_clean_trips(clean, stops)
    got = content.of_clean_trips(extract, relabelled)
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    same = [r for r in theirs if theirs[r] in mine.values()]
    assert "*pshape:train" in same and any(r.startswith("*shape:train@") for r in same)
    message, _, _ = _refused(tmp_path, full, got, "seq-bus", "seq-bus-as-train")
    assert "read the same bus tap-on counts of a day by stop name" in message


def test_atk11_regroupings_a_mode_split_and_swapped_taps_with_renamed_stations_are_refused(tmp_path):
    """atk11 (MAJOR, two): (1) part of one mode's stations relabelled as another mode by a newer feed, fresh card
    pseudonyms, as an Opal release: no mode holds the same tap-ons, but the union of the two does
    (``ushape:lightrail+train``, compared with the original's ``pshape:train``); (2) each trip's tap-on and tap-off
    swapped, the stations renamed and fresh pseudonyms, as station sets: the tap-on counts are the original's
    tap-off counts, but each place's taps, whichever tap, are the same (``sshape:train``)."""
    clean, stops = _week_taps()
    train = clean[clean["mode"] == "train"]
    moved_ids = set(stops.loc[stops["mode"] == "train", "stop_id"].iloc[:10])  # a tenth of the train stations
    split = train.assign(card_id=train["card_id"] * 13 + 10_000_000,
                         mode=np.where(train["tap_on_stop"].isin(moved_ids), "lightrail", "train"))
    feed = pd.concat([stops, stops[stops["mode"] == "train"].assign(  # each train station also as light rail
        mode="lightrail", stop_id=lambda t: t["stop_id"] + 1000)], ignore_index=True)
    split = split.assign(tap_on_stop=np.where(split["mode"] == "lightrail", split["tap_on_stop"] + 1000,
                                              split["tap_on_stop"]),
                         tap_off_stop=split["tap_off_stop"].where(split["mode"] != "lightrail",
                                                                  split["tap_off_stop"] + 1000))
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", split, feed)
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    assert "*ushape:lightrail+train" in [r for r in theirs if theirs[r] in mine.values()]
    message, _, _ = _refused(tmp_path, full, got, "opal", "split")
    assert "one person cannot be in two populations" in message

    has_off = train["tap_off_stop"].notna()
    swapped = train[has_off].assign(card_id=lambda t: t["card_id"] + 5_000_000,
                                    tap_on_stop=lambda t: t["tap_off_stop"].astype("int64"),
                                    tap_off_stop=train.loc[has_off, "tap_on_stop"].astype("Int64"))
    renamed = stops.assign(name=np.where(stops["mode"] == "train", stops["name"] + " Station", stops["name"]))
    original = content.of_clean_trips(train[has_off], stops)
    theirs = claim_of(KEY, content.of_clean_trips(swapped, renamed)).fingerprints
    mine = claim_of(KEY, original).fingerprints
    same = [r for r in theirs if theirs[r] in mine.values()]
    assert "*sshape:train" in same and {r.lstrip("*").split(":")[0] for r in same} == {"sshape"}  # and its days'


def test_atk12_one_day_of_a_regrouped_mode_is_refused(tmp_path):
    """atk12 (MAJOR): the Monday of an already released week, re-extracted over a newer feed that moves a tenth of
    the train stations to light rail, with fresh pseudonyms: the unions of modes were claimed over the period only,
    and compared with the period's shapes only. A day's unions are claimed too, and every label-free tap-on count
    vector is one family (a one-day extract's period is the original's day): refused."""
    clean, stops = _week_taps()
    monday = clean[(clean["mode"] == "train") & (clean["tap_on_time"] < pd.Timestamp("2016-08-09"))]
    moved_ids = set(stops.loc[stops["mode"] == "train", "stop_id"].iloc[:10])
    split = monday.assign(card_id=monday["card_id"] * 17 + 60_000_000,
                          mode=np.where(monday["tap_on_stop"].isin(moved_ids), "lightrail", "train"))
    is_lr = split["mode"] == "lightrail"
    split = split.assign(tap_on_stop=np.where(is_lr, split["tap_on_stop"] + 1000, split["tap_on_stop"]),
                         tap_off_stop=split["tap_off_stop"].where(~is_lr, split["tap_off_stop"] + 1000))
    feed = pd.concat([stops, stops[stops["mode"] == "train"].assign(
        mode="lightrail", stop_id=lambda t: t["stop_id"] + 1000)], ignore_index=True)
    _, full, _ = _streamed(tmp_path / "a", clean, stops)
    _, got, _ = _streamed(tmp_path / "b", split, feed, ("2016-08-08", "2016-08-08"))
    mine, theirs = claim_of(KEY, full).fingerprints, claim_of(KEY, got).fingerprints
    same = [r for r in theirs if theirs[r] in mine.values()]
    assert any(r.startswith("*ushape:lightrail+train") for r in same)
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("opal"), full)
    with pytest.raises(PopulationOverlapError):
        _charge(store, ledger, _sets("monday-remoded", "riders-b"), got)


# ---- keyed claims and the store ---------------------------------------------------------------------------------

def test_card_hashes_are_keyed_distinct_and_sorted():
    cards = np.array([0, 1, 256, 2**40, -5, 7], dtype=np.int64)
    h = claims.card_hashes(KEY, content.card_ids(cards))
    assert h.dtype == np.uint64 and h.size == 6 and (np.diff(h.astype(np.float64)) > 0).all()
    assert not np.array_equal(h, claims.card_hashes(bytes(32), content.card_ids(cards)))  # another home's key
    np.testing.assert_array_equal(h, claims.card_hashes(KEY, content.card_ids(cards[::-1])))


def test_fingerprints_are_keyed_and_name_no_content():
    d = content.ContentDigest("sets", 3, (1, 2))
    fp = claims.input_fingerprint(KEY, d)
    assert fp.startswith("claim-v1:sets:") and fp != claims.input_fingerprint(bytes(32), d)
    assert fp != claims.input_fingerprint(KEY, content.ContentDigest("sets", 3, (1, 3)))


def _ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


def _charge(store: ClaimStore, ledger: Ledger, events: list, what: InputContent) -> str:
    """A release as the tail makes it: its claim refused or recorded before the charge, the charge checking again."""
    claim = claim_of(KEY, what)
    existing = ledger.entries()
    refuse_overlap(store, claim, existing, events)
    same = [r for r, p in claims.charged_populations(existing).items() if p == events[0].population]
    attempt = store.record(events[0].release_id, claim, same)
    ledger.charge(events, check=claims.overlap_check(store, attempt))
    return attempt


def _refused(tmp_path: Path, first: InputContent, second: InputContent, first_id: str = "opal",
             second_id: str = "second") -> tuple[str, ClaimStore, Ledger]:
    """``first`` charged under ``default``, then ``second`` refused under ``riders-b`` with nothing charged: the
    refusal's message (and the store and ledger, for what a test does next)."""
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets(first_id), first)
    with pytest.raises(PopulationOverlapError) as info:
        _charge(store, ledger, _sets(second_id, "riders-b"), second)
    assert second_id not in {e.release_id for e in ledger.entries()}
    return str(info.value), store, ledger


def _sets(rid: str, population: str = "default", fingerprint: str = "f") -> list:
    return [replace(ngram_event(rid, *WEEK, 0.5), population=population, input_fingerprint=fingerprint + rid)]


def taps(cards, n=50) -> InputContent:
    return InputContent((content.ContentDigest("trips", n, (n, 7 * n)),), content.card_ids(np.asarray(cards)))


def test_one_shared_card_with_another_population_is_refused_naming_the_release_never_the_card(tmp_path):
    store, ledger = ClaimStore(tmp_path / "private" / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("first"), taps(range(1000, 2000)))
    # the same taps (any form) under the same population: they compose, as before
    _charge(store, ledger, _sets("again"), taps(range(1000, 2000), n=51))
    # other people under another population: their own population
    _charge(store, ledger, _sets("mtl", "montreal"), taps(range(5000, 6000), n=52))
    # one card of 'first' among other people's under another population: refused
    with pytest.raises(PopulationOverlapError) as info:
        _charge(store, ledger, _sets("mixed", "montreal"), taps([*range(7000, 7100), 1999], n=53))
    msg = str(info.value)
    assert info.value.refusal == "population-overlap"
    assert msg == ("release 'mixed' of population 'montreal' reads records of people already released under "
                   "population 'default': release 'first' read at least 1 of the 101 cards; one person cannot be in "
                   "two populations. Release it under population 'default' (--population default), or release "
                   "other people's records; nothing was charged")
    assert "1999" not in msg
    assert "mixed" not in {e.release_id for e in ledger.entries()}


def test_the_same_id_less_content_under_another_population_is_refused(tmp_path):
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    file = InputContent((content.ContentDigest("sequences", 20, (11, 12)),))
    _charge(store, ledger, _sets("seq"), file)
    with pytest.raises(PopulationOverlapError, match=r"release 'seq' read the same sequences file content"):
        _charge(store, ledger, _sets("copy", "riders-d"), file)
    other = InputContent((content.ContentDigest("sequences", 19, (11, 13)),))  # one record less: other content
    _charge(store, ledger, _sets("fewer", "riders-d"), other)


@pytest.mark.parametrize("role", ["sequences", "trajectories", "sets"])
def test_the_same_date_less_file_for_another_period_is_refused(tmp_path, role):
    """atk39 #5: the same sequence, trajectory or set file (no dates in its records) was released for January and
    again for February, composed in parallel: every record released twice (ε=2 per record) while each period's cap
    and the data card said ε=1. The second release is refused (exit 3, registered) by its claim, by the dry run's
    check and inside its charge; the same file for the same period composes under that period's cap; another file
    for February goes on."""
    from tasks.budget import charge_budget, check_budget, record_claim
    from transit_release.errors import BudgetError
    from transit_release.files.home import Home
    from transit_release.runtime.outcome import exit_code

    home = Home.at(tmp_path / "home").prepare()
    policy = load_budget_policy()
    file = InputContent((content.ContentDigest(role, 20, (11, 12)),))
    jan, feb = ("2026-01-01", "2026-01-31"), ("2026-02-01", "2026-02-28")
    event = lambda rid, period: [replace(ngram_event(rid, *period, 0.5), input_fingerprint="f" + rid)]  # noqa: E731

    def release(rid, period, what=file):
        charge_budget.fn(home, event(rid, period), policy, record_claim.fn(home, what, event(rid, period)))

    release("jan", jan)
    assert check_budget.fn(home, event("feb", feb), policy, file)["exit"] == 3  # the dry run's verdict
    with pytest.raises(BudgetError) as info:
        record_claim.fn(home, file, event("feb", feb))
    assert type(info.value).__name__ == "RecordsOfAnotherPeriodError" and exit_code(info.value) == 3
    assert info.value.refusal == "records-of-another-period"
    assert str(info.value) == (
        f"release 'feb' for 2026-02-01..2026-02-28 reads the same {role} file content as release 'jan' read for "
        "2026-01-01..2026-01-31: these records carry no dates, so one file is the export of one period; released "
        "for two, each passenger's records would be released twice while each period's cap and the per-unit "
        "statement count them once. Declare the period the file covers (2026-01-01..2026-01-31), or give the file "
        "of 2026-02-01..2026-02-28; nothing was charged")
    # inside the charge too (claimed before 'jan' was charged: the charge checks again)
    attempt = ClaimStore.of(home).record("feb2", claim_of(home.fingerprint_key(), file), [])
    with pytest.raises(BudgetError, match="reads the same"):
        charge_budget.fn(home, event("feb2", feb), policy, attempt)
    assert {e.release_id for e in Ledger(home.ledger).entries()} == {"jan"}
    release("jan-again", jan)  # the same period: sequential, under its cap
    release("feb-own", feb, InputContent((content.ContentDigest(role, 21, (1, 2)),)))  # February's own file


def test_a_claim_whose_release_was_never_charged_is_ignored_and_forgotten(tmp_path):
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    attempt = store.record("refused", claim_of(KEY, taps(range(10))), [])
    _charge(store, ledger, _sets("elsewhere", "other"), taps(range(10)))  # 'refused' never charged
    store.forget(attempt)
    with closing_store(store) as con:
        assert con.execute("SELECT count(*) FROM attempts WHERE release_id = 'refused'").fetchone() == (0,)


def closing_store(store):
    from contextlib import closing

    return closing(sqlite3.connect(store.path))


def test_the_charge_checks_again_inside_its_transaction(tmp_path):
    """Two releases of one card set under two populations, both claimed before either is charged: the second
    charge sees the first and refuses (the ledger runs the check again once its head moved)."""
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    a = store.record("a", claim_of(KEY, taps(range(100))), [])
    b = store.record("b", claim_of(KEY, taps(range(50, 60), n=10)), [])
    ledger.charge(_sets("a"), check=claims.overlap_check(store, a))
    with pytest.raises(PopulationOverlapError, match="release 'a' read at least 10 of the 10 cards"):
        ledger.charge(_sets("b", "riders-d"), check=claims.overlap_check(store, b))


def test_a_population_stores_each_card_once(tmp_path):
    """Weekly releases of the same riders store only the cards new to their population."""
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("w1"), taps(range(0, 1000)))
    w2 = _charge(store, ledger, _sets("w2"), taps(range(100, 1100), n=60))
    assert store.claim(w2).cards.size == 100 and store.claim(w2).n_cards == 1000
    with closing_store(store) as con:
        assert sum(len(b) for (b,) in con.execute("SELECT hashes FROM card_hashes")) == 8 * 1100
    with pytest.raises(PopulationOverlapError, match="release 'w2' read at least 1 of the 1 cards"):
        _charge(store, ledger, _sets("x", "riders-d"), taps([1050], n=61))


def test_the_store_is_private(tmp_path):
    store = ClaimStore(tmp_path / "private" / "claims.sqlite", KEY)
    store.record("r", claim_of(KEY, taps(range(3))), [])
    assert (store.path.stat().st_mode & 0o077) == 0


# ---- declared populations ---------------------------------------------------------------------------------------

def _policy_data(populations=None) -> dict:
    import yaml

    from transit_release.accounting.policy import default_policy_path

    data = yaml.safe_load(default_policy_path().read_text())
    if populations is not None:
        data["policy"]["populations"] = populations
    return data


def test_a_policy_without_declarations_keeps_one_population():
    policy = load_budget_policy()
    assert not policy.declares_populations and [p.name for p in policy.populations] == ["default"]
    assert policy.population(None).name == "default"
    with pytest.raises(UndeclaredPopulationError) as info:
        policy.population("riders-d")
    assert str(info.value).startswith("population 'riders-d' is not declared in the budget policy ")
    assert str(info.value).endswith("(declared: default): a population is a declared set of people, not a word "
                                    "on the command line. Declare it under 'populations:' with the people it "
                                    "covers (only if they are other people than every other population's), or "
                                    "name a declared one; nothing was read or charged")
    # a population a release named before declarations existed is still accepted (its releases run again)
    assert policy.population("montreal", iter(["default", "montreal"])).name == "montreal"


def test_declared_populations_and_their_errors():
    policy = BudgetPolicy.from_dict(_policy_data([{"name": "default", "covers": "Sydney's Opal cards"},
                                                  {"name": "mtl", "covers": "Montréal's\n  OPUS cards"}]))
    assert policy.declares_populations and policy.population("mtl").covers == "Montréal's OPUS cards"
    with pytest.raises(UndeclaredPopulationError):
        policy.population("montreal", ["montreal"])  # a declaring policy accepts its declarations only
    for bad, message in [
        ([], "'populations:' must be a non-empty list"),
        ([{"name": "a"}], r"populations\[0\] must be a mapping of exactly 'name' and 'covers'"),
        ([{"name": "A b", "covers": "x"}], r"populations\[0\]: 'name': population must be lower-case"),
        ([{"name": "a", "covers": " "}], "'covers' must say in words whom population 'a' covers"),
        ([{"name": "a", "covers": "x"}, {"name": "a", "covers": "y"}], r"population names must be unique; "
                                                                        r"repeated: \['a'\]"),
    ]:
        with pytest.raises(ConfigError, match=message):
            BudgetPolicy.from_dict(_policy_data(bad))


def test_the_audit_lists_every_population_with_the_first_release_that_named_it(tmp_path):
    policy = BudgetPolicy.from_dict(_policy_data([{"name": "default", "covers": "Sydney"},
                                                  {"name": "mtl", "covers": "Montréal"}]))
    ledger = _ledger(tmp_path)
    ledger.charge(card_events("card"))
    ledger.charge(_sets("n1", "mtl"))
    ledger.charge(_sets("n2", "mtl"))
    ledger.charge(_sets("old", "brisbane"))  # named before the policy declared its populations
    assert policy.population_list(ledger.entries()) == [
        {"name": "default", "covers": "Sydney", "declared": True, "first_release": "card", "releases": 1},
        {"name": "mtl", "covers": "Montréal", "declared": True, "first_release": "n1", "releases": 2},
        {"name": "brisbane", "covers": None, "declared": False, "first_release": "old", "releases": 1}]


def test_the_threat_model_says_what_the_claims_and_a_dry_run_answer_and_for_how_long():
    """atk40 m1: the card-membership oracle of a dry run and the claim store's retention are documented, with what
    an operator should do; privacy.md's data-at-rest list points there."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    threat = " ".join((docs / "threat-model.md").read_text(encoding="utf-8").split())
    for words in ('an oracle for "was card X read by a release of another population"',
                  "for as long as the home exists",
                  "in effect this is pseudonymous card data, kept after the raw data's own retention",
                  "give access to the home only to people cleared for the raw card data",
                  "The tool has no command that prunes claims"):
        assert words in threat, words
    privacy = " ".join((docs / "privacy.md").read_text(encoding="utf-8").split())
    assert "[threat-model.md](threat-model.md#one-person-one-population) says what it reveals" in privacy
    assert "## One person, one population" in (docs / "threat-model.md").read_text(encoding="utf-8")


# ---- atk40 N1-N3: an id-less file under another kind or universe, a tap file split by mode --------------------

def test_the_same_id_less_file_read_as_another_kind_or_over_a_narrower_universe_is_refused(tmp_path):
    """atk40 N1: one file of space-separated station ids released as sequences under 'default' and as sets under
    'riders-b' was not matched (the claim keyed each digest by its kind), nor with the locations file given one
    unused extra station (the ledger's byte check). N2: the same file over a locations file without one rare
    station (the line using it set aside, within the quarantine limit) had another digest. Every record line is
    now digested before the universe filter, as the set of its ids, and compared whatever the kind."""
    lines = ["A B C", "B C", "C A", "A", "D A B", "B A A"]
    path = _write(tmp_path / "stations.txt", lines)
    full = LocationUniverse(("A", "B", "C", "D"), "locations.txt")
    extended = LocationUniverse(("A", "B", "C", "D", "Z"), "locations with one unused station")
    narrow = LocationUniverse(("A", "B", "C"), "locations without the rare station D")
    seqs = content.of_record_input("sequences", read_sequence_file(path, full))
    sets = content.of_record_input("sets", read_set_file(path, extended))
    narrow_sets = read_set_file(path, narrow)
    assert narrow_sets.quarantine_counts == {"unknown_item": 1}  # the line with D set aside
    narrow_sets = content.of_record_input("sets", narrow_sets)
    assert seqs.digests[1] == sets.digests[1] == narrow_sets.digests[1]  # every line, as sets of ids
    assert seqs.digests[1].role == content.LINES and seqs.digests[1].records == len(lines)
    assert sets.digests[0] != narrow_sets.digests[0]  # the kept records differ, as claims recorded them before
    # a trajectory file whose hours are dropped is the same lines; one line changed is not
    traj = _write(tmp_path / "traj.txt", [" ".join(f"{t}@{3 * i}" for i, t in enumerate(x.split())) for x in lines])
    assert content.of_record_input("trajectories", read_trajectory_file(traj, full)).digests[1] == seqs.digests[1]
    other = content.of_record_input("sets", read_set_file(_write(tmp_path / "o.txt", ["A B D", *lines[1:]]), full))
    assert other.digests[1] != seqs.digests[1]

    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("seqs"), seqs)
    for rid, what in (("as-sets", sets), ("narrower", narrow_sets)):
        with pytest.raises(PopulationOverlapError) as info:
            _charge(store, ledger, _sets(rid, "riders-b"), what)
        assert str(info.value).startswith(
            f"release '{rid}' of population 'riders-b' reads records of people already released under population "
            "'default': release 'seqs' read the same record lines (each line's location ids, in any order, "
            "whichever kind read them); one person cannot be in two populations.")
        assert " A " not in str(info.value) and "D" not in str(info.value).split("read the same")[1]
    # the same file under the same population composes; another file under another population goes on
    _charge(store, ledger, _sets("again-as-sets"), sets)
    _charge(store, ledger, _sets("others", "riders-b"), other)
    # a claim written before the lines digest (its kind's digest only) still compares as before
    _charge(store, ledger, _sets("old"), InputContent(seqs.digests[:1]))


def test_the_same_id_less_file_of_another_kind_for_another_period_is_refused(tmp_path):
    from tasks.budget import charge_budget, record_claim
    from transit_release.errors import RecordsOfAnotherPeriodError
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home").prepare()
    path = _write(tmp_path / "s.txt", ["A B", "B C A", "C"])
    u = LocationUniverse(("A", "B", "C"), "locations.txt")
    jan = [replace(ngram_event("jan", "2026-01-01", "2026-01-31", 0.5), input_fingerprint="fjan")]
    feb = [replace(ngram_event("feb", "2026-02-01", "2026-02-28", 0.5), input_fingerprint="ffeb")]
    charge_budget.fn(home, jan, load_budget_policy(),
                     record_claim.fn(home, content.of_record_input("sequences", read_sequence_file(path, u)), jan))
    with pytest.raises(RecordsOfAnotherPeriodError) as info:
        record_claim.fn(home, content.of_record_input("sets", read_set_file(path, u)), feb)
    assert str(info.value).startswith(
        "release 'feb' for 2026-02-01..2026-02-28 reads the same record lines (each line's location ids, in any "
        "order, whichever kind read them) as release 'jan' read for 2026-01-01..2026-01-31:")


def test_a_per_mode_extract_with_fresh_card_pseudonyms_is_refused(tmp_path):
    """atk40 N3: the trips digest covered the clean rows of every mode, so a train-only re-extract of the same trips
    with renumbered cards (what a `--mode train` release reads) had another digest and no card in common. A tap
    file now also claims one digest per mode (card-less, stops as public locations); one mode's rows the same as
    an earlier release's is an overlap."""
    clean, stops = trips_on_stop_table(), stop_table()
    full = content.of_clean_trips(clean, stops)
    assert any(d.role.startswith("sshape:") and "@" in d.role for d in full.digests)  # a day's unions (atk12)
    assert sorted(d.role for d in full.digests if "@" not in d.role) == ["days:bus", "days:ferry", "days:train",
                                                    "ons:bus", "ons:ferry", "ons:train",  # #40's third review
                                                    "places:bus",  # and its fourth (atk4)
                                                    "pnshape:bus", "pshape:bus", "pshape:ferry",  # atk9
                                                    "pshape:train",
                                                    "sshape:bus", "sshape:bus+ferry", "sshape:bus+ferry+train",
                                                    "sshape:bus+train", "sshape:ferry", "sshape:ferry+train",
                                                    "sshape:train",  # atk11

                                                    "stations:bus", "stations:ferry", "stations:train",
                                                    "taps", "taps:bus", "taps:ferry", "taps:train",
                                                    "trips", "trips:bus", "trips:ferry", "trips:train",
                                                    "ushape:bus+ferry", "ushape:bus+ferry+train",  # atk11
                                                    "ushape:bus+train", "ushape:ferry+train"]
    per_mode = {d.role: d for d in full.digests}
    assert sum(d.records for r, d in per_mode.items() if r.startswith("trips:")) == per_mode["trips"].records
    train = clean[clean["mode"] == "train"]
    extract = train.assign(card_id=90_000_000 + (train["card_id"] * 31) % 997)  # fresh card pseudonyms
    got = content.of_clean_trips(extract, stops)
    assert [d.role for d in got.digests] == ["trips", "trips:train", "taps", "taps:train", "ons:train",
                                             "stations:train", "days:train", "pshape:train", "sshape:train"]
    assert got.digests[1] == per_mode["trips:train"] and got.digests[3] == per_mode["taps:train"]
    assert not np.intersect1d(got.cards, full.cards).size

    message, store, ledger = _refused(tmp_path, full, got, "full", "train-only")
    assert message.startswith(
        "release 'train-only' of population 'riders-b' reads records of people already released under population "
        "'default': release 'full' read the same train trips (the clean rows of that mode, in any order); one "
        "person cannot be in two populations.")
    # the other way round: the train extract first, then the full file under another population
    store2, ledger2 = ClaimStore(tmp_path / "claims2.sqlite", KEY), Ledger(tmp_path / "ledger2.sqlite")
    _charge(store2, ledger2, _sets("train-first"), got)
    with pytest.raises(PopulationOverlapError, match="release 'train-first' read the same train trips"):
        _charge(store2, ledger2, _sets("full-after", "riders-b"), full)
    # one train row dropped from the re-extract: another content (the threat model lists it)
    fewer = content.of_clean_trips(extract.iloc[1:], stops)
    _charge(store, ledger, _sets("fewer", "riders-b"), fewer)


def _fields_no_kind_reads(clean: pd.DataFrame, stops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A re-extract of ``clean`` (issue #40's known gap): fresh card pseudonyms (one to one), the train stations'
    names with a trailing space, the tap-offs emptied and every time shifted by seconds inside its minute."""
    shifted = (clean["tap_on_time"].dt.floor("min") + pd.Timedelta(seconds=7))
    extract = clean.assign(card_id=clean["card_id"] + 9_000_000, tap_on_time=shifted,
                           tap_off_time=pd.NaT, tap_off_stop=pd.array([pd.NA] * len(clean), "Int64"))
    renamed = stops.assign(name=np.where(stops["mode"] == "train", stops["name"] + " ", stops["name"]))
    return extract, renamed


def _without_ons(taps: InputContent) -> InputContent:
    """A tap file's content without its per-card set and by-day digests (``ons:``, ``places:``, ``stations:``,
    ``days:<mode>``): what fix 1 alone compares."""
    return InputContent(tuple(d for d in taps.digests if not d.role.startswith(content.ANY_MODE_PREFIXES)),
                        taps.cards)


def test_a_tap_file_claims_the_sequences_its_kind_builds_so_a_re_extract_of_unread_fields_is_refused(tmp_path):
    """Issue #40 (known gap, fix 1): a release from taps also claims the records its kind built from them, so a
    re-extract with fresh card pseudonyms that differs only in fields the kind does not read (a name's white space,
    the tap-offs, seconds) matches; and a sequence file written from those records matches the taps too."""
    from transit_release.inputs.sequences import sequences_from_trips

    clean, stops = trips_on_stop_table(), stop_table()
    extract, renamed = _fields_no_kind_reads(clean, stops)
    base = content.with_derived(_without_ons(content.of_clean_trips(clean, stops)), "sequences",
                                sequences_from_trips(clean, stops, "train"))
    again = content.with_derived(_without_ons(content.of_clean_trips(extract, renamed)), "sequences",
                                 sequences_from_trips(extract, renamed, "train"))
    assert not set(base.digests[:-2]) & set(again.digests[:-2])  # the trips digests differ (raw names, tap-offs)
    assert base.digests[-2:] == again.digests[-2:] and {d.role for d in again.digests[-2:]} == {"sequences", "lines"}
    message, store, ledger = _refused(tmp_path, base, again, "taps", "re-extract")
    assert message.startswith("release 're-extract' of population 'riders-b' reads records of people "
                                      "already released under population 'default': release 'taps' read the same "
                                      "sequences file content; one person cannot be in two populations.")
    # the sequences written out as a file (records built outside the tool) match the taps they came from
    data = sequences_from_trips(clean, stops, "train")
    ids = data.universe.ids
    s = data.sequences
    lines = [" ".join(ids[i] for i in s.locations[a:b]) for a, b in zip(s.offsets[:-1], s.offsets[1:]) if b > a]
    written = read_sequence_file(_write(tmp_path / "derived.txt", lines), data.universe)
    assert set(content.of_record_input("sequences", written).digests) == set(base.digests[-2:])
    with pytest.raises(PopulationOverlapError, match="release 'taps' read the same sequences file content"):
        _charge(store, ledger, _sets("file", "riders-c"), content.of_record_input("sequences", written))


def test_a_tap_file_claims_its_rows_with_stops_as_location_ids_so_a_name_s_white_space_is_refused(tmp_path):
    """Issue #40 (known gap, fix 2): a tap file also claims its clean rows with each non-bus stop keyed by its
    location id (``stop_location_id(name)``, what the passenger kinds count), so a train-only re-extract with fresh
    card pseudonyms whose stop table gives the train stations a trailing space, or ``_`` for spaces, matches the
    full file's ``taps:train``; the ``trips`` digests stay as before (an earlier claim compares as it did)."""
    clean, stops = trips_on_stop_table(), stop_table()
    stops = stops.assign(name=stops["name"].str.replace("S", "Stop ", regex=False))  # names with a space
    full = content.of_clean_trips(clean, stops)
    train = clean[clean["mode"] == "train"]
    extract = train.assign(card_id=train["card_id"] + 70_000_000)
    for variant in (stops["name"] + " ", stops["name"].str.replace(" ", "_", regex=False)):
        renamed = stops.assign(name=np.where(stops["mode"] == "train", variant, stops["name"]))
        got = content.of_clean_trips(extract, renamed)
        roles = {d.role: d for d in got.digests}
        mine = {d.role: d for d in full.digests}
        assert roles["trips:train"] != mine["trips:train"] and roles["taps:train"] == mine["taps:train"]
    # the trips digests are as claims recorded them before (raw names): the old ones still compare
    old_style = InputContent(tuple(d for d in full.digests if not d.role.startswith("taps")), full.cards)
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("old"), old_style)
    with pytest.raises(PopulationOverlapError, match="release 'old' read the same trips \\(its clean rows"):
        _charge(store, ledger, _sets("copy", "riders-b"), content.of_clean_trips(
            clean.assign(card_id=clean["card_id"] + 5_000_000), stops))
    # a claim that holds the named digests: the white-space variant is refused, naming what matched
    store2, ledger2 = ClaimStore(tmp_path / "claims2.sqlite", KEY), Ledger(tmp_path / "ledger2.sqlite")
    _charge(store2, ledger2, _sets("full"), full)
    with pytest.raises(PopulationOverlapError) as info:
        _charge(store2, ledger2, _sets("spaced", "riders-b"), got)
    assert str(info.value).startswith(
        "release 'spaced' of population 'riders-b' reads records of people already released under population "
        "'default': release 'full' read the same train trips with the stops as location ids (the clean rows of "
        "that mode, in any order, a stop name's white space aside); one person cannot be in two populations.")


def test_a_tap_file_claims_each_card_s_tap_on_locations_so_another_kind_of_a_re_extract_is_refused(tmp_path):
    """Issue #40 (known gap): per mode, a tap file claims each card's set of tap-on location ids (``ons:<mode>``),
    what every kind built from taps reads; so station sets of the full file (which also read the tap-offs) and
    sequences of a train-only re-extract with fresh card pseudonyms, the tap-offs emptied, the times shifted by
    seconds, the bus postcodes changed and the train names spaced, are refused; one tap moved is other content."""
    from transit_release.inputs.sequences import sequences_from_trips
    from transit_release.inputs.sets import sets_from_trips
    from transit_release.inputs.screening import Period
    from transit_release.inputs.universe import from_stop_locations

    clean, stops = trips_on_stop_table(), stop_table()
    extract, renamed = _fields_no_kind_reads(clean, stops)
    renamed = renamed.assign(postcode=renamed["postcode"] + 100)
    extract = extract[extract["mode"] == "train"]
    period = Period(pd.Timestamp("2016-08-08").date(), pd.Timestamp("2016-08-14").date())
    sets = sets_from_trips(clean, stops, period, from_stop_locations(stops, ("train",)), ("train",))
    full = content.with_derived(content.of_clean_trips(clean, stops), "sets", sets)
    got = content.with_derived(content.of_clean_trips(extract, renamed), "sequences",
                               sequences_from_trips(extract, renamed, "train"))
    mine, theirs = {d.role: d for d in full.digests}, {d.role: d for d in got.digests}
    assert _no_period([r for r in theirs if theirs[r] == mine.get(r)]) == ["ons:train", "days:train"]
    message, _, _ = _refused(tmp_path, full, got, "sets", "sequences")
    assert message.startswith(
        "release 'sequences' of population 'riders-b' reads records of people already released under population "
        "'default': release 'sets' read the same train tap-ons per card (each card's set of tap-on stations by name; "
        "times and tap-offs aside); one person cannot be in two populations.")
    moved = extract.copy()
    moved.iloc[0, moved.columns.get_loc("tap_on_stop")] = 31 + (int(moved.iloc[0]["tap_on_stop"]) - 30) % 30
    other = {d.role: d for d in content.of_clean_trips(moved, renamed).digests}
    assert other["ons:train"] != mine["ons:train"]


def test_a_tap_claim_s_derived_records_take_the_period_check_from_the_date_less_file_s_side_only(tmp_path):
    """A tap file's records carry dates, so its claim (with the records its kind built, #40) is not refused for
    another period by those derived digests; a date-less file written from them, for another period, is."""
    from tasks.budget import charge_budget, record_claim
    from transit_release.errors import BudgetError
    from transit_release.files.home import Home

    home, policy = Home.at(tmp_path / "home").prepare(), load_budget_policy()
    derived = content.ContentDigest("sequences", 20, (11, 12))
    taps_jan = InputContent((content.ContentDigest("trips", 30, (1, 2)), derived))
    taps_feb = InputContent((content.ContentDigest("trips", 31, (3, 4)), derived))  # other trips, same records
    jan, feb, mar = ("2026-01-01", "2026-01-31"), ("2026-02-01", "2026-02-28"), ("2026-03-01", "2026-03-31")
    event = lambda rid, period: [replace(ngram_event(rid, *period, 0.5), input_fingerprint="f" + rid)]  # noqa: E731

    def release(rid, period, what):
        charge_budget.fn(home, event(rid, period), policy, record_claim.fn(home, what, event(rid, period)))

    release("jan", jan, taps_jan)
    release("feb", feb, taps_feb)  # a tap claim: its dates decide its period
    with pytest.raises(BudgetError, match="release 'mar' for 2026-03-01..2026-03-31 reads the same sequences file "
                                          "content as release 'jan' read for 2026-01-01..2026-01-31"):
        release("mar", mar, InputContent((derived,)))


# ---- the records as the mechanism reads them (atk4): each cut to the mechanism's public cut length ----------------

def _week_taps(n: int = 2000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Taps of the declared week (2016-08-08, a Monday) on :func:`stop_table`: about ten train tap-ons a card."""
    clean = trips_on_stop_table(n, seed=3)
    return clean[clean["tap_on_time"] < pd.Timestamp("2016-08-15")].reset_index(drop=True), stop_table()


def _first_train_taps(clean: pd.DataFrame, h: int) -> pd.DataFrame:
    """atk4's variant: the train rows only, each card cut to its first ``h`` train tap-ons (in the builder's order:
    time, then stop), card ids renumbered."""
    train = clean[clean["mode"] == "train"].sort_values(["card_id", "tap_on_time", "tap_on_stop"], kind="stable")
    first = train.groupby("card_id", sort=False).head(h)
    return first.assign(card_id=first["card_id"] * 7 + 80_000_000).sample(frac=1, random_state=1)


def _trajectories(clean, stops):
    from transit_release.inputs.trajectories import trajectories_from_trips

    return trajectories_from_trips(clean, stops, pd.Timestamp(WEEK[0]).date(), mode="train")


def test_trajectories_of_a_first_h_taps_re_extract_under_another_population_are_refused(tmp_path):
    """atk4 (MAJOR): trajectories of the full taps under 'pa', then of a re-extract holding each card's first h = 6
    train tap-ons (fresh card ids) under 'pb'. Every trajectory mechanism reads only each record's first h points
    (the Markov model `trajs.truncated(h)`, SafePath's tree and joint rule the first h levels), so the outputs are
    the same; the full records, the tap-on sets and the card ids differ, and nothing matched. The records as the
    mechanism reads them (``cut:trajectories``) are claimed now: refused, nothing charged."""
    clean, stops = _week_taps()
    variant = _first_train_taps(clean, 6)
    full_data, cut_data = _trajectories(clean, stops), _trajectories(variant, stops)
    assert (full_data.trajectories.lengths > 6).any()  # records longer than the cut: the variant is another input
    # what every trajectory mechanism reads of either input is the same (so its outputs are)
    assert sorted(full_data.trajectories.truncated(6).to_lists()) == sorted(cut_data.trajectories.to_lists())
    full = content.with_derived(content.of_clean_trips(clean, stops), "trajectories", full_data, 6)
    got = content.with_derived(content.of_clean_trips(variant, stops), "trajectories", cut_data, 6)
    mine, theirs = {d.role: d for d in full.digests}, {d.role: d for d in got.digests}
    # the cut claim matches, and the days whose tap-ons all lie in each card's first six (atk6's day digests,
    # compared whatever their date): an Opal release of the full taps followed by these trajectories is matched
    # only by such days, a limit docs/threat-model.md states
    assert _no_period([r for r in theirs if theirs[r] == mine.get(r)]) == ["day:train@20160808", "shape:train@20160808",
                                                               "cut:trajectories"]
    assert not np.intersect1d(full.cards, got.cards).size
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("pa"), full)
    with pytest.raises(PopulationOverlapError) as info:
        _charge(store, ledger, _sets("pb", "pb"), got)
    assert info.value.refusal == "population-overlap"
    assert str(info.value).startswith(
        "release 'pb' of population 'pb' reads records of people already released under population 'default': "
        "release 'pa' read the same trajectories as the mechanism reads them (each cut to its first h points, h the "
        "release's height) and the same train tap-ons of a day (one day's tap-ons by location, whatever the date, "
        "the cards and the times of day); one person cannot be in two populations.")
    assert "pb" not in {e.release_id for e in ledger.entries()}  # nothing charged
    # a cut of another length reads other records: its cut claim is another (the Monday's tap-ons, all among each
    # card's first five, still match: the same people's day)
    five = content.with_derived(content.of_clean_trips(_first_train_taps(clean, 5), stops), "trajectories",
                                _trajectories(_first_train_taps(clean, 5), stops), 5)
    theirs = {d.role: d for d in five.digests}
    assert _no_period([r for r in theirs if theirs[r] == mine.get(r)]) == ["day:train@20160808", "shape:train@20160808"]


def _lines_of(data, role: str) -> list[str]:
    ids = data.universe.ids
    if role == "sequences":
        s = data.sequences
        return [" ".join(ids[i] for i in s.locations[a:b]) for a, b in zip(s.offsets[:-1], s.offsets[1:])]
    t = data.trajectories
    return [" ".join(f"{ids[loc]}@{hr}" for loc, hr in zip(t.locations[a:b], t.hours[a:b]))
            for a, b in zip(t.offsets[:-1], t.offsets[1:])]


@pytest.mark.parametrize("role", ["sequences", "trajectories"])
def test_the_cut_claim_of_a_file_is_that_of_the_taps_built_into_the_same_records(tmp_path, role):
    """A record file written from the records built from taps, and one written from a first-h-taps re-extract's,
    claim the same ``cut:<kind>`` as the taps: whichever source, the same records as the mechanism reads them."""
    from transit_release.inputs.sequences import sequences_from_trips

    clean, stops = _week_taps()
    build = ((lambda c: sequences_from_trips(c, stops, "train")) if role == "sequences" else
             (lambda c: _trajectories(c, stops)))
    read = read_sequence_file if role == "sequences" else read_trajectory_file
    data = build(clean)
    taps_claim = content.with_derived(content.of_clean_trips(clean, stops), role, data, 4).digests[-1]
    assert taps_claim.role == f"cut:{role}"
    written = read(_write(tmp_path / "full.txt", _lines_of(data, role)), data.universe)
    assert content.of_record_input(role, written, 4).digests[-1] == taps_claim
    first = build(_first_train_taps(clean, 4))
    cut_file = read(_write(tmp_path / "cut.txt", _lines_of(first, role)), first.universe)
    assert content.of_record_input(role, cut_file, 4).digests[-1] == taps_claim
    assert content.of_record_input(role, cut_file).digests[0] != content.of_record_input(role, written).digests[0]
    # without a cut (or for station sets, whose mechanisms read whole sets) no cut claim
    assert not [d for d in content.of_record_input(role, written).digests if d.role.startswith(content.CUT_PREFIX)]
    assert content.of_cut_records("sets", written, 4) == ()


@pytest.mark.parametrize("role,reader,lines,beyond,within", [
    ("sequences", read_sequence_file, ["A B C D E", "B C"], ["A B C D A", "B C"], ["A D C D E", "B C"]),
    ("trajectories", read_trajectory_file, ["A@1 B@3 C@5 D@9", "B@30"], ["A@1 B@3 C@5 A@7", "B@30"],
     ["A@1 E@3 C@5 D@9", "B@30"]),
])
def test_a_record_changed_beyond_the_cut_still_matches_and_within_it_does_not(tmp_path, role, reader, lines, beyond,
                                                                               within):
    u = LocationUniverse(("A", "B", "C", "D", "E"), "locations.txt")
    cut = lambda name, ls: content.of_record_input(role, reader(_write(tmp_path / name, ls), u), 3)  # noqa: E731
    base, later, early = cut("a.txt", lines), cut("b.txt", beyond), cut("c.txt", within)
    # changed beyond the cut: only the records as the mechanism reads them are the same (not the lines' sets)
    assert [a == b for a, b in zip(base.digests, later.digests)] == [False, False, True]
    assert not set(base.digests) & set(early.digests)  # changed within the cut: other records
    store, ledger = ClaimStore(tmp_path / "claims.sqlite", KEY), _ledger(tmp_path)
    _charge(store, ledger, _sets("file"), base)
    word = {"sequences": "the first locations it keeps", "trajectories": "its first h points"}[role]
    with pytest.raises(PopulationOverlapError, match=f"release 'file' read the same {role} as the mechanism reads "
                                                     f"them \\(each cut to {word}"):
        _charge(store, ledger, _sets("later", "riders-b"), later)
    _charge(store, ledger, _sets("early", "riders-b"), early)  # another record within the cut: other people


def test_a_file_cut_to_what_the_mechanism_reads_for_another_period_is_refused(tmp_path):
    """The cut claim is date-less as the file's: the same records as the mechanism reads them, for another
    period, would be released twice."""
    from tasks.budget import charge_budget, record_claim
    from transit_release.errors import RecordsOfAnotherPeriodError
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home").prepare()
    u = LocationUniverse(("A", "B", "C", "D"), "locations.txt")
    full = read_sequence_file(_write(tmp_path / "full.txt", ["A B C D", "B C"]), u)
    cut = read_sequence_file(_write(tmp_path / "cut.txt", ["A B C", "B C"]), u)
    jan = [replace(ngram_event("jan", "2026-01-01", "2026-01-31", 0.5), input_fingerprint="fjan")]
    feb = [replace(ngram_event("feb", "2026-02-01", "2026-02-28", 0.5), input_fingerprint="ffeb")]
    charge_budget.fn(home, jan, load_budget_policy(),
                     record_claim.fn(home, content.of_record_input("sequences", full, 3), jan))
    with pytest.raises(RecordsOfAnotherPeriodError) as info:
        record_claim.fn(home, content.of_record_input("sequences", cut, 3), feb)
    assert str(info.value).startswith(
        "release 'feb' for 2026-02-01..2026-02-28 reads the same sequences as the mechanism reads them (each cut to "
        "the first locations it keeps: the prefix tree's height, the n-gram model's lmax) as release 'jan' read for "
        "2026-01-01..2026-01-31:")
