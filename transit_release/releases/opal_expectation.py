"""What an Opal release can be expected to publish, said to the custodian before the charge (the dry run and the
release itself).

* Public, from the configuration alone: per marginal, the threshold ``T`` a noisy count must reach, the bound ``A``
  of the noise (card level), how likely a cell of true count ``T`` is published and the 95% margin of error ``± h``
  of a published count: the very figures the manifest, the data card and ``uncertainty.csv`` will state (they are
  computed by the same functions).
* Internal, from the true counts (the histograms the noise would be added to, after contribution bounding):
  per published file, how many cells there are, how many the true counts put at or over ``T``, how many at or over
  ``T + A`` (published whatever the noise), and how many the release can be expected to publish, ``Σ P(c + Z ≥ T)``
  over the cells (exactly, from the public noise distribution). These are figures of the data: they are said on
  the custodian's terminal only (:mod:`transit_release.runtime.custodian`) and never written to a file, a log, MLflow or
  Prefect.

Prefect-free; reads nothing but what it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from transit_release import analysis
from transit_release.config import MARGINALS, ReleaseConfig
from transit_release.preprocessing import PartitionHistograms


@dataclass(frozen=True)
class MarginalRule:
    """What decides whether a cell of one marginal is published: public parameters only."""

    j: int
    name: str
    file: str  # the published file, e.g. ``time.csv``
    tap: str
    epsilon: float
    noise_scale: str
    threshold: int
    noise_bound: int | None  # card level: the noise never exceeds it either way
    half_width: int  # 95% margin of error of one published count
    at_threshold: float  # P(published) of a cell whose true count is T


@dataclass(frozen=True)
class FileCells:
    """Internal: the cells of one published file's marginals (both taps, every partition) by their true counts."""

    file: str
    cells: int  # combinations present in the data (true count ≥ 1): the only candidates for publication
    at_threshold: int  # true count ≥ T
    certain: int | None  # true count ≥ T + A: published whatever the noise (card level)
    expected: float  # Σ P(c + Z ≥ T): the number of rows the file can be expected to hold


@dataclass(frozen=True)
class Expectation:
    """What a release can be expected to publish: its public rules and, for the custodian only, its cells."""

    release_id: str
    rules: tuple[MarginalRule, ...]
    cells: tuple[FileCells, ...] | None = None  # internal; None when nobody is there to read it


def public_rules(config: ReleaseConfig) -> tuple[MarginalRule, ...]:
    """Each marginal's threshold, noise bound and margin of error, as the manifest and ``uncertainty.csv`` state
    them (:func:`~transit_release.releases.opal.privacy_statement`, :func:`~transit_release.opendata.uncertainty.
    uncertainty_rows`), in j order."""
    from transit_release.opendata.uncertainty import uncertainty_rows
    from transit_release.releases.opal import privacy_statement

    p = privacy_statement(config)
    margins = {r["count_of"]: r["half_width_95"] for r in uncertainty_rows({"privacy": p})}
    rules = []
    for m in MARGINALS:
        s = p["marginals"][m.name]
        h = int(margins[f"{m.name} (j = {m.j})"])
        law = analysis.NoiseLaw.of(s["noise_scale"], s.get("noise_bound"))
        rules.append(MarginalRule(m.j, m.name, f"{m.output}.csv", m.tap, s["epsilon"], s["noise_scale"],
                                  int(s["threshold"]), s.get("noise_bound"), h,
                                  analysis.near_threshold(law, int(s["threshold"]), int(s["threshold"]), h).published))
    return tuple(rules)


def _published_probability(law: analysis.NoiseLaw, threshold: int, counts: np.ndarray) -> np.ndarray:
    """``P(c + Z ≥ T)`` for each true count ``c``, exactly from the noise's distribution."""
    low, p = law.pmf()
    at_least = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])  # at_least[i] = P(Z ≥ low + i)
    i = np.clip(threshold - counts - low, 0, p.size)
    return at_least[i]


def count_cells(histograms: Iterable[PartitionHistograms], config: ReleaseConfig) -> tuple[FileCells, ...]:
    """Internal figures of the true counts the noise would be added to, per published file (see the module's
    docstring). ``histograms``: every partition of the release's domain (a partition nobody rode in adds none)."""
    rules = {r.name: r for r in public_rules(config)}
    laws = {name: analysis.NoiseLaw.of(r.noise_scale, r.noise_bound) for name, r in rules.items()}
    totals: dict[str, list] = {}
    for ph in histograms:
        for m in MARGINALS:
            r = rules[m.name]
            counts = ph.histograms[m.name].counts.astype(np.int64)
            t = totals.setdefault(r.file, [0, 0, 0 if r.noise_bound is not None else None, 0.0])
            t[0] += int(counts.size)
            t[1] += int((counts >= r.threshold).sum())
            if r.noise_bound is not None:
                t[2] += int((counts >= r.threshold + r.noise_bound).sum())
            if counts.size:
                values, n = np.unique(counts, return_counts=True)
                t[3] += float((_published_probability(laws[m.name], r.threshold, values) * n).sum())
    order = list(dict.fromkeys(r.file for r in rules.values()))
    return tuple(FileCells(f, *totals[f]) for f in order if f in totals)
