"""Empirical audit of SafePath (``safepath.sanitize_trajectories``), with negative controls and the manifest check.

The claim the code makes (``releases/trajectories.py``: ``plan_spend``): ε-DP per
passenger under add/remove of one whole trajectory of the week, with ``δ`` the
samplers' total-variation slack (``safepath.delta_slack``, below 10⁻¹⁴ here).
Each case writes its tiny data set D (a few passengers over 4 stations and the
168 hours of the week, ``h = 1``) and ``D′ = D + one passenger`` as
``station@hour`` files and reads them back with the library's reader against a
*public* universe (a taxonomy file ``location,group``, read by the one universe
reader), builds the public setup exactly as a release does
(``releases.trajectories.safepath_setup``: taxonomies, budget, thresholds, size
check), then runs the release's own sanitizer (``releases.trajectories.sanitize``,
with the release's time rule and release form) many times on each (whole runs).
Events are fixed in advance, on (station, hour) names, over the noisy tree (the
ε-DP object) and the released trajectories (post-processing).

Tight case: the passenger's path runs through a group of stations, a station and
an hour whose true counts in D are one below their thresholds (θ_g − 1, θ_ng − 1,
θ_ng − 1), so the joint event "the passenger's (station, hour) node is in the
tree" has probability ratio ``e^{ε_g + ε_ng + ε_time} = e^{2ε_s} = e^ε`` (h = 1).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pytest

import transit_release.mechanisms.empty_candidates as empty_candidates
import transit_release.mechanisms.safepath as sp
from transit_release.inputs.screening import Period
from transit_release.inputs.trajectories import TrajectoryInput, read_trajectory_file
from transit_release.inputs.universe import LocationUniverse, read_taxonomy_file
from transit_release.noise import NoiseSource
from transit_release.releases import trajectories as trajectory_release
from tests.privacy.audit import OneStream, per_run, run_case
from tests.privacy.test_manifest_audit import assert_same_public_manifest
from tests.privacy.test_prefix_tree_audit import check

pytestmark = pytest.mark.privacy

STATIONS = ("S1", "S2", "S3", "S4")
GROUP = {"S1": "G1", "S2": "G1", "S3": "G2", "S4": "G2"}
EPSILON = 2.0
HEIGHT = 1
SETUP = dict(time_taxonomy_height=0)  # the location taxonomy is the file's groups (height 1)


# ---- data sets, as a release reads them ---------------------------------------------------------

def write_trajectories(path: Path, trajs: list[str]) -> Path:
    path.write_text("# one passenger a line\n" + "".join(t + "\n" for t in trajs), encoding="utf-8")
    return path


def public_universe(tmp: Path) -> LocationUniverse:
    f = tmp / "taxonomy.csv"
    f.write_text("location,group\n" + "".join(f"{s},{GROUP[s]}\n" for s in STATIONS), encoding="utf-8")
    return read_taxonomy_file(f)


def universe_from_data(path: Path, tmp: Path) -> LocationUniverse:
    """BROKEN on purpose (negative control): the stations found in the file (and their groups), not the public
    list: one passenger at a station nobody else used puts it into the universe."""
    found = sorted({tok.rpartition("@")[0] for line in path.read_text(encoding="utf-8").splitlines()
                    if not line.startswith("#") for tok in line.split()})
    return LocationUniverse(tuple(found), "the data's own stations (broken)", tuple(GROUP[s] for s in found))


def read(path: Path, universe: LocationUniverse) -> TrajectoryInput:
    data = read_trajectory_file(path, universe)
    assert not data.quarantined
    return data


@pytest.fixture
def neighbours(tmp_path):
    """``neighbours(d, passenger)`` → paths of D and D′ = D + passenger."""
    def make(d: list[str], passenger: str) -> tuple[Path, Path]:
        return (write_trajectories(tmp_path / "d.txt", d), write_trajectories(tmp_path / "d2.txt", [*d, passenger]))
    return make


# ---- runs ---------------------------------------------------------------------------------------

def tree_nodes(tree: sp.NoisySafePathTree, ids: tuple[str, ...]) -> dict[tuple[str, ...], int]:
    """Every node of the noisy tree as ``("S1@8", …) → noisy count``."""
    nodes, prev = {}, [()]
    for lv in tree.levels:
        cur = [prev[p] + (f"{ids[x]}@{t}",) for p, x, t in zip(lv.parent.tolist(), lv.location.tolist(),
                                                                 lv.hour.tolist())]
        nodes.update(zip(cur, lv.count.tolist()))
        prev = cur
    return nodes


def tree_draw(data: TrajectoryInput, setup, generator):
    """``draw(n)`` → ``n`` whole runs, each ``(tree nodes, released trajectories → copies)`` on names."""
    ids = data.universe.ids

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            # the production path of a SafePath (paper budget) release, keeping the whole noisy tree
            tree, release = sp.sanitize_trajectories(
                data.trajectories, setup.budget, setup.locations, setup.hours,
                OneStream(generator).stream(trajectory_release.KIND, "audit"), rule=setup.rule,
                monotone=trajectory_release.TIME_RULE == "monotone", release=trajectory_release.RELEASE_FORM)
            out.append((tree_nodes(tree, ids),
                        {tuple(f"{ids[x]}@{t}" for x, t in traj): c for traj, c in release}))
        return out

    return draw


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "safepath", case, side)


# ---- events -------------------------------------------------------------------------------------

def node_at_least(node: str, c: int):
    return per_run(lambda out: out[0].get((node,), -10**9) >= c)


def copies_at_least(node: str, k: int):
    return per_run(lambda out: out[1].get((node,), 0) >= k)


def station_in_tree(s: str):
    return per_run(lambda out: any(p[0].startswith(f"{s}@") for p in out[0]))


def station_in_release(s: str):
    return per_run(lambda out: any(p[0].startswith(f"{s}@") for p in out[1]))


def node_events(node: str, theta: int) -> dict:
    """The passenger's (station, hour) node: in the tree, its noisy count, its released copies, its station."""
    station = node.partition("@")[0]
    ev = {f"{node} in the tree": node_at_least(node, -10**8)}
    for j in range(3):
        ev[f"{node} ≥ {theta + j}"] = node_at_least(node, theta + j)
    for k in (1, 2, 3):
        ev[f"{node} released ≥ {k}"] = copies_at_least(node, k)
    ev[f"{station} anywhere in the tree"] = station_in_tree(station)
    ev[f"{station} anywhere in the release"] = station_in_release(station)
    return ev


# ---- the cases ----------------------------------------------------------------------------------

#: D: the group G1 holds θ_g − 1 = 2 passengers, S1 θ_ng − 1 = 1 and (S1, 8) θ_ng − 1 = 1; D′ adds one at S1@8.
NEAR = dict(passenger="S1@8", d=["S1@8", "S2@9"] + ["S3@20"] * 5)
#: D′ adds a passenger at a station nobody in D uses, at an hour nobody uses.
UNIQUE = dict(passenger="S4@100", d=["S1@8"] * 4 + ["S2@9"] * 3 + ["S3@20"] * 5)


def public_setup(universe: LocationUniverse):
    return trajectory_release.safepath_setup(universe, EPSILON, HEIGHT, **SETUP)


def safepath_case(name, spec, paths, events, runs, seed, tmp, universe_of=None, control=""):
    """Run the case; ``universe_of(path)`` gives each side's universe (default: the public one, the same for both)."""
    public = public_universe(tmp)
    u_d, u_d2 = (universe_of(p) for p in paths) if universe_of else (public, public)
    d, d2 = read(paths[0], u_d), read(paths[1], u_d2)
    setup_d, setup_d2 = public_setup(u_d), public_setup(u_d2)
    assert setup_d.thresholds.location == (3, 2) and setup_d.thresholds.time == (2,), \
        "the case's data were built for other thresholds"
    delta = sp.delta_slack(setup_d.budget)  # what the trajectory release charges (releases.trajectories.plan_spend)
    notes = (f"h={HEIGHT}, θ_g={setup_d.thresholds.location[0]}, θ_ng={setup_d.thresholds.location[1]}/"
             f"{setup_d.thresholds.time[0]}, |D|={len(d.trajectories)}, |L|={len(u_d)}/{len(u_d2)}, |T|=168")
    return run_case(name, "SafePath", tree_draw(d, setup_d, noise(seed, name, "D")),
                    tree_draw(d2, setup_d2, noise(seed, name, "D′")), events, runs, EPSILON, delta, chunk=500,
                    control=control, notes=notes)


def near_threshold_case(runs, seed, neighbours, tmp, control=""):
    return safepath_case(f"SafePath: passenger through a group, a station and an hour at θ−1, ε={EPSILON:g}", NEAR,
                         neighbours(NEAR["d"], NEAR["passenger"]), node_events(NEAR["passenger"], 2), runs, seed,
                         tmp, control=control)


def unique_pair_case(runs, seed, neighbours, tmp, universe_of=None, control=""):
    return safepath_case(f"SafePath: passenger at a (station, hour) nobody uses, ε={EPSILON:g}", UNIQUE,
                         neighbours(UNIQUE["d"], UNIQUE["passenger"]), node_events(UNIQUE["passenger"], 2), runs,
                         seed, tmp, universe_of=universe_of, control=control)


@pytest.mark.slow
def test_passenger_through_nodes_at_the_threshold(neighbours, tmp_path, audit_sizes, audit_seed, audit_report):
    check(near_threshold_case(audit_sizes.tree, audit_seed, neighbours, tmp_path), audit_report, "PASS", power=0.6)


@pytest.mark.slow
def test_passenger_at_a_unique_station_and_hour_with_a_public_universe(neighbours, tmp_path, audit_sizes, audit_seed,
                                                                        audit_report):
    result = unique_pair_case(audit_sizes.tree_unique, audit_seed, neighbours, tmp_path)
    check(result, audit_report, "PASS")
    # the station can appear from D too: the public universe gives every (station, hour) a chance as an empty
    # candidate
    seen = next(b for b in result.bounds if b.event == "S4 anywhere in the tree" and b.direction == "D vs D′")
    assert seen.hits_num > 0


# ---- negative controls --------------------------------------------------------------------------

def test_control_universe_from_the_data_fails(neighbours, tmp_path, audit_sizes, audit_seed, audit_report):
    """With the universe read off the data, D's universe lacks the passenger's station: it can only ever appear
    from D′."""
    result = unique_pair_case(audit_sizes.tree_control, audit_seed, neighbours, tmp_path,
                              universe_of=lambda p: universe_from_data(p, tmp_path),
                              control="universe from the data (the stations found in the file)")
    check(result, audit_report, "FAIL")
    worst = result.worst
    assert worst.event.startswith("S4") and worst.direction == "D′ vs D" and worst.hits_den == 0


def test_control_noise_scale_halved_fails(monkeypatch, neighbours, tmp_path, audit_sizes, audit_seed, audit_report):
    """Every table the tree draws from (node noise, the empty candidates' pass probability and counts) at scale/2;
    thresholds and the claimed ε unchanged."""
    for module in (sp, empty_candidates):
        original = module.discrete_laplace_table
        monkeypatch.setattr(module, "discrete_laplace_table", lambda scale, original=original: original(scale / 2))
    result = near_threshold_case(audit_sizes.tree_control, audit_seed, neighbours, tmp_path,
                                 control="noise scale halved (tables at scale/2)")
    check(result, audit_report, "FAIL")


def test_runs_are_deterministic_with_a_seed_and_use_the_public_universe(neighbours, tmp_path):
    """Sanity of the harness: both sides read the public universe (4 stations, S4 unused in D), same seed same runs."""
    paths = neighbours(UNIQUE["d"], UNIQUE["passenger"])
    u = public_universe(tmp_path)
    d = read(paths[0], u)
    assert d.universe.ids == STATIONS and d.trajectories.n_locations == 4 and len(d.trajectories) == 12
    setup = public_setup(u)
    assert setup.budget.path_spend() == EPSILON and setup.budget.item_path_spends(setup.locations, setup.hours) == \
        {EPSILON}
    a = tree_draw(d, setup, noise(1, "x", "D"))(20)
    b = tree_draw(d, setup, noise(1, "x", "D"))(20)
    assert a == b


# ---- the manifest: a function of public inputs only ---------------------------------------------

WEEK = Period(date(2026, 1, 5), date(2026, 1, 11))


def neighbouring_trajectory_files(tmp: Path) -> tuple[Path, Path]:
    """D: 300 passengers over S1–S3; D′: D plus one passenger at a (station, hour) nobody uses (S4@100)."""
    rng = np.random.default_rng(5)
    d = []
    for _ in range(300):
        hours = np.sort(rng.integers(0, 168, rng.integers(1, 4)))
        d.append(" ".join(f"{rng.choice(STATIONS[:3])}@{h}" for h in hours))
    for sub in ("d", "d2"):
        (tmp / sub).mkdir()
    return (write_trajectories(tmp / "d" / "t.txt", d), write_trajectories(tmp / "d2" / "t.txt", [*d, "S4@100"]))


def library_manifest(path: Path, taxonomy: Path | None, locations: Path | None, fanout: int | None) -> dict:
    """The manifest a trajectory release of ``path`` publishes, built as ``flows/trajectory_release.py`` builds it:
    the universe (public files) first, the setup from it, then the data."""
    from tasks.trajectories import plan_trajectory_spend, read_trajectories, safepath_setup, trajectory_universe

    universe = trajectory_universe.fn(str(locations) if locations else None, str(taxonomy) if taxonomy else None)
    setup = safepath_setup.fn(universe, 1.0, 3, fanout, 1 if fanout else None, None, None, "paper")
    read_trajectories.fn(str(path), universe, 0.01)
    event = plan_trajectory_spend.fn("trajectories-audit", WEEK, setup, "fingerprint", "0")
    return trajectory_release.build_manifest("trajectories-audit", WEEK, universe, setup, event, "os-entropy", "0",
                                             "2026-01-12T00:00:00+00:00")


@pytest.mark.parametrize("source", ["taxonomy", "locations-fanout"])
def test_trajectory_manifest_is_the_same_for_neighbours(source, tmp_path):
    f, f2 = neighbouring_trajectory_files(tmp_path)
    taxonomy = locations = None
    if source == "taxonomy":
        public_universe(tmp_path)
        taxonomy = tmp_path / "taxonomy.csv"
    else:
        locations = tmp_path / "locations.txt"
        locations.write_text("\n".join(STATIONS) + "\n", encoding="utf-8")
    manifests = [library_manifest(p, taxonomy, locations, 2 if locations else None) for p in (f, f2)]
    assert manifests[0]["universe"]["locations"] == 4  # S4, used by D′ only, is in both
    assert_same_public_manifest(*manifests)


# ---- the joint budget rule (one test of the (station, hour) pair per level) --------------------------------

#: D: (S1, 8) holds θ − 1 = 3 passengers (θ = ⌈ln(4·168)/2⌉ = 4 at ε = 2, h = 1); D′ adds one there.
JOINT_NEAR = dict(passenger="S1@8", d=["S1@8"] * 3 + ["S2@9"] * 6 + ["S3@20"] * 5)


def joint_setup(universe: LocationUniverse):
    return trajectory_release.trajectory_setup(universe, EPSILON, HEIGHT, budget="joint")


def joint_draw(data: TrajectoryInput, setup, generator):
    """``draw(n)`` → ``n`` whole runs of the production joint-rule sanitizer, as ``tree_draw``."""
    ids = data.universe.ids

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            tree, release = sp.sanitize_joint(data.trajectories, setup.budget, generator)
            out.append((tree_nodes(tree, ids),
                        {tuple(f"{ids[x]}@{t}" for x, t in traj): c for traj, c in release}))
        return out

    return draw


def joint_case(runs, seed, neighbours, tmp, spec=JOINT_NEAR, control=""):
    public = public_universe(tmp)
    paths = neighbours(spec["d"], spec["passenger"])
    d, d2 = read(paths[0], public), read(paths[1], public)
    setup_d = setup_d2 = joint_setup(public)
    assert setup_d.budget.threshold == 4, "the case's data were built for another threshold"
    delta = sp.joint_delta_slack(setup_d.budget)  # what the release charges (plan_spend's SafePathJointEvent)
    name = "SafePath joint rule: passenger at a (station, hour) at θ−1"
    return run_case(f"{name}, ε={EPSILON:g}", "SafePath (joint)",
                    joint_draw(d, setup_d, noise(seed, name, "D")), joint_draw(d2, setup_d2, noise(seed, name, "D′")),
                    node_events(spec["passenger"], 4), runs, EPSILON, delta, chunk=500, control=control,
                    notes=f"h={HEIGHT}, θ={setup_d.budget.threshold}, |D|={len(d.trajectories)}")


@pytest.mark.slow
def test_joint_rule_passenger_at_the_threshold(neighbours, tmp_path, audit_sizes, audit_seed, audit_report):
    check(joint_case(audit_sizes.tree, audit_seed, neighbours, tmp_path), audit_report, "PASS", power=0.6)


def test_control_joint_rule_noise_scale_halved_fails(monkeypatch, neighbours, tmp_path, audit_sizes, audit_seed,
                                                     audit_report):
    for module in (sp, empty_candidates):
        original = module.discrete_laplace_table
        monkeypatch.setattr(module, "discrete_laplace_table", lambda scale, original=original: original(scale / 2))
    result = joint_case(audit_sizes.tree_control, audit_seed, neighbours, tmp_path,
                        control="noise scale halved (tables at scale/2)")
    check(result, audit_report, "FAIL")


# ---- the joint rule at h ≥ 2: a whole path at θ − 1 (#40) -------------------------------------------------------
#
# At h = 1 the joint rule's ε_ℓ = ε/h is ε itself: neither ε_ℓ = ε at every level nor noise drawn at h·ε_ℓ shows.
# At h = 2 the passenger's whole path — its (station, hour) at depth 1 and its second point at depth 2 — is held by
# θ − 1 passengers of D (θ the release's own threshold), so "the depth-2 node is in the tree" (and "both its counts
# are at least θ + j") has probability ratio exactly e^{2ε_ℓ} = e^ε: each of those regressions makes it e^{2ε}.

JOINT_H = 2
JOINT_PATH = ("S1@8", "S2@9")


def joint_path_case(runs, seed, tmp, control=""):
    public = public_universe(tmp)
    setup = trajectory_release.trajectory_setup(public, EPSILON, JOINT_H, budget="joint")
    theta = setup.budget.threshold  # the release's own: the data sit one below it whatever it is
    d_lines = [" ".join(JOINT_PATH)] * (theta - 1) + ["S3@20"] * 5
    d_path = write_trajectories(tmp / "d.txt", d_lines)
    d2_path = write_trajectories(tmp / "d2.txt", [*d_lines, " ".join(JOINT_PATH)])
    d, d2 = read(d_path, public), read(d2_path, public)
    first, path = JOINT_PATH[:1], JOINT_PATH
    events = {"the path's depth-2 node in the tree": per_run(lambda out: path in out[0]),
              "its depth-1 node in the tree": per_run(lambda out: first in out[0])}
    for j in range(3):
        events[f"both its nodes ≥ θ+{j}"] = per_run(
            lambda out, j=j: out[0].get(first, -10**9) >= theta + j and out[0].get(path, -10**9) >= theta + j)
    for k in (1, 2):
        events[f"the path released ≥ {k}"] = per_run(lambda out, k=k: out[1].get(path, 0) >= k)
    event = trajectory_release.plan_spend("audit", WEEK, setup, "f", "0")  # what the release charges
    name = f"SafePath joint rule: a whole path at θ−1, h={JOINT_H}"
    return run_case(f"{name}, ε={event.epsilon:g}", "SafePath (joint)",
                    joint_draw(d, setup, noise(seed, name, "D")), joint_draw(d2, setup, noise(seed, name, "D′")),
                    events, runs, event.epsilon, event.delta, chunk=500, control=control,
                    notes=f"h={JOINT_H}, θ={theta}, ε_ℓ={float(setup.budget.level_epsilon):g}, |D|={len(d_lines)}")


@pytest.mark.slow
def test_joint_rule_a_whole_path_at_the_threshold(tmp_path, audit_sizes, audit_seed, audit_report):
    check(joint_path_case(audit_sizes.share, audit_seed, tmp_path), audit_report, "PASS", power=0.6)


def test_control_joint_rule_path_noise_halved_fails(monkeypatch, tmp_path, audit_sizes, audit_seed, audit_report):
    for module in (sp, empty_candidates):
        original = module.discrete_laplace_table
        monkeypatch.setattr(module, "discrete_laplace_table", lambda scale, original=original: original(scale / 2))
    check(joint_path_case(audit_sizes.tree_control // 2, audit_seed, tmp_path,
                          control="noise scale halved (tables at scale/2)"), audit_report, "FAIL")
