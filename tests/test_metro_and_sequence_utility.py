"""Synthetic metro and the sequence utility metrics (issue 5, first part)."""

from __future__ import annotations

import numpy as np
import pytest

from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.synth.metro import INTERCHANGES, build_metro, synthesize_metro
from transit_release.utility.sequences import (count_queries, expand_release, location_bitsets, pattern_utility,
                                               query_workload, relative_errors, top_k_patterns)


def test_metro_has_68_stations_on_4_lines_with_interchanges():
    m = build_metro()
    assert m.n_stations == 68 and len(m.lines) == 4
    assert [len(v) for v in m.slots.values()] == [27, 31, 3, 12]
    berri = m.names.index("Berri-UQAM")
    assert sum(berri in ids for ids in m.slots.values()) == 3
    assert m.taxonomy.n_groups == 4 and m.taxonomy.fanout == 17
    assert m.interchange(m.slots["green"][0], m.slots["orange"][0]) in {m.names.index(k) for k in INTERCHANGES}
    assert m.interchange(m.slots["green"][0], m.slots["green"][3]) is None


def test_synthetic_metro_shape():
    seqs, m = synthesize_metro(200_000, seed=1)
    lengths = seqs.lengths
    assert len(seqs) == 200_000
    assert 3.9 < lengths.mean() < 4.5
    assert lengths.max() >= 80 and lengths.max() <= 90 and lengths.min() >= 1
    assert seqs.locations.max() < 68
    a, _ = synthesize_metro(1000, seed=2)
    b, _ = synthesize_metro(1000, seed=2)
    assert a.to_lists() == b.to_lists()


def test_count_queries_match_a_direct_count():
    rng = np.random.default_rng(0)
    raw = [tuple(rng.integers(0, 10, rng.integers(1, 6)).tolist()) for _ in range(3000)]
    seqs = Sequences.from_lists(raw, 10)
    queries = [np.array(q) for q in ([1], [1, 2], [3, 4, 5], [9, 0])]
    got = count_queries(location_bitsets(seqs), queries)
    want = [sum(set(q.tolist()) <= set(s) for s in raw) for q in queries]
    assert got.tolist() == want


def test_workload_and_relative_error_with_sanity_bound():
    wl = query_workload(68, 12, n_queries=400, n_subsets=4, seed=3)
    assert wl.max_sizes == [3, 6, 9, 12]
    for top, qs in zip(wl.max_sizes, wl.subsets):
        assert len(qs) == 100 and all(1 <= len(q) <= top and len(set(q.tolist())) == len(q) for q in qs)
    err = relative_errors(np.array([0, 100, 2000]), np.array([5, 110, 2000]), n_sequences=100_000)
    assert err.tolist() == [5 / 100, 10 / 100, 0.0]  # sanity bound 0.1% of |D| = 100


def test_top_k_patterns_tp_fp_fd():
    data = Sequences.from_lists([(1, 2)] * 50 + [(3, 4)] * 40 + [(5, 6)] * 30 + [(7, 0)] * 5 + [(1,)] * 9, 8)
    assert top_k_patterns(data, 3) == {(1, 2), (3, 4), (5, 6)}  # size > 1 only
    assert pattern_utility(data, data, ks=(3,)) == {"top3.tp": 3, "top3.fp": 0, "top3.fd": 0}
    other = Sequences.from_lists([(7, 0)] * 60 + [(1, 2)] * 50 + [(3, 4)] * 45 + [(5, 6)] * 2, 8)
    assert pattern_utility(data, other, ks=(3,)) == {"top3.tp": 2, "top3.fp": 1, "top3.fd": 1}


def test_expand_release():
    s = expand_release([((1, 2), 2), ((3,), 1)], 4)
    assert s.to_lists() == [(1, 2), (1, 2), (3,)]


@pytest.mark.slow
def test_hybrid_runs_on_the_synthetic_metro():
    from transit_release.mechanisms.prefix_tree import sanitize_sequences
    from transit_release.noise import NoiseSource

    seqs, m = synthesize_metro(100_000, seed=4)
    tree, release = sanitize_sequences(seqs, 1.0, 12, "hybrid", m.taxonomy, NoiseSource(seed=4).stream("metro"))
    released = expand_release(release, seqs.n_locations)
    assert abs(len(released) - len(seqs)) < 0.05 * len(seqs)
