"""Empirical audit of the set histogram (``sanitize_set_histogram``) with negative controls, and the public
manifest of a set release whose mechanism the universe size chose.

The claim the code makes (``releases/sets.py``, ``plan_spend`` of a :class:`SetHistogramEvent`): ε-DP per
passenger under add/remove of one whole station set, with ``δ`` the sampler's total-variation slack
(``set_histogram.delta_slack``, below 10⁻¹⁵). The case writes a tiny data set D (38 passengers over 3
stations) and ``D′ = D + one passenger`` whose set ``{S1}`` nobody in D has — S1 is a station nobody in D uses at
all — as set files, reads them back with the library's reader against the *public* locations file, as a
release does, and runs the release's own ``releases.sets.sanitize`` (``sanitize_set_histogram``) many times on
each (whole runs). Events are fixed in advance, on station names, over the released sets.

Why it is tight. Three stations make 7 cells; the passenger changes the cell ``{S1}`` by one. At ε = 1 the head
threshold is ``⌈ln 7⌉ = 2``: a noisy count of ``{S1}`` at or above it is published as it is, unless the raking
moves it (only when the noisy containment count of S1 disagrees with the estimate by more than 2 of its standard
deviations, √8). So "``{S1}`` released ≥ k" is close to "``Z ≥ k`` in D, ``Z ≥ k − 1`` in D′", whose ratio is
``e^ε`` exactly for the discrete Laplace noise. The rarer outcomes (``{S1}`` below the head threshold, shared
out from noisy sums) only blur it (post-processing).

Three more neighbours (atk40 M3) catch regressions this case cannot see; each was planted in production code and
failed the audit: a passenger at every station (the last cell left without noise; containment counts noised
instead of exact sets), 1,000 passengers with the raking active next to one at a station nobody uses (the raking's
targets taken from the true histogram), and sets built from taps, one per card (a card's tap-on and tap-off sets
kept as two records).

Negative controls (each must FAIL): the empty cells never noised (a set nobody has can never appear, so its
appearance names the passenger: the reason every cell of the public domain gets noise), the noise at half its
scale, and the universe read off the data.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pytest

import transit_release.inputs.sets as set_inputs
import transit_release.mechanisms.set_histogram as sh
from tests.privacy.audit import OneStream, check, per_run, run_case
# the set release's readers and the broken universe, as DiffPart's audit uses them
from tests.privacy.test_diffpart_audit import read_public, universe_from_the_data, write_sets
from tests.privacy.test_manifest_audit import CREATED, assert_same_public_manifest
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import read_locations_file
from transit_release.noise import NoiseSource
from transit_release.releases import sets as set_release
from transit_release.version import code_version

pytestmark = pytest.mark.privacy

STATIONS = ("S1", "S2", "S3")
EPSILON = 1.0
D = [("S2",)] * 15 + [("S2", "S3")] * 12 + [("S3",)] * 11
PASSENGER = ("S1",)  # a set nobody in D has, at a station nobody in D uses
PERIOD = Period(date(2026, 1, 1), date(2026, 1, 31))


@pytest.fixture
def files(tmp_path):
    """(locations file, D, D′) on disk."""
    locations = tmp_path / "locations.txt"
    locations.write_text("# the public station list\n" + "\n".join(STATIONS) + "\n", encoding="utf-8")
    return locations, write_sets(tmp_path / "d.txt", D), write_sets(tmp_path / "d2.txt", [*D, PASSENGER])


def setup_of(data: set_inputs.SetInput) -> set_release.SetSetup:
    """The setup a release plans: no --mechanism, no --fanout: the rule on the public universe size."""
    return set_release.set_setup(data.universe, EPSILON)


def set_draw(data: set_inputs.SetInput, generator):
    """``draw(n)`` → ``n`` whole runs, each ``released set (station names) → copies``."""
    budget = setup_of(data).budget
    ids = data.universe.ids

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            released = set_release.sanitize(data.sets, budget, OneStream(generator), "audit")
            out.append({tuple(ids[i] for i in s): c for s, c in released})
        return out

    return draw


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "set-histogram", case, side)


def copies_at_least(s, k):
    return per_run(lambda out: out.get(s, 0) >= k)


def lines_with(station, k):
    return per_run(lambda out: sum(c for s, c in out.items() if station in s) >= k)


def total_at_least(k):
    return per_run(lambda out: sum(out.values()) >= k)


EVENTS = {
    "{S1} released": copies_at_least(("S1",), 1),
    "{S1} released ≥ 2": copies_at_least(("S1",), 2),
    "{S1} released ≥ 3": copies_at_least(("S1",), 3),
    "{S1} released ≥ 4": copies_at_least(("S1",), 4),
    "lines with S1 ≥ 2": lines_with("S1", 2),
    "lines with S1 ≥ 4": lines_with("S1", 4),
    "{S1,S2} released": copies_at_least(("S1", "S2"), 1),
    "{S2} released ≥ 16": copies_at_least(("S2",), 16),
    "lines ≥ 40": total_at_least(40),
}


def histogram_case(files, runs, seed, control=""):
    locations, f, f2 = files
    d, d2 = read_public(f, locations), read_public(f2, locations)
    name = f"set histogram: passenger with a set nobody has at a station nobody uses, ε={EPSILON:g}"
    budget = setup_of(d).budget
    notes = (f"|I|={len(d.universe)}/{len(d2.universe)}, cells={budget.cells}, head threshold="
             f"{budget.head_threshold}, |D|={len(d.sets)}")
    return run_case(name, "set histogram", set_draw(d, noise(seed, name, "D")), set_draw(d2, noise(seed, name, "D′")),
                    EVENTS, runs, EPSILON, sh.delta_slack(budget), chunk=500, control=control, notes=notes)


def test_the_case_is_built_where_the_claim_is_tight(files):
    """The release's own rule picks the histogram for this public universe, and the thresholds the docstring's
    argument uses are the ones it computes."""
    locations, f, f2 = files
    d, d2 = read_public(f, locations), read_public(f2, locations)
    assert d.universe.ids == d2.universe.ids == STATIONS  # public: D does not decide the universe
    setup = setup_of(d)
    assert setup.mechanism == "histogram" and setup.by_rule
    assert (setup.budget.cells, setup.budget.head_threshold) == (7, 2)
    assert not any("S1" in s for s in D)
    assert 0 < sh.delta_slack(setup.budget) < 1e-15


@pytest.mark.slow
def test_a_passenger_with_a_set_nobody_has(files, audit_sizes, audit_seed, audit_report):
    result = histogram_case(files, audit_sizes.tree, audit_seed)
    check(result, audit_report, "PASS", power=0.6)
    seen = next(b for b in result.bounds if b.event == "{S1} released" and b.direction == "D vs D′")
    assert seen.hits_num > 0  # the set can come from D too: every cell of the public domain is noisy


# ---- more neighbours (atk40 M3): each catches a regression the case above cannot see -----------------------------
#
# - a passenger whose set is every station: the cell of every station is the last cell (an off-by-one leaving it
#   without noise) and the set with the most subsets (containment counts noised instead of exact sets give it a
#   sensitivity of 2^|I| − 1 = 7);
# - a data set large enough that the raking moves cells, next to a passenger at a station nobody uses (targets
#   taken from the true histogram instead of the noisy one release the station only when someone uses it);
# - a data set built from taps, as a release from ``--trips`` builds it (one set per card: a card's tap-on and
#   tap-off sets kept as two records double the passenger's weight).

EVERY = STATIONS  # a passenger at every station: nobody in D has that set
EVENTS_EVERY = {
    "{S1,S2,S3} released": copies_at_least(EVERY, 1),
    "{S1,S2,S3} released ≥ 2": copies_at_least(EVERY, 2),
    "{S1,S2,S3} released ≥ 3": copies_at_least(EVERY, 3),
    "lines with S1 ≥ 2": lines_with("S1", 2),
    "lines with S1 ≥ 4": lines_with("S1", 4),
    "lines with S1 ≥ 6": lines_with("S1", 6),
    "lines ≥ 40": total_at_least(40),
    "lines ≥ 44": total_at_least(44),
}


def every_station_case(tmp_path, runs, seed, control=""):
    locations = tmp_path / "locations.txt"
    locations.write_text("\n".join(STATIONS) + "\n", encoding="utf-8")
    d = read_public(write_sets(tmp_path / "d.txt", D), locations)
    d2 = read_public(write_sets(tmp_path / "d2.txt", [*D, EVERY]), locations)
    name = f"set histogram: passenger at every station (the last cell, the most subsets), ε={EPSILON:g}"
    budget = setup_of(d).budget
    return run_case(name, "set histogram", set_draw(d, noise(seed, name, "D")), set_draw(d2, noise(seed, name, "D′")),
                    EVENTS_EVERY, runs, EPSILON, sh.delta_slack(budget), chunk=500, control=control,
                    notes=f"|I|={len(d.universe)}, cells={budget.cells}, |D|={len(d.sets)}")


@pytest.mark.slow
def test_a_passenger_at_every_station(tmp_path, audit_sizes, audit_seed, audit_report):
    check(every_station_case(tmp_path, audit_sizes.tree, audit_seed), audit_report, "PASS", power=0.5)


TEN = tuple(f"T{i}" for i in range(10))
#: 1,000 passengers over T1..T9 of a 10-station universe (1,023 cells): the raking is active; nobody uses T0
_RNG = np.random.default_rng(3)
D_RAKED = [tuple(TEN[j] for j in sorted(_RNG.choice(np.arange(1, 10), _RNG.integers(1, 5), replace=False)))
           for _ in range(1000)]
EVENTS_RAKED = {"lines with T0 ≥ 1": lines_with("T0", 1), "lines with T0 ≥ 2": lines_with("T0", 2),
                "lines with T0 ≥ 4": lines_with("T0", 4)}


def raked_case(tmp_path, runs, seed, control=""):
    locations = tmp_path / "ten.txt"
    locations.write_text("\n".join(TEN) + "\n", encoding="utf-8")
    d = read_public(write_sets(tmp_path / "d.txt", D_RAKED), locations)
    d2 = read_public(write_sets(tmp_path / "d2.txt", [*D_RAKED, ("T0",)]), locations)
    name = f"set histogram: 1,000 passengers (the raking active), one at a station nobody uses, ε={EPSILON:g}"
    budget = setup_of(d).budget
    assert setup_of(d).mechanism == "histogram" and budget.cells == 1023
    return run_case(name, "set histogram", set_draw(d, noise(seed, name, "D")), set_draw(d2, noise(seed, name, "D′")),
                    EVENTS_RAKED, runs, EPSILON, sh.delta_slack(budget), chunk=100, control=control,
                    notes=f"|I|=10, cells={budget.cells}, |D|={len(d.sets)}")


@pytest.mark.slow
def test_a_passenger_at_a_station_nobody_uses_while_the_raking_moves_cells(tmp_path, audit_sizes, audit_seed,
                                                                          audit_report):
    """Not tight (the raking spreads T0's noisy count): what it catches is a release of T0 that depends on whether
    someone uses it (targets from the true histogram: about 2% of runs from D against 60% from D′)."""
    check(raked_case(tmp_path, max(300, audit_sizes.tree // 10), audit_seed), audit_report, "PASS")


TAP_STOPS = ("A", "B", "C")


def tap_input(extra_card: bool) -> set_inputs.SetInput:
    """Sets from taps, as ``sets --trips`` reads them (one set per card over the period): D's cards mirror D (a
    trip at B without a tap-off, a trip B→C, a trip at C without a tap-off); the passenger's card rides A→B and
    back B→A, one set {A, B} that nobody in D has."""
    import pandas as pd

    from transit_release.inputs.universe import from_stop_locations

    stops = pd.DataFrame({"stop_id": [11, 12, 13], "mode": ["train"] * 3, "name": list(TAP_STOPS),
                          "postcode": pd.array([2000, 2001, 2002], dtype="Int64")})
    trips = [(100 + i, 12, None) for i in range(15)] + [(200 + i, 12, 13) for i in range(12)] + \
            [(300 + i, 13, None) for i in range(11)]
    if extra_card:
        trips += [(999, 11, 12), (999, 12, 11)]
    on = pd.Timestamp("2026-01-05 08:00") + pd.to_timedelta(np.arange(len(trips)) * 7, unit="min")
    frame = pd.DataFrame({"card_id": np.array([t[0] for t in trips], dtype=np.int64), "mode": "train",
                          "tap_on_time": on, "tap_on_stop": np.array([t[1] for t in trips], dtype=np.int64),
                          "tap_off_time": [t + pd.Timedelta(minutes=20) if r[2] else pd.NaT for t, r in zip(on, trips)],
                          "tap_off_stop": pd.array([r[2] for r in trips], dtype="Int64")})
    universe = from_stop_locations(stops, ("train",), "stops")
    return set_inputs.sets_from_trips(frame, stops, PERIOD, universe, ("train",))


def taps_case(runs, seed, control=""):
    d, d2 = tap_input(False), tap_input(True)
    a, b = (f"train:{x}" for x in TAP_STOPS[:2])
    name = f"set histogram from taps: a card riding A→B and back, a set nobody has, ε={EPSILON:g}"
    budget = setup_of(d).budget
    events = {f"{{A,B}} released ≥ {k}": copies_at_least((a, b), k) for k in (1, 2, 3, 4)}
    events.update({"lines with A ≥ 2": lines_with(a, 2), "lines with A ≥ 4": lines_with(a, 4)})
    return run_case(name, "set histogram", set_draw(d, noise(seed, name, "D")), set_draw(d2, noise(seed, name, "D′")),
                    events, runs, EPSILON, sh.delta_slack(budget), chunk=500, control=control,
                    notes=f"|I|={len(d.universe)}, cells={budget.cells}, cards={len(d.sets)}")


def test_the_taps_case_is_one_set_per_card():
    d, d2 = tap_input(False), tap_input(True)
    assert (len(d.sets), len(d2.sets)) == (38, 39) and d.universe.ids == d2.universe.ids
    assert sorted(map(tuple, d2.sets.to_lists()))[:1] == [(0, 1)]  # the passenger's one set {A, B}


@pytest.mark.slow
def test_a_card_riding_there_and_back_from_taps(audit_sizes, audit_seed, audit_report):
    check(taps_case(audit_sizes.tree, audit_seed), audit_report, "PASS", power=0.5)


# ---- negative controls --------------------------------------------------------------------------

def test_control_empty_cells_never_noised_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    """Noise on the cells the data hold only (the others stay 0): a set nobody else has can never be released
    from D, so its release names the passenger."""
    def broken(records, budget, generator):
        noisy = ORIGINAL_NOISY(records, budget, generator)
        counts = np.bincount(sh.cell_of(records), minlength=noisy.size)
        return np.where(counts > 0, noisy, 0)

    monkeypatch.setattr(sh, "noisy_histogram", broken)
    result = histogram_case(files, audit_sizes.tree_control // 2, audit_seed, control="empty cells never noised")
    check(result, audit_report, "FAIL")
    assert result.worst.hits_den == 0 and "S1" in result.worst.event


ORIGINAL_NOISY = sh.noisy_histogram


def test_control_noise_scale_halved_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    original = sh.discrete_laplace_table
    monkeypatch.setattr(sh, "discrete_laplace_table", lambda scale: original(scale / 2))
    result = histogram_case(files, audit_sizes.tree_control, audit_seed, control="noise scale halved")
    check(result, audit_report, "FAIL")


def test_control_universe_from_the_data_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    """With the universe read off the file, D's universe lacks S1 (and the rule sees 2 items): ``{S1}`` can only
    ever come from D′."""
    monkeypatch.setattr(set_inputs, "read_set_file", universe_from_the_data)
    result = histogram_case(files, audit_sizes.tree_control // 2, audit_seed, control="universe from the data")
    check(result, audit_report, "FAIL")
    assert result.worst.direction == "D′ vs D" and result.worst.hits_den == 0


def test_runs_are_deterministic_with_a_seed_and_the_release_draws_through_the_module(files, monkeypatch):
    locations, f, _ = files
    d = read_public(f, locations)
    assert set_draw(d, noise(1, "x", "D"))(20) == set_draw(d, noise(1, "x", "D"))(20)
    calls = []
    monkeypatch.setattr(sh, "noisy_histogram", lambda *a: calls.append(1) or ORIGINAL_NOISY(*a))
    set_draw(d, noise(1, "x", "D"))(2)
    assert len(calls) == 2  # what the controls patch is what the release runs


# ---- the public manifest is the same for neighbours ----------------------------------------------

def manifest_from_file(path: Path, locations: Path) -> dict:
    """The manifest a set release of ``path`` publishes without --mechanism or --fanout, built as
    ``flows/sets_release.py`` builds it: the universe first, the mechanism and budget from it, then the data."""
    from tasks.sets import plan_set_spend, read_sets, set_setup

    universe = read_locations_file(locations)
    setup = set_setup.fn(universe, EPSILON, None, None)
    read_sets.fn(str(path), universe, 0.05)
    event = plan_set_spend.fn("sets-audit", PERIOD, setup.budget, "fingerprint", code_version())
    return set_release.build_manifest("sets-audit", PERIOD, universe, set_release.describe_input(False),
                                      setup.budget, event, "os-entropy", code_version(), CREATED,
                                      set_release.fanout_rule(None), setup.chosen)


def test_set_manifest_with_the_mechanism_rule_is_the_same_for_neighbours(files):
    """The mechanism follows the public universe's size (3 stations: the histogram), never the data: D′'s
    passenger at a station nobody in D uses changes neither the mechanism nor anything else public."""
    locations, f, f2 = files
    manifests = [manifest_from_file(p, locations) for p in (f, f2)]
    assert manifests[0]["privacy"]["mechanism_id"] == "set-histogram"
    assert manifests[0]["privacy"]["mechanism_rule"] == set_release.MECHANISM_RULE
    assert_same_public_manifest(*manifests)
