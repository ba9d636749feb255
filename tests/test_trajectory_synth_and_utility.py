"""Synthetic week trajectories and the trajectory utility metrics (issue 16)."""

from __future__ import annotations

import numpy as np

from transit_release.mechanisms.safepath import Trajectories
from transit_release.synth.trajectories import (build_bus_network, synthesize_bus_trajectories,
                                                synthesize_metro_trajectories)
from transit_release.utility.trajectories import (TrajectoryIndex, count_query_error, nonempty_workload,
                                                  relative_errors, release_index, top_pair_utility, top_pairs,
                                                  trajectory_pattern_utility, uniform_workload)


def test_synthetic_metro_week_shape():
    t, metro = synthesize_metro_trajectories(100_000, seed=1)
    assert len(t) == 100_000 and t.n_locations == 68 == metro.n_stations and t.n_hours == 168
    lengths = t.lengths
    assert 3.0 < lengths.mean() < 3.6 and lengths.min() >= 1 and lengths.max() <= 90
    assert t.monotone_lengths().tolist() == lengths.tolist()  # hours never decrease
    hour_of_day = np.bincount(t.hours % 24, minlength=24)
    assert hour_of_day[7:9].sum() > 5 * hour_of_day[2:4].sum() + 1 and hour_of_day[17] > hour_of_day[14]
    per_day = np.bincount(t.hours // 24, minlength=7)
    assert per_day[5:].max() < per_day[:5].min()  # fewer taps at the weekend
    a, _ = synthesize_metro_trajectories(1000, seed=2)
    b, _ = synthesize_metro_trajectories(1000, seed=2)
    assert a.to_lists() == b.to_lists()


def test_synthetic_bus_week_shape():
    t, net = synthesize_bus_trajectories(50_000, seed=1)
    assert t.n_locations == 893 == net.n_stops and 4.3 < t.lengths.mean() < 5.1 and t.lengths.max() <= 121
    assert net.taxonomy.height == 2 and net.taxonomy.n_nodes(2) == net.route_of.max() + 1
    assert build_bus_network().hubs.size == 29


def _contains(traj, q):
    i = 0
    for p in traj:
        if i < len(q) and p == q[i]:
            i += 1
    return i == len(q)


def test_sub_trajectory_counts_match_a_direct_count():
    rng = np.random.default_rng(0)
    raw = [list(zip(rng.integers(0, 4, k).tolist(), np.sort(rng.integers(0, 5, k)).tolist()))
           for k in rng.integers(1, 7, 2000)]
    t = Trajectories.from_lists(raw, 4, 5)
    w = rng.integers(1, 4, len(raw))
    idx = TrajectoryIndex(t, w)
    plain = TrajectoryIndex(t)
    for _ in range(300):
        k = int(rng.integers(1, 4))
        q = list(zip(rng.integers(0, 4, k).tolist(), np.sort(rng.integers(0, 5, k)).tolist()))
        ids = np.array([a * 5 + b for a, b in q])
        hits = [_contains(x, q) for x in raw]
        assert plain.count(ids) == sum(hits)
        assert idx.count(ids) == int(np.sum(w[np.array(hits)]))
    # a batch of one-pair queries (looked up at once) and of longer ones: each as its own count
    for index in (idx, plain):
        for k in (1, 2, 3):
            batch = [np.array(p) for p in rng.integers(0, 20, (50, k)).tolist()]
            assert index.counts(batch).tolist() == [index.count(q) for q in batch]
    assert plain.counts([np.array([p]) for p in range(20)]).tolist() == [
        sum(any(a * 5 + b == p for a, b in x) for x in raw) for p in range(20)]


def test_workloads():
    t, _ = synthesize_metro_trajectories(20_000, seed=3)
    u = uniform_workload(68, 168, 4, 4000, seed=1)
    assert sorted(u.by_length) == [1, 2, 3, 4] and all(len(v) == 1000 for v in u.by_length.values())
    for k, qs in u.by_length.items():
        hours = np.array(qs) % 168
        assert np.all(np.diff(hours, axis=1) >= 0) and np.array(qs).shape[1] == k
    n = nonempty_workload(t, 3, 900, seed=2)
    idx = TrajectoryIndex(t)
    assert all(idx.counts(qs).min() >= 1 for qs in n.by_length.values())
    err = count_query_error(t, idx, n, idx)
    assert err["non-empty.mean"] == 0.0 and set(err) == {"non-empty.q1", "non-empty.q2", "non-empty.q3",
                                                         "non-empty.mean"}


def test_relative_error_uses_the_sanity_bound():
    e = relative_errors(np.array([0, 10, 1000]), np.array([5, 20, 900]), 10_000)  # bound 10
    assert e.tolist() == [0.5, 1.0, 0.1]


def test_top_pairs_and_patterns_against_brute_force():
    raw = [[(0, 1), (1, 2), (0, 3)]] * 5 + [[(1, 2), (1, 2)]] * 3 + [[(2, 0)]] * 4
    raw += [[(0, 1), (2, 0)], [(0, 1), (1, 2)]]
    t = Trajectories.from_lists(raw, 3, 4)
    support = {}
    for traj in raw:
        for p in set(traj):
            support[p[0] * 4 + p[1]] = support.get(p[0] * 4 + p[1], 0) + 1
    best = sorted(support, key=lambda p: (-support[p], p))
    assert top_pairs(t, 2) == set(best[:2]) == {1 * 4 + 2, 0 * 4 + 1}  # 9 and 7 trajectories
    release = [(((0, 1), (1, 2)), 6), (((2, 0),), 1)]
    got = top_pair_utility(t, release, ks=(2,))
    assert got == {"pairs.top2.tp": 2, "pairs.top2.fp": 0}
    idx = release_index(release, 3, 4)
    assert idx.count(np.array([1, 6])) == 6
    pats = trajectory_pattern_utility(t, Trajectories.from_lists([list(x) for x, c in release for _ in range(c)], 3, 4),
                                      ks=(1,))
    assert pats == {"patterns.top1.tp": 1, "patterns.top1.fp": 0, "patterns.top1.fd": 0}  # (0,1)→(1,2)


def test_ordered_pairs_and_share_released_against_brute_force():
    from itertools import combinations

    from transit_release.utility.trajectories import share_released, top_ordered_pairs

    rng = np.random.default_rng(3)
    raw = [tuple(zip(rng.integers(0, 3, k).tolist(), np.sort(rng.integers(0, 4, k)).tolist()))
           for k in rng.integers(1, 6, 1500)]
    t = Trajectories.from_lists([list(x) for x in raw], 3, 4)
    support: dict = {}
    for x in raw:  # each ordered pair of points (a before b) once per trajectory
        for a, b in {(a[0] * 4 + a[1], b[0] * 4 + b[1]) for a, b in combinations(x, 2)}:
            support[(a, b)] = support.get((a, b), 0) + 1
    expected = sorted(support.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
    pairs, counts = top_ordered_pairs(t, 20)
    assert [((int(a), int(b)), int(c)) for (a, b), c in zip(pairs, counts)] == expected
    release = [(x, int(c)) for x, c in zip(raw[:40], rng.integers(0, 3, 40))] + [(((0, 0),) * 7, 2)]
    kept = {x for x, c in release if c > 0}
    assert share_released(t, release) == sum(x in kept for x in raw) / len(raw)
    assert share_released(t, [(raw[0], 0)]) == 0.0
