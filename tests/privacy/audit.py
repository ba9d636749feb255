"""Empirical privacy audit: run a mechanism on neighbouring inputs many times and bound ε from below.

For a mechanism ``M`` that claims (ε, δ)-DP and neighbouring inputs ``D``, ``D′``,
every event ``S`` must satisfy, in both directions,

    Pr[M(D) ∈ S] ≤ e^ε · Pr[M(D′) ∈ S] + δ.

Given ``k`` hits of ``S`` in ``n`` independent runs on each side, the
Clopper–Pearson bounds ``p_lo(D)`` and ``p_hi(D′)`` give the *empirical lower
bound* on the privacy loss of that event,

    ε_lb = ln((p_lo(D) − δ) / p_hi(D′))      (−∞ when p_lo(D) ≤ δ: no evidence),

and the lower bound on δ at the claimed ε, ``δ_lb = p_lo(D) − e^ε p_hi(D′)``
(``ε_lb > ε`` exactly when ``δ_lb > δ``). A case tests a fixed family of
events (chosen before any run), each in both directions and, by default, with
its complement too; that is ``m`` tests of two one-sided bounds each.
Bonferroni: every one-sided bound is taken at level ``α / (2m)``, so if the
mechanism keeps its claim the chance that *any* test of the case reports
``ε_lb > ε`` is at most the family-wise ``α``. Verdict: **PASS** iff no test's
``ε_lb`` exceeds the claimed ε.

The figure of a test is its interval ``[ε_lb, ε_ub]`` with
``ε_ub = ln((p_hi(D) − δ) / p_lo(D′))`` (same per-bound level) and the point
estimate ``ε̂ = ln((p̂(D) − δ) / p̂(D′))``. A case reports its worst test (the
largest ``ε_lb``).

An audit can only *refute* a claim; a PASS says that these events on these
neighbours show no violation larger than the bounds' width. Cases are chosen
where the claim is tight (the ratio of the true probabilities is ``e^ε``), so
a correct mechanism's ``ε_lb`` comes close to ε and a broken one's exceeds it.

The sampling side is generic: ``draw(size)`` returns one batch of outputs of
``size`` independent runs (vectorised where the mechanism allows), and each
event maps a batch to a boolean array of length ``size``.

To audit a new mechanism, add ``tests/privacy/test_<mechanism>_audit.py``:
build D and D′ as a release would (public universe as an argument), write
``draw`` functions that call what the release calls — its release module's
sanitize function where it hands back what the events need (give it
:class:`OneStream` for its noise source), else the mechanism module's own
function through the module attribute, with a test that the release draws
exactly that — (so a negative control can monkeypatch it), fix
events where the claim is tight, call :func:`run_case`, and :func:`check` the
result PASS (it adds it to the ``audit_report`` fixture); then add at least one
negative control (e.g. the noise scale halved) checked FAIL.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta

#: Family-wise α per case in CI (fixed seeds make CI deterministic; α bounds a false FAIL on a fresh seed).
FAMILY_ALPHA = 1e-3

Batch = Any
Event = Callable[[Batch], np.ndarray]


# ---- Clopper–Pearson -----------------------------------------------------------------------------

def cp_lower(k, n, level: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound: ``P(p < bound) ≤ level`` (0 when ``k = 0``)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        b = beta.ppf(level, k, n - k + 1)
    return np.where(k <= 0, 0.0, b)


def cp_upper(k, n, level: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound: ``P(p > bound) ≤ level`` (1 when ``k = n``)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        b = beta.ppf(1 - level, k + 1, n - k)
    return np.where(k >= n, 1.0, b)


def log_ratio(num, den, delta: float) -> np.ndarray:
    """``ln((num − δ) / den)``, −∞ where ``num ≤ δ``, +∞ where ``den = 0 < num − δ``."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    top = num - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(top / den)
    out = np.where(top <= 0, -np.inf, out)
    return np.where((top > 0) & (den <= 0), np.inf, out)


# ---- results -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EventBound:
    """One event in one direction: ``Pr[M(A) ∈ S] ≤ e^ε Pr[M(B) ∈ S] + δ`` with A, B = D, D′ or D′, D."""

    event: str
    direction: str  # "D vs D′" (A = D) or "D′ vs D"
    hits_num: int
    runs_num: int
    hits_den: int
    runs_den: int
    eps_lb: float
    eps_hat: float
    eps_ub: float
    delta_lb: float  # lower bound on δ at the claimed ε


@dataclass(frozen=True)
class AuditResult:
    case: str
    mechanism: str
    epsilon: float  # claimed
    delta: float  # claimed
    runs_d: int
    runs_d2: int
    alpha: float  # family-wise
    n_tests: int  # events × directions (× 2 with complements)
    bounds: tuple[EventBound, ...]
    control: str = ""  # empty for a real case; what is broken for a negative control
    seconds: float = 0.0
    notes: str = ""

    @property
    def worst(self) -> EventBound:
        return max(self.bounds, key=lambda b: (b.eps_lb, b.delta_lb, b.eps_hat))

    @property
    def passed(self) -> bool:
        return all(not b.eps_lb > self.epsilon for b in self.bounds)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def row(self) -> dict:
        w = self.worst
        return {"case": self.case, "mechanism": self.mechanism, "control": self.control,
                "claimed_epsilon": self.epsilon, "delta": self.delta, "runs_per_side": self.runs_d,
                "events_tested": self.n_tests, "alpha": self.alpha,
                "max_eps_lb": w.eps_lb, "eps_ci": [w.eps_lb, w.eps_ub], "eps_hat": w.eps_hat,
                "max_delta_lb": max(b.delta_lb for b in self.bounds),
                "worst_event": f"{w.event} [{w.direction}]", "hits": [w.hits_num, w.hits_den],
                "verdict": self.verdict, "seconds": round(self.seconds, 2), "notes": self.notes}

    def describe(self, top: int = 5) -> str:
        """The case's verdict and its ``top`` worst tests, for assertion messages."""
        lines = [f"{self.case}: {self.verdict} (claimed ε={self.epsilon:g}, δ={self.delta:.3g}, "
                 f"{self.runs_d:,}/{self.runs_d2:,} runs, {self.n_tests} tests, α={self.alpha:g})"]
        for b in sorted(self.bounds, key=lambda b: (b.eps_lb, b.eps_hat), reverse=True)[:top]:
            lines.append(f"  {b.event} [{b.direction}]: ε_lb={fmt(b.eps_lb)} ε̂={fmt(b.eps_hat)} "
                         f"ε_ub={fmt(b.eps_ub)} δ_lb={b.delta_lb:.3g} hits {b.hits_num}/{b.runs_num} vs "
                         f"{b.hits_den}/{b.runs_den}")
        return "\n".join(lines)


def fmt(x: float) -> str:
    if x == -math.inf:
        return "−∞"
    if x == math.inf:
        return "+∞"
    return f"{x:.3f}"


# ---- the audit -----------------------------------------------------------------------------------

def audit(case: str, mechanism: str, hits_d: Mapping[str, int], hits_d2: Mapping[str, int], runs_d: int,
          runs_d2: int, epsilon: float, delta: float, alpha: float = FAMILY_ALPHA, complements: bool = True,
          control: str = "", seconds: float = 0.0, notes: str = "") -> AuditResult:
    """Bound ε from below for every event (both directions, complements too) and give the verdict."""
    if set(hits_d) != set(hits_d2):
        raise ValueError("both sides must count the same events")
    names = sorted(hits_d)
    k1 = np.array([hits_d[e] for e in names], dtype=np.int64)
    k2 = np.array([hits_d2[e] for e in names], dtype=np.int64)
    if complements:
        names = names + [f"not ({e})" for e in names]
        k1 = np.concatenate([k1, runs_d - k1])
        k2 = np.concatenate([k2, runs_d2 - k2])
    # both directions: numerator side first
    ev = names + names
    direction = ["D vs D′"] * len(names) + ["D′ vs D"] * len(names)
    kn, nn = np.concatenate([k1, k2]), np.concatenate([np.full(k1.size, runs_d), np.full(k2.size, runs_d2)])
    kd, nd = np.concatenate([k2, k1]), np.concatenate([np.full(k2.size, runs_d2), np.full(k1.size, runs_d)])
    m = len(ev)
    level = alpha / (2 * m)
    num_lo, num_hi = cp_lower(kn, nn, level), cp_upper(kn, nn, level)
    den_lo, den_hi = cp_lower(kd, nd, level), cp_upper(kd, nd, level)
    lb = log_ratio(num_lo, den_hi, delta)
    ub = log_ratio(num_hi, den_lo, delta)
    hat = log_ratio(kn / nn, kd / nd, delta)
    dlb = num_lo - math.exp(epsilon) * den_hi
    bounds = tuple(EventBound(ev[i], direction[i], int(kn[i]), int(nn[i]), int(kd[i]), int(nd[i]),
                              float(lb[i]), float(hat[i]), float(ub[i]), float(dlb[i])) for i in range(m))
    return AuditResult(case, mechanism, float(epsilon), float(delta), int(runs_d), int(runs_d2), alpha, m, bounds,
                       control, seconds, notes)


def count_events(draw: Callable[[int], Batch], events: Mapping[str, Event], runs: int,
                 chunk: int = 1_000_000) -> dict[str, int]:
    """Hits of each event in ``runs`` independent runs, drawn ``chunk`` at a time."""
    hits = dict.fromkeys(events, 0)
    done = 0
    while done < runs:
        size = min(chunk, runs - done)
        batch = draw(size)
        for name, event in events.items():
            hit = np.asarray(event(batch), dtype=bool)
            if hit.shape != (size,):
                raise ValueError(f"event {name!r} gave shape {hit.shape}, expected ({size},)")
            hits[name] += int(hit.sum())
        done += size
    return hits


def run_case(case: str, mechanism: str, draw_d: Callable[[int], Batch], draw_d2: Callable[[int], Batch],
             events: Mapping[str, Event], runs: int, epsilon: float, delta: float, alpha: float = FAMILY_ALPHA,
             chunk: int = 1_000_000, control: str = "", notes: str = "") -> AuditResult:
    """Count the events on both sides and audit them."""
    start = time.perf_counter()
    hits_d = count_events(draw_d, events, runs, chunk)
    hits_d2 = count_events(draw_d2, events, runs, chunk)
    return audit(case, mechanism, hits_d, hits_d2, runs, runs, epsilon, delta, alpha, control=control,
                 seconds=time.perf_counter() - start, notes=notes)


class OneStream:
    """Stands in for a release's :class:`~transit_release.noise.NoiseSource`: every stream it asks for is the
    audit's one generator, so a release's ``sanitize(…, noise, release_id)`` runs unchanged, run after run, on
    the case's seeded (or OS-entropy) generator."""

    kind = "privacy-audit"

    def __init__(self, generator: np.random.Generator):
        self.generator = generator

    def stream(self, *name: str) -> np.random.Generator:
        return self.generator


def per_run(predicate: Callable[[Any], bool]) -> Event:
    """An event over a batch that is a list of whole-run outputs."""
    return lambda batch: np.fromiter((bool(predicate(out)) for out in batch), dtype=bool, count=len(batch))


def check(result: AuditResult, report, expect: str, power: float | None = None) -> None:
    """Add ``result`` to the session's figures table and assert its verdict (``PASS``/``FAIL``) and, for a real
    case, its power (``ε_lb ≥ power·ε``)."""
    report.add(result)
    assert result.verdict == expect, result.describe()
    if power is not None:
        assert result.worst.eps_lb >= power * result.epsilon, result.describe()


# ---- the figures table ---------------------------------------------------------------------------

@dataclass
class AuditReport:
    """Every case's result of one session, as a markdown table and JSON."""

    mode: str
    seed: str
    results: list[AuditResult] = field(default_factory=list)

    def add(self, result: AuditResult) -> None:
        self.results.append(result)

    def markdown(self) -> str:
        head = ("| case | mechanism | control | claimed ε | δ | runs/side | tests | max ε_lb | CI [ε_lb, ε_ub] | ε̂ "
                "| max δ_lb | worst event | verdict | s |\n|" + "---|" * 14 + "\n")
        rows = []
        for r in self.results:
            w, d = r.worst, r.row()
            rows.append(f"| {r.case} | {r.mechanism} | {r.control or '—'} | {r.epsilon:g} | {r.delta:.3g} | "
                        f"{r.runs_d:,} | {r.n_tests} | {fmt(w.eps_lb)} | [{fmt(w.eps_lb)}, {fmt(w.eps_ub)}] | "
                        f"{fmt(w.eps_hat)} | {d['max_delta_lb']:.3g} | {w.event} [{w.direction}] | "
                        f"{r.verdict} | {r.seconds:.1f} |")
        return head + "\n".join(rows) + "\n"

    def to_json(self) -> str:
        def clean(x):
            if isinstance(x, float) and math.isinf(x):
                return "inf" if x > 0 else "-inf"
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x
        return json.dumps({"mode": self.mode, "seed": self.seed,
                           "cases": [clean({**r.row(), "tests": [asdict(b) for b in r.bounds]})
                                     for r in self.results]}, indent=1, ensure_ascii=False)

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        md = directory / f"privacy-audit-{self.mode}.md"
        js = directory / f"privacy-audit-{self.mode}.json"
        md.write_text(f"# Empirical privacy audit ({self.mode}, noise seed {self.seed})\n\n"
                      "Per case: the worst of its tests (largest ε_lb); each one-sided Clopper–Pearson bound at "
                      "α/(2·tests), family-wise α per case as given in the JSON. PASS iff no ε_lb exceeds the "
                      "claimed ε; a negative control must FAIL.\n\n" + self.markdown(), encoding="utf-8")
        js.write_text(self.to_json(), encoding="utf-8")
        return [md, js]
