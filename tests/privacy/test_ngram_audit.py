"""Empirical audit of the variable-length n-gram sanitizer (``ngram.sanitize``), with negative controls.

The claim the code makes (``releases.sequences.plan_spend``, ``NGramEvent``): ε-DP per passenger under
add/remove of one whole sequence, with ``δ = ngram.noise_delta(budget)`` (the samplers' total-variation
slack, below 10⁻¹²). Each case writes a tiny data set D (84 sequences over |L| = 5 stations)
and ``D′ = D + one passenger`` as sequence files, reads them back with the library's reader and the
*public* station list, as a release would, and runs the project's own ``ngram.sanitize`` many times on
each (whole runs). Events are fixed in advance, on the passenger's grams, over the noisy exploration
tree (the mechanism's ε-DP object: every noisy count, which grams were extended, with which budgets),
the published gram table and the synthetic database (post-processing of the tree).

Tight case (ℓmax = 3, nmax = 2, ε = 2): the passenger taps three times at ``S5``, a station nobody in
D uses — a long (ℓ = ℓmax), unusual sequence. It adds 3 to the count of ``S5`` (level 1, scale ℓmax/ε₁),
2 to ``S5 S5`` and 1 to ``S5 &`` (level 2, scale ℓmax/ε₂), so the joint event "each count at least its
value in D′" has probability ratio exactly ``e^{ε₁+ε₂} = e^ε``: the audit's ε_lb comes close to ε.

Negative controls (monkeypatches of the module's own functions; the mechanism has no switch for them):

* **unclamped h_v**: a node whose raw ``log_{p_max}(θ_v/c(v))`` is below 1 (``c·p_max < θ``: the
  passenger's ``S5``, barely over its threshold) keeps that ``h_v < 1``, so its children get
  ``ε_v = ε̄_v/h_v > ε̄_v``. The exploration groups nodes by an integer ``h``, so the control marks them
  ``h = 0`` and gives them ``ε_v = k·ε̄_v`` with ``k = ⌊1/h_v⌋`` (≤ 8) of the level's largest such
  ``h_v``: never more than the raw formula would spend. Same data as the tight case; must FAIL.
* **a root ``&`` child**: the root also gets the end marker as a child, whose count is the number of
  records (one more noisy count at the root's budget, published as the gram ``&``). That adds
  ``ε/(nmax·ℓmax)`` to the loss, so the control runs at ℓmax = nmax = 1 (the passenger's long sequence
  is cut to its first station), where it doubles ε; must FAIL.

The manifest-equality case builds the n-gram release's manifest for D and D′ as the flow does.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import transit_release.mechanisms.ngram as ngram
from tests.privacy.audit import check, per_run, run_case
from tests.privacy.test_manifest_audit import (PERIOD, CREATED, assert_same_public_manifest,
                                               neighbouring_sequence_files, public_locations_file)
from transit_release.inputs.sequences import SequenceInput, read_sequence_file
from transit_release.inputs.universe import LocationUniverse
from transit_release.noise import NoiseSource

pytestmark = pytest.mark.privacy

STATIONS = ("S1", "S2", "S3", "S4", "S5")
#: D: S1..S4 busy and about equally used (each far above the level-1 threshold, so the root's p_max is about
#: 1/4 and only S5 can have c·p_max < θ), nobody at S5
D = ([("S1", "S2")] * 24 + [("S2", "S3", "S1")] * 12 + [("S3", "S4")] * 24 + [("S4",)] * 12
     + [("S1", "S4", "S3")] * 12)
PASSENGER = ("S5", "S5", "S5")
#: the root-& control's passenger: a long sequence, cut to its first station at ℓmax = 1
LONG_PASSENGER = ("S5", "S1", "S3", "S2", "S4")

TIGHT = dict(epsilon=2.0, max_length=3, max_gram=2, theta=3)
ROOT_END = dict(epsilon=2.0, max_length=1, max_gram=1, theta=1)


# ---- data sets, as a release reads them ---------------------------------------------------------

def write_sequences(path: Path, seqs) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in seqs), encoding="utf-8")
    return path


def read_public(path: Path) -> SequenceInput:
    return read_sequence_file(path, LocationUniverse(STATIONS, "public station list"))


def neighbours(tmp: Path, passenger) -> tuple[SequenceInput, SequenceInput]:
    return (read_public(write_sequences(tmp / "d.txt", D)),
            read_public(write_sequences(tmp / "d2.txt", [*D, passenger])))


# ---- runs ---------------------------------------------------------------------------------------

END = len(STATIONS)  # the tree's end symbol (|L|); the published table writes it as ngram.END
S5 = STATIONS.index("S5")
#: the passenger's grams, in the tree's symbols
GRAMS = {"S5": (S5,), "S5 S5": (S5, S5), "S5 &": (S5, END), "&": (END,)}


def tree_counts(tree: ngram.NGramTree, grams: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Noisy count of each gram in the exploration tree (absent grams are left out)."""
    B = tree.budget.n_locations + 1
    out = {}
    for name, gram in grams.items():
        node = -1
        for d, sym in enumerate(gram, start=1):
            if d > len(tree.levels):
                node = -1
                break
            lv = tree.levels[d - 1]
            if d == 1:
                hit = np.flatnonzero(lv.symbol == sym)
            else:
                hit = np.flatnonzero((lv.parent == node) & (lv.symbol == sym))
            node = int(hit[0]) if hit.size else -1
            if node < 0:
                break
        if node >= 0:
            out[name] = int(tree.levels[len(gram) - 1].noisy[node])
    return out


def published(gram: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(ngram.END if x == END else x for x in gram)


def draw_runs(data: SequenceInput, budget: ngram.NGramBudget, generator):
    """``draw(n)`` → ``n`` whole runs, each ``(tree counts, published table, synthetic lines with S5)``."""
    seqs = data.sequences

    def draw(n: int) -> list:
        out = []
        for _ in range(n):
            r = ngram.sanitize(seqs, budget, generator)
            table = dict(r.ngrams)
            out.append((tree_counts(r.tree, GRAMS), {k: table.get(published(g), 0.0) for k, g in GRAMS.items()},
                        sum(c for s, c in r.sequences if S5 in s),
                        sum(c for s, c in r.sequences if s[:2] == (S5, S5))))
        return out

    return draw


def noise(seed: int | None, case: str, side: str):
    return NoiseSource(seed=seed).stream("privacy-audit", "ngram", case, side)


# ---- events -------------------------------------------------------------------------------------

def at_least(minimum: dict[str, int]):
    """The tree's noisy counts of the named grams are all at least the given values (absent grams never are)."""
    return per_run(lambda o: all(o[0].get(g, -10**9) >= c for g, c in minimum.items()))


def passenger_events() -> dict:
    """On the tree (tight: each count at least its true value in D′, S5 3, S5 S5 2, S5 & 1), the published table
    and the synthetic database (post-processing)."""
    ev = {}
    for i in range(3):
        for j in range(2):
            ev[f"tree S5 ≥ {3 + i} & S5 S5 ≥ {2 + j} & S5 & ≥ {1 + j}"] = at_least(
                {"S5": 3 + i, "S5 S5": 2 + j, "S5 &": 1 + j})
            # S5 barely over its threshold: where an unclamped h_v overspends most
            ev[f"tree 3 ≤ S5 ≤ {4 + i} & S5 S5 ≥ {2 + j} & S5 & ≥ {1 + j}"] = per_run(
                lambda o, i=i, j=j: o[0].get("S5", 10**9) <= 4 + i
                and all(o[0].get(g, -10**9) >= c for g, c in (("S5", 3), ("S5 S5", 2 + j), ("S5 &", 1 + j))))
        ev[f"tree S5 ≥ {3 + i}"] = at_least({"S5": 3 + i})
        ev[f"tree S5 S5 ≥ {2 + i}"] = at_least({"S5 S5": 2 + i})
    for x in (1, 3, 5):
        ev[f"published S5 ≥ {x}"] = per_run(lambda o, x=x: o[1]["S5"] >= x)
        ev[f"published S5 S5 ≥ {x}"] = per_run(lambda o, x=x: o[1]["S5 S5"] >= x)
    ev["published S5 & > 0"] = per_run(lambda o: o[1]["S5 &"] > 0)
    for k in (1, 3):
        ev[f"synthetic lines through S5 ≥ {k}"] = per_run(lambda o, k=k: o[2] >= k)
    ev["a synthetic line starts S5 S5"] = per_run(lambda o: o[3] > 0)
    return ev


def root_end_events(n_d2: int) -> dict:
    """The root-& control's events: S5's count (passenger +1) and the count of the gram '&' (|D| vs |D′|)."""
    ev = {}
    for i in range(2):
        for j in range(2):
            ev[f"published S5 ≥ {1 + i} & '&' ≥ {n_d2 + j}"] = per_run(
                lambda o, i=i, j=j: o[1]["S5"] >= 1 + i and o[1]["&"] >= n_d2 + j)
        ev[f"published '&' ≥ {n_d2 + i}"] = per_run(lambda o, i=i: o[1]["&"] >= n_d2 + i)
        ev[f"published S5 ≥ {1 + i}"] = per_run(lambda o, i=i: o[1]["S5"] >= 1 + i)
    return ev


# ---- cases --------------------------------------------------------------------------------------

def ngram_case(name, spec, passenger, events, runs, seed, tmp, delta, control=""):
    d, d2 = neighbours(tmp, passenger)
    budget = ngram.NGramBudget.of(spec["epsilon"], spec["max_length"], spec["max_gram"], len(STATIONS))
    assert budget.integer_threshold(budget.root_epsilon) == spec["theta"], "the case was built for another θ"
    notes = (f"ℓmax={budget.max_length}, nmax={budget.max_gram}, θ₁={spec['theta']}, |D|={len(d.sequences)}, "
             f"|L|={budget.n_locations}, passenger {' '.join(passenger)}")
    return run_case(name, "n-gram", draw_runs(d, budget, noise(seed, name, "D")),
                    draw_runs(d2, budget, noise(seed, name, "D′")), events, runs, spec["epsilon"], delta,
                    chunk=500, control=control, notes=notes)


def claimed_delta(spec) -> float:
    """What the release charges (``releases.sequences.plan_spend``): taken before a control patches the module."""
    return ngram.noise_delta(ngram.NGramBudget.of(spec["epsilon"], spec["max_length"], spec["max_gram"],
                                                  len(STATIONS)))


def tight_case(runs, seed, tmp, delta, control=""):
    return ngram_case(f"n-gram: passenger S5 S5 S5 at an unused station, ε={TIGHT['epsilon']:g}", TIGHT,
                      PASSENGER, passenger_events(), runs, seed, tmp, delta, control)


@pytest.mark.slow
def test_passenger_with_a_long_unusual_sequence(tmp_path, audit_sizes, audit_seed, audit_report):
    check(tight_case(audit_sizes.ngram, audit_seed, tmp_path, claimed_delta(TIGHT)), audit_report, "PASS",
          power=0.5)  # about 0.65·ε expected at CI sizes, 0.9·ε with --long


# ---- negative controls --------------------------------------------------------------------------

K_MAX = 8


def unclamped_heights(monkeypatch) -> None:
    """``h_v < 1`` kept (see the module docstring): marked ``h = 0``, children at ``k·ε̄_v``."""
    original_heights, original_budget = ngram.subtree_heights, ngram.child_budget
    original_budgets = ngram.NGramBudget.node_budgets
    state = {"k": 1}

    def heights(noisy, threshold, p_max, level, max_gram):
        h = original_heights(noisy, threshold, p_max, level, max_gram)
        c = np.asarray(noisy, dtype=float)
        t = np.broadcast_to(np.asarray(threshold, dtype=float), c.shape)
        p = np.broadcast_to(np.asarray(p_max, dtype=float), c.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = np.log(t / c) / np.log(p)
        below = (p > 0) & (p < 1) & (c > 0) & (raw < 1) & (raw > 0)
        state["k"] = min(K_MAX, math.floor(1 / raw[below].max())) if below.any() else 1
        return np.where(below, 0, h)

    def child_budget(epsilon, spent, height):
        if height == 0:
            return (epsilon - spent) * state["k"]
        return original_budget(epsilon, spent, height)

    def node_budgets(self):
        out = set(original_budgets(self))

        def walk(level: int, remaining: Fraction) -> None:
            out.update(remaining * k for k in range(1, K_MAX + 1))
            for h in range(2, self.max_gram - level + 1):
                if level + 1 < self.max_gram:
                    walk(level + 1, remaining - remaining / h)

        if self.max_gram > 1:
            walk(1, self.epsilon - self.root_epsilon)
        return tuple(sorted(out))

    monkeypatch.setattr(ngram, "subtree_heights", heights)
    monkeypatch.setattr(ngram, "child_budget", child_budget)
    monkeypatch.setattr(ngram.NGramBudget, "node_budgets", node_budgets)


def test_control_unclamped_subtree_height_fails(monkeypatch, tmp_path, audit_sizes, audit_seed, audit_report):
    delta = claimed_delta(TIGHT)
    unclamped_heights(monkeypatch)
    result = tight_case(audit_sizes.ngram_control, audit_seed, tmp_path, delta,
                        control="h_v < 1 not clamped (ε_v = ε̄_v/h_v > ε̄_v)")
    check(result, audit_report, "FAIL")
    assert result.worst.event.startswith("tree ") and result.worst.direction == "D′ vs D"


def root_end_child(monkeypatch) -> None:
    """The root gets the end marker as a child: count = number of records, noise at the root's budget."""
    original = ngram.build_exploration_tree

    def build(seqs, budget, generator):
        tree = original(seqs, budget, generator)
        lv = tree.levels[0]
        e1 = budget.root_epsilon
        noisy = len(seqs) + int(ngram.discrete_laplace_table(budget.noise_scale(e1)).sample(generator, 1)[0])
        code, path = lv.spent[0], lv.path[0]  # every root child is drawn at ε/nmax
        append = {"parent": 0, "symbol": tree.end, "noisy": noisy, "spent": code, "path": path,
                  "passed": noisy >= budget.integer_threshold(e1), "expanded": False, "height": 0,
                  "context_level": 0, "context_index": -1}
        for name, value in append.items():
            setattr(lv, name, np.append(getattr(lv, name), value))
        return tree

    monkeypatch.setattr(ngram, "build_exploration_tree", build)


def test_control_root_end_child_fails(monkeypatch, tmp_path, audit_sizes, audit_seed, audit_report):
    delta = claimed_delta(ROOT_END)
    root_end_child(monkeypatch)
    result = ngram_case(f"n-gram: long passenger cut to one station, ε={ROOT_END['epsilon']:g}", ROOT_END,
                        LONG_PASSENGER, root_end_events(len(D) + 1), audit_sizes.ngram_control, audit_seed,
                        tmp_path, delta, control="root '&' child (count = number of records)")
    check(result, audit_report, "FAIL")
    assert "'&'" in result.worst.event


def test_the_sequence_release_draws_what_the_cases_draw(tmp_path):
    """The cases call ``ngram.sanitize`` itself, for the exploration tree the events watch; a sequence release calls
    it through ``releases.sequences`` (``budget_for`` from the public universe, ``plan_spend``, ``sanitize``). Both
    charge the same δ and, from the same generator state, publish the same table and synthetic sequences."""
    from datetime import date

    from transit_release.inputs.screening import Period
    from transit_release.releases import sequences as sequence_release
    from tests.privacy.audit import OneStream

    _, d2 = neighbours(tmp_path, PASSENGER)
    budget, taxonomy = sequence_release.budget_for("ngram", d2.universe, TIGHT["epsilon"], lmax=TIGHT["max_length"],
                                                   nmax=TIGHT["max_gram"])
    event = sequence_release.plan_spend("audit", Period(date(2026, 1, 1), date(2026, 1, 31)), budget, "fp", "0")
    assert taxonomy is None and event.delta == claimed_delta(TIGHT)
    ours, theirs = noise(1, "tie", "case"), noise(1, "tie", "case")
    case_budget = ngram.NGramBudget.of(TIGHT["epsilon"], TIGHT["max_length"], TIGHT["max_gram"], len(STATIONS))
    for _ in range(10):
        r = ngram.sanitize(d2.sequences, case_budget, ours)
        got = sequence_release.sanitize(d2.sequences, budget, None, OneStream(theirs), "audit")
        assert (got.sequences, got.ngrams) == (r.sequences, r.ngrams)


def test_the_controls_break_only_what_they_say(monkeypatch, tmp_path):
    """Sanity of the harness: unpatched, the tree has no root '&' and spends ≤ ε on every path; the root-&
    patch publishes the gram '&' with about |D| and the h_v patch overspends along S5's path."""
    d, d2 = neighbours(tmp_path, PASSENGER)
    budget = ngram.NGramBudget.of(TIGHT["epsilon"], TIGHT["max_length"], TIGHT["max_gram"], len(STATIONS))
    run = draw_runs(d2, budget, noise(1, "sanity", "D′"))(20)
    assert all("&" not in o[0] for o in run)
    tree = ngram.build_exploration_tree(d2.sequences, budget, noise(1, "sanity", "tree"))
    assert max(s for _, s in tree.leaf_path_spends()) <= budget.epsilon
    with monkeypatch.context() as m:
        root_end_child(m)
        run = draw_runs(d2, budget, noise(1, "sanity", "root"))(20)
        assert all(abs(o[1]["&"] - len(d2.sequences)) < 40 for o in run)
    with monkeypatch.context() as m:
        unclamped_heights(m)
        spends = set()
        for i in range(20):
            tree = ngram.build_exploration_tree(d2.sequences, budget, noise(1, "sanity", str(i)))
            spends |= {s for _, s in tree.leaf_path_spends()}
        assert max(spends) > budget.epsilon


# ---- the manifest -------------------------------------------------------------------------------

def library_ngram_manifest(path: Path, locations: Path, epsilon: float, lmax: int, nmax: int) -> dict:
    """The manifest an n-gram release of ``path`` publishes, built as ``flows/sequence_release.py`` builds it."""
    from tasks.sequences import plan_sequence_spend, read_sequences, sequence_budget
    from transit_release.inputs.universe import read_locations_file
    from transit_release.releases import sequences as sequence_release
    from transit_release.version import code_version

    universe = read_locations_file(locations)
    budget, _ = sequence_budget.fn("ngram", universe, epsilon, None, None, None, lmax, nmax)
    read_sequences.fn(str(path), universe, 0.01)
    event = plan_sequence_spend.fn("sequences-audit", PERIOD, budget, "fingerprint", code_version())
    return sequence_release.build_manifest("sequences-audit", PERIOD, universe, budget, event, "os-entropy",
                                           code_version(), CREATED)


def test_ngram_manifest_is_the_same_for_neighbours(tmp_path):
    f, f2 = neighbouring_sequence_files(tmp_path)  # D′: one passenger at a station nobody in D uses
    long = tmp_path / "d3" / "journeys.txt"
    long.parent.mkdir()
    long.write_text(f.read_text() + " ".join(["S13", "S01"] * 15) + "\n")  # a long sequence, cut at ℓmax
    locations = public_locations_file(tmp_path)
    m_d = library_ngram_manifest(f, locations, 1.0, 20, 5)
    assert m_d["privacy"]["mechanism_id"] == "ngram" and m_d["privacy"]["node_budgets"]
    for other in (f2, long):
        assert_same_public_manifest(m_d, library_ngram_manifest(other, locations, 1.0, 20, 5))


def test_control_noise_scale_halved_fails(monkeypatch, tmp_path, audit_sizes, audit_seed, audit_report):
    """Every node's discrete Laplace noise at half its scale: the passenger's path shows about 2ε."""
    delta = claimed_delta(TIGHT)
    original = ngram.NGramBudget.noise_scale
    monkeypatch.setattr(ngram.NGramBudget, "noise_scale", lambda self, epsilon: original(self, epsilon) / 2)
    result = tight_case(audit_sizes.ngram_control, audit_seed, tmp_path, delta, control="noise scale halved")
    check(result, audit_report, "FAIL")
