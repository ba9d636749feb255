"""Both yardsticks for any sequence release, with the raw side computed once.

* the prefix-tree paper's (KDD 2012 §3.3, :mod:`transit_release.utility.sequences`):
  set-containment count queries in subsets up to ``i·h/4`` locations, and the
  top-k PrefixSpan patterns of size > 1 — keys ``count_query.relative_error.max_q*``
  and ``patterns.top*.{tp,fp,fd}``;
* the n-gram thesis's (§6.4.3, :mod:`transit_release.utility.ngrams`):
  contiguous-occurrence count queries in five subsets up to 4 … 20 locations,
  and the top-K grams of size > 1 by occurrences — keys
  ``gram_query.relative_error.max_q*`` and ``grams.top*.{tp,loss}``.

Every query of every workload is evaluated exactly (no sampling): the answers
are array work over the distinct sequences with their multiplicities. A
release is a list of ``(sequence, copies)``; it is never expanded except for
the bitsets of the set-containment queries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.utility import ngrams
from transit_release.utility.sequences import (WeightedSequences, containment_counts, query_workload, relative_errors,
                                               top_k_subsequence_patterns)


@dataclass
class SequenceUtility:
    """The raw side of both workloads for one data set; :meth:`evaluate` scores a release against it.

    ``timings`` holds the seconds of each part, raw side (``raw.*``) and last release (``release.*``).
    """

    original: Sequences
    height: int = 12  # the prefix-tree workload's query sizes: up to i·height/4
    n_queries: int = 40_000
    top_k: tuple[int, ...] = (100, 200, 300)
    gram_max_sizes: tuple[int, ...] = ngrams.MAX_SIZES
    gram_queries: int = ngrams.QUERIES_PER_SUBSET
    gram_top_k: tuple[int, ...] = ngrams.TOP_K
    seed: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clock = _Clock(self.timings, "raw")
        L = self.original.n_locations
        self._n = len(self.original)
        self._weighted = WeightedSequences.of(self.original)
        clock("distinct_sequences")
        self._workload = query_workload(L, self.height, self.n_queries, seed=self.seed) if self.n_queries else None
        self._truth_counts = (containment_counts(self._weighted, sum(self._workload.subsets, []))
                              if self._workload else None)
        clock("count_queries")
        self._truth_patterns = ([p for p, _ in top_k_subsequence_patterns(self._weighted, max(self.top_k))]
                                if self.top_k else [])
        clock("patterns")
        self._grams = (ngrams.gram_workload(L, self.gram_max_sizes, self.gram_queries, seed=self.seed)
                       if self.gram_queries else None)
        if self._grams:
            self._all_grams = ngrams.concat_sequences(self._grams.subsets)
            self._truth_grams = ngrams.occurrence_counts(self._weighted, self._all_grams)
        clock("gram_queries")
        self._truth_top = ngrams.top_k_grams(self._weighted, max(self.gram_top_k)) if self.gram_top_k else []
        clock("grams")

    def evaluate(self, release: list[tuple[tuple[int, ...], int]]) -> dict[str, float]:
        clock = _Clock(self.timings, "release")
        L = self.original.n_locations
        released = WeightedSequences.from_release(release, L)
        out = {"sequences.input": float(self._n), "sequences.released": float(released.total),
               "prefixes.released": float(len(release))}
        clock("distinct_sequences")
        if self._workload:
            got = containment_counts(released, sum(self._workload.subsets, []))
            err = relative_errors(self._truth_counts, got, self._n)
            lo = 0
            for size, qs in zip(self._workload.max_sizes, self._workload.subsets):
                out[f"count_query.relative_error.max_q{size}"] = float(err[lo:lo + len(qs)].mean())
                lo += len(qs)
        clock("count_queries")
        if self.top_k:
            found_all = [p for p, _ in top_k_subsequence_patterns(released, max(self.top_k))]
            for k in self.top_k:
                truth, found = set(self._truth_patterns[:k]), set(found_all[:k])
                out[f"patterns.top{k}.tp"] = float(len(truth & found))
                out[f"patterns.top{k}.fp"] = float(len(found - truth))
                out[f"patterns.top{k}.fd"] = float(len(truth - found))
        clock("patterns")
        if self._grams:
            err = ngrams.relative_errors(self._truth_grams, ngrams.occurrence_counts(released, self._all_grams),
                                         self._n)
            lo = 0
            for size, qs in zip(self._grams.max_sizes, self._grams.subsets):
                out[f"gram_query.relative_error.max_q{size}"] = float(err[lo:lo + len(qs)].mean())
                lo += len(qs)
        clock("gram_queries")
        if self.gram_top_k:
            found = ngrams.top_k_grams(released, max(self.gram_top_k))
            for k in self.gram_top_k:
                t, f = dict(self._truth_top[:k]), dict(found[:k])
                out[f"grams.top{k}.tp"] = float(len(t.keys() & f.keys()))
                out[f"grams.top{k}.loss"] = float(np.mean([abs(s - f.get(g, 0)) / s for g, s in t.items()])) \
                    if t else 0.0
        clock("grams")
        return out


class _Clock:
    """Writes the seconds since the last call under ``prefix.name`` (and the running ``prefix.total``)."""

    def __init__(self, into: dict[str, float], prefix: str):
        self.into, self.prefix = into, prefix
        self.start = self.last = time.perf_counter()
        for key in [k for k in into if k.startswith(prefix + ".")]:
            del into[key]

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.into[f"{self.prefix}.{name}"] = now - self.last
        self.into[f"{self.prefix}.total"] = now - self.start
        self.last = now
