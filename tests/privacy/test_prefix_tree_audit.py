"""Empirical audit of the noisy prefix tree (``sanitize_sequences``, both variants), with negative controls.

The claim the code makes (module docstring, ``plan_spend``): ε-DP per
passenger under add/remove of one whole sequence, with ``δ`` the sampler's
total-variation slack (``2h (1 + e^{ε'}) η``, below 10⁻¹⁴). Each case writes
its tiny data set D (a few dozen sequences over 5–6 stations, ``h = 2``) and
``D′ = D + one passenger`` as sequence files and reads them back with the
library's reader and an explicit *public* vocabulary (and, for the hybrid
variant, the library's taxonomy loader), as a release would; then it runs the
project's own ``sanitize_sequences`` many times on each (whole runs: the tree
is not independent across nodes). Events are fixed in advance, on station
names, over the noisy tree (the mechanism's ε-DP object) and the released
sequences (post-processing).

Tight cases: the passenger's path runs through nodes whose true count in D is
one below the threshold, so ``Pr[node ≥ θ]`` has ratio ``e^{ε_node}`` at each
(sub-)level and the joint event over the whole path has ratio ``e^ε``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import transit_release.mechanisms.empty_candidates as empty_candidates
import transit_release.mechanisms.prefix_tree as pt
from transit_release.inputs.sequences import SequenceInput, read_sequence_file
from transit_release.inputs.universe import LocationUniverse, read_taxonomy_file
from transit_release.noise import NoiseSource
from tests.privacy.audit import check, cp_lower, cp_upper, per_run, run_case

pytestmark = pytest.mark.privacy

STATIONS = ("S1", "S2", "S3", "S4", "S5", "S6")
LINES = {"S1": "A", "S2": "A", "S3": "A", "S4": "B", "S5": "B", "S6": "B"}  # fan-out 3


# ---- data sets, as a release reads them ---------------------------------------------------------

def write_sequences(path: Path, seqs: list[tuple[str, ...]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in seqs), encoding="utf-8")
    return path


def read_public(path: Path, vocabulary: tuple[str, ...]) -> SequenceInput:
    """The real check: the universe is the public station list, whatever the file holds."""
    return read_sequence_file(path, LocationUniverse(tuple(sorted(vocabulary)), "public station list"))


def read_universe_from_data(path: Path, public_vocabulary: tuple[str, ...]) -> SequenceInput:
    """BROKEN on purpose (negative control): ignores the public vocabulary and takes the file's own tokens as the
    universe, as the sequence release did before the public-universe rule (the reader now refuses to guess)."""
    tokens = {t for line in path.read_text(encoding="utf-8").splitlines() for t in line.split()}
    return read_sequence_file(path, LocationUniverse(tuple(sorted(tokens)), "the data's own tokens (broken)"))


def public_taxonomy(tmp: Path, vocabulary: tuple[str, ...]) -> pt.Taxonomy:
    f = tmp / "taxonomy.csv"
    f.write_text("location,group\n" + "".join(f"{s},{LINES[s]}\n" for s in vocabulary), encoding="utf-8")
    universe = read_taxonomy_file(f)
    assert universe.ids == tuple(vocabulary)  # the taxonomy lists the universe in its (sorted) order
    return pt.Taxonomy.from_groups(list(universe.groups))


@pytest.fixture
def neighbours(tmp_path):
    """``neighbours(d, passenger)`` → paths of D and D′ = D + passenger."""
    def make(d: list[tuple[str, ...]], passenger: tuple[str, ...]) -> tuple[Path, Path]:
        return (write_sequences(tmp_path / "d.txt", d), write_sequences(tmp_path / "d2.txt", [*d, passenger]))
    return make


# ---- runs ---------------------------------------------------------------------------------------

def tree_nodes(tree: pt.NoisyPrefixTree, vocab: tuple[str, ...]) -> dict[tuple[str, ...], int]:
    """Every node of the noisy tree as ``prefix (station names) → noisy count``."""
    nodes, prev = {}, [()]
    for lv in tree.levels:
        cur = [prev[p] + (vocab[x],) for p, x in zip(lv.parent.tolist(), lv.location.tolist())]
        nodes.update(zip(cur, lv.count.tolist()))
        prev = cur
    return nodes


def tree_draw(data: SequenceInput, epsilon: float, height: int, variant: str, taxonomy, generator):
    """``draw(n)`` → ``n`` whole runs, each ``(tree nodes, released prefixes → copies)`` on station names."""
    vocab = data.vocabulary

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            tree, release = pt.sanitize_sequences(data.sequences, epsilon, height, variant, taxonomy, generator)
            out.append((tree_nodes(tree, vocab), {tuple(vocab[i] for i in p): c for p, c in release}))
        return out

    return draw


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "prefix-tree", case, side)


def claimed_delta(epsilon: float, height: int, variant: str, taxonomy) -> float:
    budget = pt.TreeBudget.of(epsilon, height, variant, taxonomy)
    return pt.delta_slack(budget)  # what the sequence release charges (releases.sequences.plan_spend)


# ---- events -------------------------------------------------------------------------------------

def node_at_least(prefix, c):
    return per_run(lambda out: out[0].get(prefix, -10**9) >= c)


def path_at_least(prefixes, cs):
    return per_run(lambda out: all(out[0].get(p, -10**9) >= c for p, c in zip(prefixes, cs)))


def copies_at_least(prefix, k):
    return per_run(lambda out: out[1].get(prefix, 0) >= k)


def station_in_tree(s):
    return per_run(lambda out: any(s in p for p in out[0]))


def station_in_release(s):
    return per_run(lambda out: any(s in p for p in out[1]))


def lines_through(s, k):
    """At least ``k`` released lines contain station ``s``."""
    return per_run(lambda out: sum(c for p, c in out[1].items() if s in p) >= k)


def path_events(path: tuple[str, ...], theta: int) -> dict:
    """Events on the passenger's two-station path ``(x, y)``: its nodes' counts, jointly, and its release."""
    x, xy = path[:1], path[:2]
    ev = {}
    for j in range(3):
        ev[f"{x} ≥ {theta + j}"] = node_at_least(x, theta + j)
        ev[f"{xy} ≥ {theta + j}"] = node_at_least(xy, theta + j)
    for i in range(2):
        for j in range(2):
            ev[f"{x} ≥ {theta + i} & {xy} ≥ {theta + j}"] = path_at_least((x, xy), (theta + i, theta + j))
    for k in (1, 2, 4):
        ev[f"{xy} released ≥ {k}"] = copies_at_least(xy, k)
        ev[f"{x} released ≥ {k}"] = copies_at_least(x, k)
        ev[f"lines through {x[0]} ≥ {k}"] = lines_through(x[0], k)
    return ev


def unique_station_events(passenger: tuple[str, ...], theta: int) -> dict:
    """Events on the passenger's station that nobody else uses."""
    s, (first, second) = passenger[0], (passenger[:1], passenger[:2])
    return {f"{s} anywhere in the tree": station_in_tree(s),
            f"{s} anywhere in the release": station_in_release(s),
            f"{first} in the tree": node_at_least(first, -10**8),
            f"{first} ≥ {theta + 1}": node_at_least(first, theta + 1),
            f"{second} in the tree": node_at_least(second, -10**8),
            f"{first} & {second} in the tree": path_at_least((first, second), (-10**8, -10**8)),
            f"{first} released": copies_at_least(first, 1),
            f"lines through {s} ≥ 2": lines_through(s, 2)}


# ---- the cases ----------------------------------------------------------------------------------

NEAR = {  # D: the passenger's path (S1, S2) has true counts θ − 1 at both levels
    "simple": dict(epsilon=2.0, height=2, theta=3, passenger=("S1", "S2"),
                   d=[("S1", "S2")] * 2 + [("S2",)] * 5 + [("S3", "S4")] * 4 + [("S4", "S1", "S2")] * 3),
    "hybrid": dict(epsilon=2.0, height=2, theta=9, passenger=("S1", "S2"),
                   d=[("S1", "S2")] * 8 + [("S4", "S5")] * 10 + [("S5",)] * 6),
}
UNIQUE = {  # D′ adds a passenger starting at a station nobody in D uses
    "simple": dict(epsilon=1.0, height=2, theta=6, passenger=("S5", "S1"), vocabulary=STATIONS[:5],
                   d=[("S1", "S2")] * 8 + [("S2", "S3")] * 6 + [("S3",)] * 5 + [("S4", "S1")] * 7),
    "hybrid": dict(epsilon=2.0, height=2, theta=9, passenger=("S6", "S3"), vocabulary=STATIONS,
                   d=[("S1", "S2")] * 10 + [("S4", "S1")] * 9 + [("S2",)] * 6 + [("S5", "S4")] * 9),
}


def tree_case(name, variant, spec, paths, vocabulary, events, runs, seed, tmp, reader=read_public, control=""):
    eps, h = spec["epsilon"], spec["height"]
    d, d2 = reader(paths[0], vocabulary), reader(paths[1], vocabulary)
    tax_d = public_taxonomy(tmp, d.vocabulary) if variant == "hybrid" else None
    tax_d2 = public_taxonomy(tmp, d2.vocabulary) if variant == "hybrid" else None
    budget = pt.TreeBudget.of(eps, h, variant, tax_d)
    theta = budget.station_threshold
    assert theta == spec["theta"], "the case's data were built for another threshold"
    notes = (f"{variant}, h={h}, θ_ng={theta}" + (f", θ_g={budget.generalized_threshold}, fan-out "
                                                   f"{budget.fanout}" if variant == "hybrid" else "")
             + f", |D|={len(d.sequences)}, |L|={d.sequences.n_locations}/{d2.sequences.n_locations}")
    return run_case(name, f"prefix tree ({variant})",
                    tree_draw(d, eps, h, variant, tax_d, noise(seed, name, "D")),
                    tree_draw(d2, eps, h, variant, tax_d2, noise(seed, name, "D′")),
                    events, runs, eps, claimed_delta(eps, h, variant, tax_d), chunk=500, control=control,
                    notes=notes)


def near_threshold_case(variant, runs, seed, neighbours, tmp, control=""):
    spec = NEAR[variant]
    return tree_case(f"prefix tree {variant}: passenger through nodes at θ−1, ε={spec['epsilon']:g}", variant,
                     spec, neighbours(spec["d"], spec["passenger"]), STATIONS,
                     path_events(spec["passenger"], spec["theta"]), runs, seed, tmp, control=control)


def unique_station_case(variant, runs, seed, neighbours, tmp, reader=read_public, control=""):
    spec = UNIQUE[variant]
    return tree_case(f"prefix tree {variant}: passenger at a station nobody uses, ε={spec['epsilon']:g}",
                     variant, spec, neighbours(spec["d"], spec["passenger"]), spec["vocabulary"],
                     unique_station_events(spec["passenger"], spec["theta"]), runs, seed, tmp, reader=reader,
                     control=control)


@pytest.mark.slow
@pytest.mark.parametrize("variant", pt.VARIANTS)
def test_passenger_through_nodes_at_the_threshold(variant, neighbours, tmp_path, audit_sizes, audit_seed,
                                                  audit_report):
    check(near_threshold_case(variant, audit_sizes.tree, audit_seed, neighbours, tmp_path), audit_report, "PASS",
          power=0.7)


@pytest.mark.slow
@pytest.mark.parametrize("variant", pt.VARIANTS)
def test_passenger_at_a_station_nobody_uses_with_a_public_universe(variant, neighbours, tmp_path, audit_sizes,
                                                                   audit_seed, audit_report):
    result = unique_station_case(variant, audit_sizes.tree_unique, audit_seed, neighbours, tmp_path)
    check(result, audit_report, "PASS")
    # the station can appear from D too: the public universe gives it a chance as an empty candidate
    seen = next(b for b in result.bounds if b.event.endswith("anywhere in the tree") and b.direction == "D vs D′")
    assert seen.hits_num > 0
    if variant == "simple":
        # the empty-candidate sampler is exact: (S5) passes as often as one explicit test of count 0 (D) and
        # of count 1 (D′) would, P̂(Z ≥ θ) and P̂(Z ≥ θ − 1) of the table (two-sided Clopper–Pearson, α = 10⁻³)
        spec = UNIQUE["simple"]
        node = next(b for b in result.bounds if b.event == f"{spec['passenger'][:1]} in the tree"
                    and b.direction == "D vs D′")
        scale = 1 / pt.TreeBudget.of(spec["epsilon"], spec["height"], "simple").station_epsilon
        for hits, runs, count in ((node.hits_num, node.runs_num, 0), (node.hits_den, node.runs_den, 1)):
            p = empty_candidates.pass_probability(scale, spec["theta"] - count)
            assert cp_lower(hits, runs, 5e-4) <= p <= cp_upper(hits, runs, 5e-4), (count, hits, runs, p)


# ---- negative controls --------------------------------------------------------------------------

def test_control_universe_from_the_data_fails(neighbours, tmp_path, audit_sizes, audit_seed, audit_report):
    """The reported bug: with the universe taken from the data (as the reader did without a vocabulary), D's
    universe lacks the passenger's station, so it can only ever appear from D′."""
    result = unique_station_case("simple", audit_sizes.tree_control, audit_seed, neighbours, tmp_path,
                                 reader=read_universe_from_data, control="universe from the data (reader "
                                 "without vocabulary)")
    check(result, audit_report, "FAIL")
    worst = result.worst
    assert worst.event.startswith("S5") and worst.direction == "D′ vs D" and worst.hits_den == 0


@pytest.mark.parametrize("variant", pt.VARIANTS)
def test_control_noise_scale_halved_fails(variant, monkeypatch, neighbours, tmp_path, audit_sizes, audit_seed,
                                          audit_report):
    """Every table the tree draws from (node noise, empty candidates' pass probability and counts, which the exact
    sampler draws from the same table) at scale/2; thresholds unchanged."""
    for module, name in ((pt, "discrete_laplace_table"), (empty_candidates, "discrete_laplace_table")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda scale, original=original: original(scale / 2))
    result = near_threshold_case(variant, audit_sizes.tree_control, audit_seed, neighbours, tmp_path,
                                 control="noise scale halved (tables at scale/2)")
    check(result, audit_report, "FAIL")


def test_runs_are_deterministic_with_a_seed_and_use_the_public_universe(neighbours, tmp_path):
    """Sanity of the harness: D′'s universe is the public one, and the same seed gives the same runs."""
    spec = UNIQUE["simple"]
    paths = neighbours(spec["d"], spec["passenger"])
    d = read_public(paths[0], spec["vocabulary"])
    assert d.vocabulary == spec["vocabulary"] and d.sequences.n_locations == 5
    assert Counter(map(len, d.sequences.to_lists())) == Counter(map(len, spec["d"]))
    a = tree_draw(d, 1.0, 2, "simple", None, noise(1, "x", "D"))(20)
    b = tree_draw(d, 1.0, 2, "simple", None, noise(1, "x", "D"))(20)
    assert a == b


@pytest.mark.parametrize("variant", pt.VARIANTS)
@pytest.mark.parametrize("which", ["near", "unique"])
def test_the_sequence_release_draws_what_the_cases_draw(which, variant, neighbours, tmp_path):
    """The cases call ``prefix_tree.sanitize_sequences`` itself, for the noisy tree the events watch; a sequence
    release calls it through ``releases.sequences`` (``budget_for`` from the public universe, ``plan_spend``,
    ``sanitize``). Both charge the same δ and, from the same generator state, release the same sequences."""
    from datetime import date

    from transit_release.inputs.screening import Period
    from transit_release.releases import sequences as sequence_release
    from tests.privacy.audit import OneStream

    spec = (NEAR if which == "near" else UNIQUE)[variant]
    vocabulary = STATIONS if which == "near" else spec["vocabulary"]
    eps, h = spec["epsilon"], spec["height"]
    _, path = neighbours(spec["d"], spec["passenger"])
    data = read_public(path, vocabulary)
    taxonomy = public_taxonomy(tmp_path, data.vocabulary) if variant == "hybrid" else None
    universe = read_taxonomy_file(tmp_path / "taxonomy.csv") if variant == "hybrid" else data.universe
    budget, release_taxonomy = sequence_release.budget_for("prefix-tree", universe, eps, h, variant)
    event = sequence_release.plan_spend("audit", Period(date(2026, 1, 1), date(2026, 1, 31)), budget, "fp", "0")
    assert event.delta == claimed_delta(eps, h, variant, taxonomy)
    ours = tree_draw(data, eps, h, variant, taxonomy, noise(1, "tie", which))(10)
    generator = noise(1, "tie", which)
    for _, released in ours:
        got = sequence_release.sanitize(data.sequences, budget, release_taxonomy, OneStream(generator), "audit")
        assert {tuple(vocabulary[i] for i in p): c for p, c in got.sequences} == released


# ---- the hybrid tree's station sub-level against its own share, level by level (#40) ------------------------------
#
# The near-threshold hybrid case composes, along the passenger's path, a group and a station count at each level
# (ratio e^ε): station counts drawn with half their noise (at one level or all) leave it below what CI's runs can
# refute. Here the group is busy (always kept, in D and D′) and only the passenger's station node sits at the
# release's own θ_ng − 1, at level 1 or (under a busy first station) at level 2: "that node ≥ θ_ng + j" has ratio
# exactly e^{ε_ng}, the station sub-level's documented share (f − 2)/f · ε/h, taken from the charged event's ε, h
# and fan-out.

SHARE_EPSILON, SHARE_HEIGHT = 6.0, 2


def station_share_claim(event) -> float:
    f = int(event.fanout)
    return (f - 2) / f * event.epsilon / event.height


def station_share_case(level: int, runs, seed, tmp, neighbours, control=""):
    from datetime import date

    from transit_release.inputs.screening import Period
    from transit_release.releases import sequences as sequence_release

    vocabulary = STATIONS
    tax_file_data = read_public(write_sequences(tmp / "v.txt", [(s,) for s in vocabulary]), vocabulary)
    taxonomy = public_taxonomy(tmp, tax_file_data.vocabulary)
    universe = read_taxonomy_file(tmp / "taxonomy.csv")
    budget, _ = sequence_release.budget_for("prefix-tree", universe, SHARE_EPSILON, SHARE_HEIGHT, "hybrid")
    event = sequence_release.plan_spend("audit", Period(date(2026, 1, 1), date(2026, 1, 31)), budget, "fp", "0")
    theta = budget.station_threshold  # the release's own: the node sits one below it whatever it is
    busy = 3 * max(theta, budget.generalized_threshold)
    if level == 1:  # S2 at θ − 1 among a busy group {S1, S2, S3}
        passenger, node = ("S2",), ("S2",)
        d = [("S2",)] * (theta - 1) + [("S1",)] * busy + [("S4", "S5")] * busy
    else:  # S1 busy at level 1; (S1, S2) at θ − 1 under a busy group (S1, {S1, S2, S3})
        passenger, node = ("S1", "S2"), ("S1", "S2")
        d = [("S1", "S2")] * (theta - 1) + [("S1", "S3")] * busy + [("S1",)] * busy + [("S4", "S5")] * busy
    paths = neighbours(d, passenger)
    d_in, d2_in = read_public(paths[0], vocabulary), read_public(paths[1], vocabulary)
    claimed = station_share_claim(event)
    events = {f"{node} ≥ θ+{j}": node_at_least(node, theta + j) for j in range(3)}
    events[f"{node} in the tree"] = node_at_least(node, -10**8)
    name = f"prefix tree hybrid: a station node at θ−1 at level {level} under a busy group, against the station share"
    return run_case(f"{name}, ε={SHARE_EPSILON:g} (share {claimed:.3g})", "prefix tree (hybrid)",
                    tree_draw(d_in, SHARE_EPSILON, SHARE_HEIGHT, "hybrid", taxonomy, noise(seed, name, "D")),
                    tree_draw(d2_in, SHARE_EPSILON, SHARE_HEIGHT, "hybrid", taxonomy, noise(seed, name, "D′")),
                    events, runs, claimed, event.delta, chunk=500, control=control,
                    notes=f"h={SHARE_HEIGHT}, θ_ng={theta}, θ_g={budget.generalized_threshold}, busy={busy}")


@pytest.mark.slow
@pytest.mark.parametrize("level", [1, 2])
def test_a_station_node_at_the_threshold_against_the_station_share(level, neighbours, tmp_path, audit_sizes,
                                                                    audit_seed, audit_report):
    check(station_share_case(level, audit_sizes.share, audit_seed, tmp_path, neighbours), audit_report, "PASS",
          power=0.6)


def test_control_station_counts_at_half_noise_fail(monkeypatch, neighbours, tmp_path, audit_sizes, audit_seed,
                                                   audit_report):
    """The hybrid tree's station tables at scale/2 (the group tables and the empty candidates untouched)."""
    original = pt.discrete_laplace_table
    budget = pt.TreeBudget.of(SHARE_EPSILON, SHARE_HEIGHT, "hybrid", public_taxonomy(tmp_path, STATIONS))
    station_scale = 1 / budget.station_epsilon
    monkeypatch.setattr(pt, "discrete_laplace_table",
                        lambda scale: original(scale / 2 if scale == station_scale else scale))
    check(station_share_case(1, audit_sizes.share // 2, audit_seed, tmp_path, neighbours,
                             control="station counts' noise at scale/2"), audit_report, "FAIL")
