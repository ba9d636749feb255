"""Empirical audit of DiffPart (``sanitize_sets``) with negative controls, and the set release's public manifest.

The claim the code makes (``releases/sets.py``, ``plan_spend``): ε-DP per
passenger under add/remove of one whole station set, with ``δ`` the samplers'
total-variation slack (``delta_slack``, below 10⁻¹⁴). The case writes a tiny
data set D (29 passengers over 4 stations) and ``D′ = D + one passenger`` whose
set ``{S1}`` nobody in D has — S1 is a station nobody in D uses at all — as set
files and reads them back with the library's reader against the *public*
locations file, as a release does; then it runs the release's own
``releases.sets.sanitize`` (``sanitize_sets``) many times on each (whole
runs). Events are fixed in advance, on station names, over the released sets.

Why it is tight. Fan-out 2 over S1..S4 gives the taxonomy ``{S1,S2} {S3,S4}``
under the root (Example 4.3.3's shape): the root's split tests at ε/6 against
θ = 9, the partition ``{S1,S2}`` is a last split counted at 5ε/6 against 1.
D puts 8 = θ − 1 passengers under ``{S1,S2}`` (all at S2), so the passenger's
chain passes the root's test with ratio ``e^{ε/6}`` and its leaf ``{S1}``
(empty in D: only the empty-candidate sampler can release it) with ratio
``e^{5ε/6}``: "``{S1}`` is released" has ratio ``e^ε`` exactly.
"""

from __future__ import annotations

from collections import Counter
from datetime import date
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import transit_release.inputs.sets as set_inputs
import transit_release.mechanisms.diffpart as dp
import transit_release.mechanisms.empty_candidates as empty_candidates
from tests.privacy.audit import OneStream, per_run, run_case
from tests.privacy.test_manifest_audit import CREATED, assert_same_public_manifest
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import LocationUniverse, from_stop_locations, read_locations_file
from transit_release.noise import NoiseSource
from transit_release.releases import sets as set_release
from transit_release.version import code_version

pytestmark = pytest.mark.privacy

STATIONS = ("S1", "S2", "S3", "S4")
EPSILON, FANOUT = 2.0, 2
D = [("S2",)] * 8 + [("S3", "S4")] * 10 + [("S4",)] * 6 + [("S2", "S3")] * 5
PASSENGER = ("S1",)  # a rare set at a station nobody in D uses
PERIOD = Period(date(2026, 1, 1), date(2026, 1, 31))


# ---- data sets, as a release reads them ---------------------------------------------------------

def write_sets(path: Path, sets: list[tuple[str, ...]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sets), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    """(locations file, D, D′) on disk."""
    locations = tmp_path / "locations.txt"
    locations.write_text("# the public station list\n" + "\n".join(STATIONS) + "\n", encoding="utf-8")
    return locations, write_sets(tmp_path / "d.txt", D), write_sets(tmp_path / "d2.txt", [*D, PASSENGER])


def read_public(path: Path, locations: Path) -> set_inputs.SetInput:
    """As the release reads: the public locations file's universe, whatever the set file holds (through the module
    attribute, so that a control can break it)."""
    return set_inputs.read_set_file(path, read_locations_file(locations))


def universe_from_the_data(path, universe):
    """BROKEN on purpose (negative control): the universe is the file's own tokens, not the public list."""
    tokens = {t for line in Path(path).read_text(encoding="utf-8").splitlines() for t in line.split()}
    return ORIGINAL_READ(path, LocationUniverse(tuple(sorted(tokens)), "the data's own tokens (broken)"))


ORIGINAL_READ = set_inputs.read_set_file


# ---- runs ---------------------------------------------------------------------------------------

def set_draw(data: set_inputs.SetInput, generator):
    """``draw(n)`` → ``n`` whole runs, each ``released set (station names) → copies``; the budget as a release
    plans it."""
    budget = set_release.set_budget(data.universe, EPSILON, FANOUT)
    ids = data.universe.ids

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            released = set_release.sanitize(data.sets, budget, OneStream(generator), "audit")
            out.append({tuple(ids[i] for i in s): c for s, c in released})
        return out

    return draw


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "diffpart", case, side)


def claimed_delta(data: set_inputs.SetInput) -> float:
    return dp.delta_slack(set_release.set_budget(data.universe, EPSILON, FANOUT))  # what plan_spend charges


# ---- events -------------------------------------------------------------------------------------

def copies_at_least(s, k):
    return per_run(lambda out: out.get(s, 0) >= k)


def lines_with(station, k):
    return per_run(lambda out: sum(c for s, c in out.items() if station in s) >= k)


def both(a, b):
    return per_run(lambda out: out.get(a, 0) >= 1 and out.get(b, 0) >= 1)


def total_at_least(k):
    return per_run(lambda out: sum(out.values()) >= k)


EVENTS = {
    "{S1} released": copies_at_least(("S1",), 1),
    "{S1} released ≥ 2": copies_at_least(("S1",), 2),
    "{S1} released ≥ 3": copies_at_least(("S1",), 3),
    "S1 in a released set": lines_with("S1", 1),
    "lines with S1 ≥ 2": lines_with("S1", 2),
    "{S1,S2} released": copies_at_least(("S1", "S2"), 1),
    "{S2} released": copies_at_least(("S2",), 1),
    "{S2} released ≥ 9": copies_at_least(("S2",), 9),
    "{S1} and {S2} released": both(("S1",), ("S2",)),
    "lines ≥ 30": total_at_least(30),
}


def rare_set_case(files, runs, seed, control=""):
    locations, f, f2 = files
    d, d2 = read_public(f, locations), read_public(f2, locations)
    name = f"DiffPart: passenger with a set nobody has at a station nobody uses, ε={EPSILON:g}"
    budget = set_release.set_budget(d.universe, EPSILON, FANOUT)
    notes = (f"f={FANOUT}, |I|={len(d.universe)}/{len(d2.universe)}, C1={float(budget.c_leaf):g}, "
             f"C2={float(budget.c_split):g}, |D|={len(d.sets)}")
    return run_case(name, "DiffPart", set_draw(d, noise(seed, name, "D")), set_draw(d2, noise(seed, name, "D′")),
                    EVENTS, runs, EPSILON, claimed_delta(d), chunk=500, control=control, notes=notes)


def check(result, report, expect: str, power: float | None = None):
    report.add(result)
    assert result.verdict == expect, result.describe()
    if power is not None:
        assert result.worst.eps_lb >= power * result.epsilon, result.describe()


def test_the_case_is_built_where_the_claim_is_tight(files):
    """The thresholds and budgets the docstring's argument uses are the ones the release computes."""
    locations, f, f2 = files
    d, d2 = read_public(f, locations), read_public(f2, locations)
    assert d.universe.ids == d2.universe.ids == STATIONS  # public: D does not decide the universe
    b = set_release.set_budget(d.universe, EPSILON, FANOUT)
    root = b.split_epsilon(b.root_unspent, b.taxonomy.n_internal)
    leaf = b.leaf_epsilon(b.child_unspent(b.root_unspent, b.taxonomy.n_internal))
    eps = Fraction(EPSILON)
    assert (root, leaf, root + leaf) == (eps / 6, 5 * eps / 6, eps)
    assert b.split_threshold(root, 2) == 9 and b.leaf_threshold(leaf) == 1
    assert sum(1 for s in D if set(s) <= {"S1", "S2"}) == 8  # θ − 1 under {S1,S2}
    assert not any("S1" in s for s in D)


@pytest.mark.slow
def test_a_passenger_with_a_rare_set_at_an_unused_station(files, audit_sizes, audit_seed, audit_report):
    result = rare_set_case(files, audit_sizes.tree_unique, audit_seed)
    check(result, audit_report, "PASS", power=0.6)
    # the set can come from D too: the public universe gives it a chance as an empty candidate
    seen = next(b for b in result.bounds if b.event == "{S1} released" and b.direction == "D vs D′")
    assert seen.hits_num > 0


# ---- negative controls --------------------------------------------------------------------------

def test_control_universe_from_the_data_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    """With the universe read off the file, D's universe lacks S1: ``{S1}`` can only ever come from D′."""
    monkeypatch.setattr(set_inputs, "read_set_file", universe_from_the_data)
    result = rare_set_case(files, audit_sizes.tree_control // 2, audit_seed, control="universe from the data")
    check(result, audit_report, "FAIL")
    assert result.worst.direction == "D′ vs D" and result.worst.hits_den == 0 and "S1" in result.worst.event


def test_control_empty_candidates_never_tested_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    """Testing only the candidates that hold records (no phantom partitions): a set nobody else has can never be
    released from D, so its release names the passenger."""
    original = dp.sample_passing_empties
    monkeypatch.setattr(dp, "sample_passing_empties",
                        lambda gen, n_empty, scale, t: original(gen, np.zeros_like(n_empty), scale, t))
    result = rare_set_case(files, audit_sizes.tree_control // 2, audit_seed,
                           control="empty candidates never tested (no phantoms)")
    check(result, audit_report, "FAIL")
    assert result.worst.hits_den == 0


def test_control_noise_scale_halved_fails(files, monkeypatch, audit_sizes, audit_seed, audit_report):
    """Every table DiffPart draws from (sizes, empty candidates) at scale/2; thresholds unchanged."""
    for module in (dp, empty_candidates):
        original = module.discrete_laplace_table
        monkeypatch.setattr(module, "discrete_laplace_table", lambda scale, original=original: original(scale / 2))
    result = rare_set_case(files, audit_sizes.tree_control // 2, audit_seed, control="noise scale halved")
    check(result, audit_report, "FAIL")


def test_runs_are_deterministic_with_a_seed(files):
    locations, f, _ = files
    d = read_public(f, locations)
    assert Counter(map(len, d.sets.to_lists())) == Counter(map(len, D))
    assert set_draw(d, noise(1, "x", "D"))(20) == set_draw(d, noise(1, "x", "D"))(20)


# ---- the public manifest is the same for neighbours ----------------------------------------------

def manifest_from_file(path: Path, locations: Path, fanout: int | None = 2) -> dict:
    """The manifest a set release of ``path`` publishes, built as ``flows/sets_release.py`` builds it: the universe
    (the public locations file) first, the budget from it, then the data, the spend, the manifest."""
    from tasks.sets import plan_set_spend, read_sets, set_budget

    universe = read_locations_file(locations)
    budget = set_budget.fn(universe, 1.0, fanout)
    read_sets.fn(str(path), universe, 0.05)
    event = plan_set_spend.fn("sets-audit", PERIOD, budget, "fingerprint", code_version())
    return set_release.build_manifest("sets-audit", PERIOD, universe, set_release.describe_input(False), budget,
                                      event, "os-entropy", code_version(), CREATED, set_release.fanout_rule(fanout))


def manifest_from_taps(trips: pd.DataFrame, stops: pd.DataFrame) -> dict:
    """The same for tap data: the stop table's locations are the universe, built before the trips are read."""
    from tasks.sets import plan_set_spend, set_budget, sets_from_taps

    universe = from_stop_locations(stops, None, "stops file stops.csv")
    budget = set_budget.fn(universe, 1.0, 10)
    sets_from_taps.fn(trips, stops, PERIOD, universe, None)
    event = plan_set_spend.fn("sets-audit", PERIOD, budget, "fingerprint", code_version())
    return set_release.build_manifest("sets-audit", PERIOD, universe, set_release.describe_input(True), budget,
                                      event, "os-entropy", code_version(), CREATED)


def test_set_manifest_is_the_same_for_neighbours_from_a_set_file(files):
    locations, f, f2 = files
    assert_same_public_manifest(*(manifest_from_file(p, locations) for p in (f, f2)))


def test_set_manifest_is_the_same_for_neighbours_from_taps():
    """D′ adds one card that tapped at the only stop of a mode nobody else rode."""
    stops = pd.DataFrame({"stop_id": [1, 2, 3, 10, 20], "mode": ["train", "train", "train", "bus", "ferry"],
                          "name": ["Central", "Redfern", "Town Hall", "Stop a", "Manly Wharf"],
                          "postcode": pd.array([None, None, None, 2000, None], dtype="Int64")})
    rng = np.random.default_rng(5)
    n = 300
    trips = pd.DataFrame({"card_id": rng.integers(0, 120, n), "mode": "train",
                          "tap_on_time": pd.Timestamp("2026-01-05 08:00") + pd.to_timedelta(rng.integers(0, 20, n),
                                                                                             unit="D"),
                          "tap_on_stop": rng.integers(1, 4, n),
                          "tap_off_stop": pd.array(rng.integers(1, 4, n), dtype="Int64")})
    ferry = pd.DataFrame({"card_id": [999], "mode": ["ferry"], "tap_on_time": [pd.Timestamp("2026-01-10 09:00")],
                          "tap_on_stop": [20], "tap_off_stop": pd.array([pd.NA], dtype="Int64")})
    assert_same_public_manifest(manifest_from_taps(trips, stops),
                                manifest_from_taps(pd.concat([trips, ferry], ignore_index=True), stops))


def test_set_manifest_with_the_fanout_rule_is_the_same_for_neighbours(files):
    """Without --fanout the fan-out follows the public universe's size (4 stations: f = 4), never the data: D′'s
    passenger at a station nobody in D uses changes neither the fan-out nor anything else public."""
    locations, f, f2 = files
    manifests = [manifest_from_file(p, locations, fanout=None) for p in (f, f2)]
    assert manifests[0]["privacy"]["fanout"] == 4
    assert manifests[0]["privacy"]["fanout_rule"] == set_release.FANOUT_RULE
    assert_same_public_manifest(*manifests)


# ---- each share on its own: the splits' and the leaves' (#40) -------------------------------------------------------
#
# The rare-set case composes the root's split test (ε/6) with a leaf that D leaves empty (its count drawn by the
# empty-candidate sampler): split counts, or leaf counts, drawn with half their noise stay below what its runs can
# refute. Over the same taxonomy ({S1,S2} {S3,S4}: three internal nodes, so the root's test spends ε/(2·3) = ε/6 and
# a last split's leaves ε − ε/6 = 5ε/6, module docstring), each case below watches one share:
#
# * the split: D holds θ_root − 1 passengers under {S1,S2}, all with the set {S2}, whose leaf count passes at once;
#   the passenger is one more {S2}: "{S2} is released" is the root's split test passing for {S1,S2}, ratio e^{ε/6};
# * the leaf: a busy {S1,S2} (always created), {S1} held by θ_leaf − 1 passengers of D (a real count, not an
#   empty candidate): "{S1} released with at least θ_leaf + j copies" has ratio e^{5ε/6}.
#
# Data sit one below the release's own thresholds whatever they are; the claims are the docstring's shares.

SHARES = {"split": dict(epsilon=6.0, share=Fraction(1, 6)), "leaf": dict(epsilon=1.5, share=Fraction(5, 6))}


def share_case(which: str, runs, seed, tmp, control=""):
    spec = SHARES[which]
    eps = spec["epsilon"]
    locations = tmp / "locations.txt"
    locations.write_text("\n".join(STATIONS) + "\n", encoding="utf-8")
    universe = read_locations_file(locations)
    b = set_release.set_budget(universe, eps, FANOUT)
    root = b.split_epsilon(b.root_unspent, b.taxonomy.n_internal)
    leaf = b.leaf_epsilon(b.child_unspent(b.root_unspent, b.taxonomy.n_internal))
    assert (root, leaf) == (Fraction(eps) / 6, 5 * Fraction(eps) / 6), "the docstring's shares"
    theta_root, theta_leaf = b.split_threshold(root, 2), b.leaf_threshold(leaf)
    others = [("S3", "S4")] * (3 * theta_root)  # {S3,S4} busy too: the root's candidates are not all empty
    if which == "split":
        d, passenger = [("S2",)] * (theta_root - 1) + others, ("S2",)
        # (its copies are the leaf's count, which moves with the passenger too: not an event of the split alone)
        events = {"{S2} released": copies_at_least(("S2",), 1), "{S1,S2} or {S2} released": per_run(
            lambda out: out.get(("S2",), 0) >= 1 or out.get(("S1", "S2"), 0) >= 1)}
    else:
        d = [("S1",)] * (theta_leaf - 1) + [("S2",)] * (3 * theta_root) + others
        passenger = ("S1",)
        events = {f"{{S1}} released ≥ {theta_leaf + j}": copies_at_least(("S1",), theta_leaf + j) for j in range(3)}
    f, f2 = write_sets(tmp / "d.txt", d), write_sets(tmp / "d2.txt", [*d, passenger])
    data, data2 = read_public(f, locations), read_public(f2, locations)
    claimed = float(spec["share"] * Fraction(eps))
    name = f"DiffPart: the {which} share alone (θ−1 at the {which} test)"

    def draw(dataset, side):
        generator = noise(seed, name, side)
        ids = dataset.universe.ids

        def run(n: int) -> list:
            return [{tuple(ids[i] for i in s): c for s, c in set_release.sanitize(dataset.sets, b, OneStream(generator),
                                                                                 "audit")} for _ in range(n)]
        return run

    return run_case(f"{name}, ε={eps:g} (share {claimed:.3g})", "DiffPart", draw(data, "D"), draw(data2, "D′"),
                    events, runs, claimed, dp.delta_slack(b), chunk=500, control=control,
                    notes=f"θ_root={theta_root}, θ_leaf={theta_leaf}, |D|={len(d)}")


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(SHARES))
def test_each_share_of_the_partitioning_alone(which, tmp_path, audit_sizes, audit_seed, audit_report):
    check(share_case(which, audit_sizes.share, audit_seed, tmp_path), audit_report, "PASS", power=0.6)
