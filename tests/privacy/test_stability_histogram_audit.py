"""Empirical audit of the stability-based histogram as the trip-level Opal release runs it, with negative controls.

The claim the code makes (module docstring): each point is
(ε/2, δ/2)-indistinguishable, so a histogram is (ε/2, δ/2)-DP under
add/remove-one row and (ε, δ)-DP under replace-one. Every case runs what a
trip-level release runs for a marginal: the budget of a trip-level
configuration (``ReleaseConfig.sbh_budget``: ``CardLevelBudget(ε, δ, 1,
"replace-one")``, whose scale and threshold are the paper's ``2/ε`` and
``sbh_threshold``, checked below) and the sanitizer the release picks for it
(``opal.sanitizer_for``: ``card_level_stability_histogram``). The controls
patch the functions that budget reads (``user_level_scale``,
``user_level_threshold``), so a patched scale or threshold is what runs. The
SBH treats points independently, so one call on ``n`` copies of a histogram's
present points is ``n`` independent runs of that histogram: ``draw(n)`` is one
call.
"""

from __future__ import annotations

import numpy as np
import pytest

import transit_release.mechanisms.stability_histogram as sbh
from transit_release.config import load_release_config
from transit_release.noise import NoiseSource
from transit_release.releases import opal
from tests.privacy.audit import check, run_case

pytestmark = pytest.mark.privacy

DELTA = 1 / 8_000_000  # the Opal default per marginal
STRESSED_DELTA = 0.2  # low threshold: the bad event (an absent point released) is measurable
CHUNK = 2_000_000
NOT_RELEASED = -1


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "sbh", case, side)


def trip_budget(epsilon: float, delta: float):
    """A marginal's budget in a trip-level release at ``(ε, δ)`` (every marginal at the same values)."""
    return load_release_config().with_overrides(epsilons=[epsilon] * 6, delta=delta).sbh_budget("tap_on_time")


def threshold_of(epsilon: float, delta: float) -> int:
    return trip_budget(epsilon, delta).threshold


def sbh_draw(hist: dict[str, int], keys: tuple[str, ...], epsilon: float, delta: float,
             generator: np.random.Generator):
    """``draw(n)`` → ``(n, len(keys))`` released values (−1: not released) of ``n`` runs of the SBH on ``hist``.

    As a release calls it: the counts of the *present* points only, in key order.
    """
    present = [k for k in sorted(hist) if hist[k] > 0]
    counts = np.array([hist[k] for k in present], dtype=np.int64)
    column = np.array([keys.index(k) for k in present], dtype=np.int64)
    budget = trip_budget(epsilon, delta)
    sanitize = opal.sanitizer_for(budget)

    def draw(n: int) -> np.ndarray:
        res = sanitize(np.tile(counts, n), budget, generator)
        out = np.full((n, len(keys)), NOT_RELEASED, dtype=np.int64)
        if present:
            run, pos = np.divmod(res.kept, len(present))
            out[run, column[pos]] = res.counts
        return out

    return draw


def point_events(keys: tuple[str, ...], watch: tuple[str, ...], grid: range) -> dict:
    """Per watched point: dropped, released with value = v, released with value ≥ v (v in ``grid``)."""
    ev = {}
    for k in watch:
        i = keys.index(k)
        ev[f"{k} dropped"] = lambda V, i=i: V[:, i] == NOT_RELEASED
        for v in grid:
            ev[f"{k} = {v}"] = lambda V, i=i, v=v: V[:, i] == v
            ev[f"{k} ≥ {v}"] = lambda V, i=i, v=v: V[:, i] >= v
    return ev


def pair_events(keys: tuple[str, ...], a: str, b: str, grid: range) -> dict:
    """Joint events of two changed points: ``a ≥ v`` and ``b < w`` (dropped counts as below every w)."""
    i, j = keys.index(a), keys.index(b)
    return {f"{a} ≥ {v} & {b} < {w}": (lambda V, v=v, w=w: (V[:, i] >= v) & (V[:, j] < w))
            for v in grid for w in grid}


def audit_sbh(case, d, d2, events, claim_eps, claim_delta, eps, delta, runs, seed, keys, control="", notes=""):
    return run_case(case, "SBH", sbh_draw(d, keys, eps, delta, noise(seed, case, "D")),
                    sbh_draw(d2, keys, eps, delta, noise(seed, case, "D′")), events, runs, claim_eps, claim_delta,
                    chunk=CHUNK, control=control, notes=notes)


# ---- the cases -----------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [1.0, 2.0])
@pytest.mark.parametrize("delta", [DELTA, STRESSED_DELTA])
def test_the_trip_level_budget_is_the_papers_sbh(eps, delta):
    """What the cases claim (per point ε/2, δ/2) is the paper's SBH: the trip-level budget's scale and threshold are
    ``sbh_scale`` and ``sbh_threshold``, and the release draws it with the untruncated sampler."""
    budget = trip_budget(eps, delta)
    assert isinstance(budget, sbh.CardLevelBudget) and budget.sensitivity == (2, 2, 1)
    assert (budget.scale, budget.threshold) == (sbh.sbh_scale(eps), sbh.sbh_threshold(eps, delta))
    assert opal.sanitizer_for(budget) is sbh.card_level_stability_histogram


def singleton_case(eps, offset, runs, seed, control=""):
    """One point with count c = T + offset vs c + 1 (add one row): claim (ε/2, δ/2)."""
    T = threshold_of(eps, DELTA)
    c = T + offset
    keys = ("x",)
    events = point_events(keys, keys, range(T, T + 6))
    return audit_sbh(f"sbh singleton ε={eps:g} c=T{offset:+d} vs c+1", {"x": c}, {"x": c + 1}, events,
                     eps / 2, DELTA / 2, eps, DELTA, runs, seed, keys, control=control,
                     notes=f"T={T}, add/remove one row at the point")


def present_vs_absent_case(eps, runs, seed, control=""):
    """A key present with count 1 vs absent (its only row removed), δ stressed: claim (ε/2, δ/2)."""
    T = threshold_of(eps, STRESSED_DELTA)
    keys = ("a", "y")
    events = point_events(keys, keys, range(T, T + 4))
    return audit_sbh(f"sbh present(1) vs absent ε={eps:g} δ={STRESSED_DELTA:g}", {"a": 3, "y": 1}, {"a": 3},
                     events, eps / 2, STRESSED_DELTA / 2, eps, STRESSED_DELTA, runs, seed, keys, control=control,
                     notes=f"T={T}; D={{a: 3, y: 1}}, D′={{a: 3}}")


def replace_one_case(eps, runs, seed, control=""):
    """Replace one row of point a (T−1 → T−2) by one of point b (T → T+1) in a 4-point histogram: claim (ε, δ).

    Tight: ``Pr[a ≥ T, b < T]`` has ratio exactly ``e^{ε/2} · e^{ε/2}``.
    """
    T = threshold_of(eps, DELTA)
    keys = ("a", "b", "c", "d")
    d = {"a": T - 1, "b": T, "c": T + 6, "d": 2}
    d2 = {"a": T - 2, "b": T + 1, "c": T + 6, "d": 2}
    grid = range(T, T + 3)
    events = {**point_events(keys, ("a", "b"), grid), **pair_events(keys, "a", "b", grid),
              **pair_events(keys, "b", "a", grid)}
    return audit_sbh(f"sbh replace-one ε={eps:g}", d, d2, events, eps, DELTA, eps, DELTA, runs, seed, keys,
                     control=control, notes=f"T={T}; D={d}, D′={d2}")


def replace_entering_case(eps, runs, seed, control=""):
    """Replace the only row of point a by a row of a new point e, δ stressed: claim (ε, δ)."""
    T = threshold_of(eps, STRESSED_DELTA)
    keys = ("a", "b", "e")
    d, d2 = {"a": 1, "b": T}, {"b": T, "e": 1}
    grid = range(T, T + 3)
    events = {**point_events(keys, ("a", "e"), grid), **pair_events(keys, "a", "e", grid),
              **pair_events(keys, "e", "a", grid)}
    return audit_sbh(f"sbh replace-one, point leaves/enters ε={eps:g} δ={STRESSED_DELTA:g}", d, d2, events, eps,
                     STRESSED_DELTA, eps, STRESSED_DELTA, runs, seed, keys, control=control, notes=f"T={T}")


@pytest.mark.parametrize("eps", [1.0, 2.0])
@pytest.mark.parametrize("offset", [-2, -1, 0])
def test_singleton_around_the_threshold(eps, offset, audit_sizes, audit_seed, audit_report):
    check(singleton_case(eps, offset, audit_sizes.sbh, audit_seed), audit_report, "PASS", power=0.9)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_key_present_vs_absent_with_stressed_delta(eps, audit_sizes, audit_seed, audit_report):
    result = present_vs_absent_case(eps, audit_sizes.sbh, audit_seed)
    check(result, audit_report, "PASS")
    # the bad event (y released from D, never from D′) is measured, below δ/2 as the threshold promises
    T = threshold_of(eps, STRESSED_DELTA)
    bad = next(b for b in result.bounds if b.event == f"y ≥ {T}" and b.direction == "D vs D′")
    assert bad.hits_den == 0
    per_point = trip_budget(eps, STRESSED_DELTA).bad_event / 2  # the budget's δ covers the two points of a swap
    assert 0 < bad.hits_num / bad.runs_num <= per_point * 1.01 < STRESSED_DELTA / 2


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_replace_one_on_a_small_histogram(eps, audit_sizes, audit_seed, audit_report):
    check(replace_one_case(eps, audit_sizes.sbh, audit_seed), audit_report, "PASS", power=0.9)


def test_replace_one_with_a_point_leaving_and_one_entering(audit_sizes, audit_seed, audit_report):
    check(replace_entering_case(1.0, audit_sizes.sbh, audit_seed), audit_report, "PASS")


# ---- negative controls: broken mechanisms the audit must catch -----------------------------------

def halve_noise_scale(monkeypatch):
    original = sbh.user_level_scale
    monkeypatch.setattr(sbh, "user_level_scale", lambda epsilon, l1: original(epsilon, l1) / 2)


@pytest.mark.parametrize("case", ["singleton", "replace-one"])
def test_control_noise_scale_halved_fails(case, monkeypatch, audit_sizes, audit_seed, audit_report):
    halve_noise_scale(monkeypatch)  # the threshold follows the patched scale, as it would in the code
    control = "noise scale halved (user_level_scale/2)"
    result = (singleton_case(1.0, -1, audit_sizes.sbh_control, audit_seed, control) if case == "singleton"
              else replace_one_case(1.0, audit_sizes.sbh_control, audit_seed, control))
    check(result, audit_report, "FAIL")


@pytest.mark.parametrize("lowered", [1, 3])
def test_control_threshold_lowered_fails(lowered, monkeypatch, audit_sizes, audit_seed, audit_report):
    original = sbh.user_level_threshold
    monkeypatch.setattr(sbh, "user_level_threshold", lambda *args: original(*args) - lowered)
    result = present_vs_absent_case(1.0, audit_sizes.sbh_control, audit_seed,
                                    control=f"threshold lowered by {lowered}")
    check(result, audit_report, "FAIL")
