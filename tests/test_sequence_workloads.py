"""Both sequence-utility workloads, vectorised (issue 15, utility part): equal to direct counts and to PrefixSpan."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.utility.ngrams import (gram_count_query_error, gram_pattern_utility, gram_workload,
                                            occurrence_counts, top_k_grams)
from transit_release.utility import sequences as sequences_module
from transit_release.utility.sequence_evaluation import SequenceUtility
from transit_release.utility.sequences import (WeightedSequences, containment_counts, count_queries,
                                               location_bitsets, top_k_subsequence_patterns)

TABLE_6_2 = [(1, 2, 0), (1, 2), (2, 1), (1, 2, 0), (2, 1, 0), (1, 2, 0, 1, 2), (2, 1), (2, 0, 1, 2)]

sequences = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=8).map(tuple), min_size=1, max_size=60)


def _occurrences(q, s):
    return sum(tuple(s[i:i + len(q)]) == tuple(q) for i in range(len(s) - len(q) + 1))


def test_weighted_sequences_round_trip():
    data = Sequences.from_lists([(1, 2), (3,), (1, 2), (), (2, 1, 1)], 4)
    w = WeightedSequences.of(data)
    assert sorted(w.expand().to_lists()) == sorted(data.to_lists()) and w.total == 5
    r = WeightedSequences.from_release([((1, 2), 2), ((3,), 0), ((0,), 1)], 4)
    assert r.expand().to_lists() == [(1, 2), (1, 2), (0,)]


@settings(max_examples=80, deadline=None)
@given(data=sequences, queries=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1,
                                        max_size=20))
def test_occurrence_counts_equal_a_direct_count(data, queries):
    got = occurrence_counts(Sequences.from_lists(data, 4), Sequences.from_lists(queries, 4))
    assert got.tolist() == [sum(_occurrences(q, s) for s in data) for q in queries]


@settings(max_examples=80, deadline=None)
@given(data=sequences, queries=st.lists(st.sets(st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=20),
       copies=st.integers(1, 3))
def test_containment_counts_equal_the_bitset_count(data, queries, copies):
    queries = [np.array(sorted(q)) for q in queries]
    seqs = Sequences.from_lists(data, 4)
    want = count_queries(location_bitsets(seqs), queries)
    assert containment_counts(seqs, queries).tolist() == want.tolist()
    weighted = WeightedSequences.of(seqs, np.full(len(seqs), copies))
    assert containment_counts(weighted, queries).tolist() == (copies * want).tolist()
    chunk = sequences_module._CHUNK_PAIRS
    try:  # the same in many small chunks of sets
        sequences_module._CHUNK_PAIRS = 5
        assert containment_counts(seqs, queries).tolist() == want.tolist()
    finally:
        sequences_module._CHUNK_PAIRS = chunk


def test_occurrences_count_with_multiplicity_as_in_the_thesis():
    got = occurrence_counts(Sequences.from_lists(TABLE_6_2, 3), Sequences.from_lists([(1, 2), (0,), (2, 0, 1, 2)], 3))
    assert got.tolist() == [6, 5, 2]  # L2 L3 occurs 6 times in 5 records; L3 L1 L2 L3 twice (§6.2.3)


@settings(max_examples=80, deadline=None)
@given(data=sequences, k=st.integers(1, 15))
def test_top_k_grams_equal_a_direct_count(data, k):
    counts = collections.Counter(s[i:j] for s in data for i in range(len(s)) for j in range(i + 2, len(s) + 1))
    want = sorted(counts.items(), key=lambda t: (-t[1], t[0]))[:k]
    assert top_k_grams(Sequences.from_lists(data, 4), k) == want


@settings(max_examples=80, deadline=None)
@given(data=sequences, k=st.integers(1, 25))
def test_top_k_patterns_equal_the_prefixspan_package(data, k):
    """The vectorised miner against the maintained PrefixSpan implementation (support = sequences)."""
    from prefixspan import PrefixSpan

    mine = top_k_subsequence_patterns(Sequences.from_lists(data, 4), k)
    ps = PrefixSpan([list(s) for s in data])
    ps.minlen = 2
    every = {tuple(p): s for s, p in ps.frequent(1)}
    want = sorted(every.items(), key=lambda t: (-t[1], t[0]))[:k]
    assert mine == want


def test_gram_workload_shape_and_sanity_bound():
    wl = gram_workload(68, per_subset=500, seed=2)
    assert wl.max_sizes == (4, 8, 12, 16, 20) and all(len(q) == 500 for q in wl.subsets)
    for top, q in zip(wl.max_sizes, wl.subsets):
        assert q.lengths.min() >= 1 and q.lengths.max() <= top and q.locations.max() < 68
    data = Sequences.from_lists([(0, 1)] * 2000, 68)
    half = Sequences.from_lists([(0, 1)] * 1000, 68)
    err = gram_count_query_error(data, half, gram_workload(68, max_sizes=(1,), per_subset=68 * 4, seed=0))
    # unigram queries: 0 and 1 have error 1000/2000, the others 0 (true 0, bound s = 2 sequences)
    assert err["max_q1"] == pytest.approx(np.mean([0.5 if x in (0, 1) else 0.0 for x in
                                                   gram_workload(68, (1,), 68 * 4, 0).subsets[0].locations]))


def test_both_workloads_on_a_perfect_and_an_empty_release():
    rng = np.random.default_rng(0)
    data = [tuple(rng.integers(0, 10, rng.integers(1, 7)).tolist()) for _ in range(3000)]
    seqs = Sequences.from_lists(data, 10)
    u = SequenceUtility(seqs, height=8, n_queries=400, top_k=(10, 20), gram_queries=200, gram_top_k=(10, 20))
    perfect = sorted(collections.Counter(data).items())
    got = u.evaluate(perfect)
    assert got["sequences.input"] == got["sequences.released"] == 3000
    assert all(got[f"count_query.relative_error.max_q{q}"] == 0 for q in (2, 4, 6, 8))
    assert all(got[f"gram_query.relative_error.max_q{q}"] == 0 for q in (4, 8, 12, 16, 20))
    assert got["patterns.top20.tp"] == 20 and got["patterns.top20.fp"] == 0
    assert got["grams.top20.tp"] == 20 and got["grams.top20.loss"] == 0
    empty = u.evaluate([])
    assert empty["grams.top10.tp"] == 0 and empty["grams.top10.loss"] == 1
    assert gram_pattern_utility(seqs, seqs, ks=(5,)) == {"top5.tp": 5.0, "top5.loss": 0.0}
