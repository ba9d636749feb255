"""Empirical audit of the stability-based histogram (``stability_histogram``), with negative controls.

The claim the code makes (module docstring): each point is
(ε/2, δ/2)-indistinguishable, so a histogram is (ε/2, δ/2)-DP under
add/remove-one row and (ε, δ)-DP under replace-one. Every case runs the
project's own ``stability_histogram`` through the module attribute (so a
monkeypatched ``sbh_scale``/``sbh_threshold`` is what runs). The SBH treats
points independently, so one call on ``n`` copies of a histogram's present
points is ``n`` independent runs of that histogram: ``draw(n)`` is one call.
"""

from __future__ import annotations

import numpy as np
import pytest

import transit_release.mechanisms.stability_histogram as sbh
from transit_release.noise import NoiseSource
from tests.privacy.audit import check, run_case

pytestmark = pytest.mark.privacy

DELTA = 1 / 8_000_000  # the Opal default per marginal
STRESSED_DELTA = 0.2  # low threshold: the bad event (an absent point released) is measurable
CHUNK = 2_000_000
NOT_RELEASED = -1


def noise(seed: int | None, case: str, side: str) -> np.random.Generator:
    return NoiseSource(seed=seed).stream("privacy-audit", "sbh", case, side)


def sbh_draw(hist: dict[str, int], keys: tuple[str, ...], epsilon: float, delta: float,
             generator: np.random.Generator):
    """``draw(n)`` → ``(n, len(keys))`` released values (−1: not released) of ``n`` runs of the SBH on ``hist``.

    As a release calls it: the counts of the *present* points only, in key order.
    """
    present = [k for k in sorted(hist) if hist[k] > 0]
    counts = np.array([hist[k] for k in present], dtype=np.int64)
    column = np.array([keys.index(k) for k in present], dtype=np.int64)

    def draw(n: int) -> np.ndarray:
        res = sbh.stability_histogram(np.tile(counts, n), epsilon, delta, generator)
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

def singleton_case(eps, offset, runs, seed, control=""):
    """One point with count c = T + offset vs c + 1 (add one row): claim (ε/2, δ/2)."""
    T = sbh.sbh_threshold(eps, DELTA)
    c = T + offset
    keys = ("x",)
    events = point_events(keys, keys, range(T, T + 6))
    return audit_sbh(f"sbh singleton ε={eps:g} c=T{offset:+d} vs c+1", {"x": c}, {"x": c + 1}, events,
                     eps / 2, DELTA / 2, eps, DELTA, runs, seed, keys, control=control,
                     notes=f"T={T}, add/remove one row at the point")


def present_vs_absent_case(eps, runs, seed, control=""):
    """A key present with count 1 vs absent (its only row removed), δ stressed: claim (ε/2, δ/2)."""
    T = sbh.sbh_threshold(eps, STRESSED_DELTA)
    keys = ("a", "y")
    events = point_events(keys, keys, range(T, T + 4))
    return audit_sbh(f"sbh present(1) vs absent ε={eps:g} δ={STRESSED_DELTA:g}", {"a": 3, "y": 1}, {"a": 3},
                     events, eps / 2, STRESSED_DELTA / 2, eps, STRESSED_DELTA, runs, seed, keys, control=control,
                     notes=f"T={T}; D={{a: 3, y: 1}}, D′={{a: 3}}")


def replace_one_case(eps, runs, seed, control=""):
    """Replace one row of point a (T−1 → T−2) by one of point b (T → T+1) in a 4-point histogram: claim (ε, δ).

    Tight: ``Pr[a ≥ T, b < T]`` has ratio exactly ``e^{ε/2} · e^{ε/2}``.
    """
    T = sbh.sbh_threshold(eps, DELTA)
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
    T = sbh.sbh_threshold(eps, STRESSED_DELTA)
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
    T = sbh.sbh_threshold(eps, STRESSED_DELTA)
    bad = next(b for b in result.bounds if b.event == f"y ≥ {T}" and b.direction == "D vs D′")
    assert bad.hits_den == 0
    assert 0 < bad.hits_num / bad.runs_num <= sbh.bad_event_bound(eps, T) * 1.01 < STRESSED_DELTA / 2


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_replace_one_on_a_small_histogram(eps, audit_sizes, audit_seed, audit_report):
    check(replace_one_case(eps, audit_sizes.sbh, audit_seed), audit_report, "PASS", power=0.9)


def test_replace_one_with_a_point_leaving_and_one_entering(audit_sizes, audit_seed, audit_report):
    check(replace_entering_case(1.0, audit_sizes.sbh, audit_seed), audit_report, "PASS")


# ---- negative controls: broken mechanisms the audit must catch -----------------------------------

def halve_noise_scale(monkeypatch):
    original = sbh.sbh_scale
    monkeypatch.setattr(sbh, "sbh_scale", lambda epsilon: original(epsilon) / 2)


@pytest.mark.parametrize("case", ["singleton", "replace-one"])
def test_control_noise_scale_halved_fails(case, monkeypatch, audit_sizes, audit_seed, audit_report):
    halve_noise_scale(monkeypatch)  # the threshold follows the patched scale, as it would in the code
    control = "noise scale halved (sbh_scale/2)"
    result = (singleton_case(1.0, -1, audit_sizes.sbh_control, audit_seed, control) if case == "singleton"
              else replace_one_case(1.0, audit_sizes.sbh_control, audit_seed, control))
    check(result, audit_report, "FAIL")


@pytest.mark.parametrize("lowered", [1, 3])
def test_control_threshold_lowered_fails(lowered, monkeypatch, audit_sizes, audit_seed, audit_report):
    original = sbh.sbh_threshold
    monkeypatch.setattr(sbh, "sbh_threshold", lambda epsilon, delta: original(epsilon, delta) - lowered)
    result = present_vs_absent_case(1.0, audit_sizes.sbh_control, audit_seed,
                                    control=f"threshold lowered by {lowered}")
    check(result, audit_report, "FAIL")
