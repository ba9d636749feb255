"""Synthetic passenger trajectories over one week: (station, hour of the week) pairs.

Two networks shaped like the STM data of the SafePath paper (Table 2):

* :func:`synthesize_metro_trajectories`: the synthetic metro of
  :mod:`transit_release.synth.metro` (68 stations on 4 lines), about 850,000
  passengers, average length ≈ 3.2, at most 90 taps;
* :func:`synthesize_bus_trajectories`: a bus-like network of 893 stops on
  routes, about 773,000 passengers, average length ≈ 4.7 (more transfer taps),
  at most 121 taps.

Hours are hours of the week, 0–167 from Monday 00:00. Each passenger has a
home and a work station (Zipf weights over the stations ranked by centrality:
homes spread out, work places central) and a kind:

* *commuters* (35%): on each weekday with probability 0.5 (metro; 0.56 on the
  bus network; at least one day), a
  tap at home in the morning peak (about 07:45 ± 55 min) and, with probability
  0.65, the evening return from work (about 17:15 ± 75 min); one active day in
  ten ends with an evening outing tapped elsewhere (20:00–23:00); a weekend
  day with probability 0.35;
* *occasional* riders (50%): one to six trips over the week, weekdays more
  likely than weekends, at any time of day (morning peak, midday, evening
  peak), from their home station, with a return tap elsewhere in 40% of trips;
* *weekend* riders (14.8%): one weekend day out, a tap at home around midday
  and a return from a central station in the afternoon or evening;
* *heavy* users (0.2%): 20 to the maximum taps, spread over the week among
  three favourite stations.

On the bus network a tap is followed, with probability ``transfer`` (0.35),
by a transfer tap at a hub stop 10–30 minutes later. Taps of one passenger are
ordered by time (ties by station), so hours never decrease. Randomness is
NumPy's PCG64: synthetic data is not a privacy mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.safepath import HOURS_PER_WEEK, Hierarchy, Trajectories
from transit_release.synth.metro import INTERCHANGES, Metro, build_metro

MINUTES_PER_DAY = 1440
KINDS = ("commuter", "occasional", "weekend", "heavy")
KIND_SHARES = (0.35, 0.5, 0.148, 0.002)


@dataclass(frozen=True)
class BusNetwork:
    """Stops on routes: stop id → route (the public location → group → corridor taxonomy)."""

    n_stops: int
    route_of: np.ndarray  # stop -> route
    corridor_of: np.ndarray  # stop -> corridor (8 routes each)
    hubs: np.ndarray  # stop ids of the transfer hubs

    @property
    def taxonomy(self) -> Hierarchy:
        """Stops → routes → corridors (height 2)."""
        return Hierarchy.from_labels([self.corridor_of, self.route_of], "location")


def metro_centrality_rank(metro: Metro) -> np.ndarray:
    """Rank 1..n of each station by centrality (middle of its lines, interchanges ×3), as in ``synthesize_metro``."""
    n = metro.n_stations
    centrality = np.zeros(n)
    for ids in metro.slots.values():
        pos = np.arange(len(ids))
        centrality[ids] += 1.0 / (1.0 + np.abs(pos - len(ids) / 2))
    centrality[[metro.names.index(k) for k in INTERCHANGES]] *= 3.0
    rank = np.empty(n)
    rank[np.argsort(-centrality, kind="stable")] = np.arange(1, n + 1)
    return rank


def metro_location_table(metro: Metro, stations_per_group: int = 4):
    """The metro's public location taxonomy as a table ``location,group,line`` (stations → groups → lines):
    each line's stations (an interchange on its owning line) in blocks of ``stations_per_group`` along the line."""
    import pandas as pd

    group = np.empty(metro.n_stations, dtype=object)
    for line in metro.lines:
        own = [s for s in metro.slots[line] if metro.lines[metro.line_of[s]] == line]
        for i, s in enumerate(own):
            group[s] = f"{line}-{i // stations_per_group + 1}"
    return pd.DataFrame({"location": [str(i) for i in range(metro.n_stations)], "group": group,
                         "line": [metro.lines[g] for g in metro.line_of]})


def build_bus_network(n_stops: int = 893, stops_per_route: int = 15, seed: int = 0) -> BusNetwork:
    rng = np.random.default_rng(seed)
    route_of = np.arange(n_stops) // stops_per_route
    corridor_of = route_of // 8
    hubs = np.sort(rng.choice(n_stops, size=max(1, n_stops // 30), replace=False))
    return BusNetwork(n_stops, route_of.astype(np.int64), corridor_of.astype(np.int64), hubs)


def _clipped_normal(rng, mean, sd, lo, hi, size):
    return np.clip(rng.normal(mean, sd, size), lo, hi)


def _week(rng: np.random.Generator, n: int, home_w: np.ndarray, work_w: np.ndarray, max_length: int,
          hubs: np.ndarray | None = None, transfer: float = 0.0, weekday_active: float = 0.5) -> Trajectories:
    """The behaviour model of the module docstring, vectorised over passengers."""
    n_loc = home_w.size
    home_p, work_p = home_w / home_w.sum(), work_w / work_w.sum()
    other_p = (home_p + work_p) / 2
    kind = rng.choice(len(KINDS), n, p=KIND_SHARES)
    home = rng.choice(n_loc, n, p=home_p)
    work = rng.choice(n_loc, n, p=work_p)
    pid, minute, loc = [], [], []

    def add(p, m, s):
        pid.append(np.asarray(p, dtype=np.int64))
        minute.append(np.clip(np.asarray(m), 0, HOURS_PER_WEEK * 60 - 1).astype(np.int64))
        loc.append(np.asarray(s, dtype=np.int64))

    # commuters: weekday peaks and evening returns
    c = np.flatnonzero(kind == 0)
    active = rng.random((c.size, 5)) < weekday_active
    none = ~active.any(axis=1)
    active[np.flatnonzero(none), rng.integers(0, 5, int(none.sum()))] = True
    who, day = np.nonzero(active)
    p = c[who]
    base = day * MINUTES_PER_DAY
    add(p, base + _clipped_normal(rng, 7.75 * 60, 55, 5 * 60, 11 * 60, p.size), home[p])
    back = rng.random(p.size) < 0.65
    add(p[back], base[back] + _clipped_normal(rng, 17.25 * 60, 75, 13 * 60, 22 * 60, int(back.sum())), work[p[back]])
    out = rng.random(p.size) < 0.1
    add(p[out], base[out] + rng.uniform(20 * 60, 23 * 60, int(out.sum())), rng.choice(n_loc, int(out.sum()), p=other_p))
    # weekend days (commuters sometimes, weekend riders always): out around midday, back later from the centre
    wk = np.concatenate([c[rng.random(c.size) < 0.35], np.flatnonzero(kind == 2)])
    day = rng.integers(5, 7, wk.size)
    leave = _clipped_normal(rng, 12.5 * 60, 150, 8 * 60, 20 * 60, wk.size)
    add(wk, day * MINUTES_PER_DAY + leave, home[wk])
    ret = rng.random(wk.size) < 0.7
    r_at = np.minimum(leave[ret] + _clipped_normal(rng, 240, 90, 30, 600, int(ret.sum())), MINUTES_PER_DAY - 1)
    add(wk[ret], day[ret] * MINUTES_PER_DAY + r_at, rng.choice(n_loc, int(ret.sum()), p=work_p))
    # occasional riders: a few trips at any time of the week
    o = np.flatnonzero(kind == 1)
    trips = np.minimum(rng.geometric(0.6, o.size), 6)
    p = np.repeat(o, trips)
    day = rng.choice(7, p.size, p=[0.16] * 5 + [0.1, 0.1])
    part = rng.choice(3, p.size, p=[0.3, 0.4, 0.3])
    at = np.choose(part, [_clipped_normal(rng, 8 * 60, 70, 5 * 60, 11 * 60, p.size),
                          rng.uniform(10 * 60, 16 * 60, p.size),
                          _clipped_normal(rng, 17.5 * 60, 90, 14 * 60, 23.9 * 60, p.size)])
    add(p, day * MINUTES_PER_DAY + at, home[p])
    ret = rng.random(p.size) < 0.4
    r_at = np.minimum(at[ret] + _clipped_normal(rng, 180, 90, 20, 480, int(ret.sum())), MINUTES_PER_DAY - 1)
    add(p[ret], day[ret] * MINUTES_PER_DAY + r_at, rng.choice(n_loc, int(ret.sum()), p=other_p))
    # heavy users: many taps among three favourite stations
    hv = np.flatnonzero(kind == 3)
    k = rng.integers(20, max_length + 1, hv.size)
    p = np.repeat(hv, k)
    fav = np.stack([home[hv], work[hv], rng.choice(n_loc, hv.size, p=other_p)], axis=1)
    add(p, rng.integers(0, 7, p.size) * MINUTES_PER_DAY + rng.uniform(6 * 60, 23.9 * 60, p.size),
        fav[np.repeat(np.arange(hv.size), k), rng.integers(0, 3, p.size)])
    pid_a, minute_a, loc_a = np.concatenate(pid), np.concatenate(minute), np.concatenate(loc)
    if hubs is not None and transfer > 0:
        t = rng.random(pid_a.size) < transfer
        pid_a = np.concatenate([pid_a, pid_a[t]])
        loc_a = np.concatenate([loc_a, rng.choice(hubs, int(t.sum()))])
        minute_a = np.concatenate([minute_a, np.minimum(minute_a[t] + rng.integers(10, 31, int(t.sum())),
                                                        HOURS_PER_WEEK * 60 - 1)])
    order = np.lexsort((loc_a, minute_a, pid_a))
    pid_a, minute_a, loc_a = pid_a[order], minute_a[order], loc_a[order]
    # at most ``max_length`` taps per passenger (the first ones)
    counts = np.bincount(pid_a, minlength=n)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    keep = (np.arange(pid_a.size) - start[pid_a]) < max_length
    pid_a, minute_a, loc_a = pid_a[keep], minute_a[keep], loc_a[keep]
    lengths = np.bincount(pid_a, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Trajectories(loc_a, minute_a // 60, offsets, n_loc, HOURS_PER_WEEK)


def synthesize_metro_trajectories(n_passengers: int = 850_000, seed: int = 0, *, home_zipf: float = 0.9,
                                  work_zipf: float = 1.3, max_length: int = 90) -> tuple[Trajectories, Metro]:
    """``n_passengers`` week trajectories over the synthetic metro's 68 stations (one per passenger)."""
    metro = build_metro()
    rng = np.random.default_rng(seed)
    rank = metro_centrality_rank(metro)
    home_w = rng.permutation(1.0 / rank ** home_zipf)
    work_w = 1.0 / rank ** work_zipf
    return _week(rng, n_passengers, home_w, work_w, max_length), metro


def synthesize_bus_trajectories(n_passengers: int = 773_000, n_stops: int = 893, seed: int = 0, *,
                                transfer: float = 0.35, max_length: int = 121) -> tuple[Trajectories, BusNetwork]:
    """``n_passengers`` week trajectories over a bus-like network of ``n_stops`` stops on routes."""
    net = build_bus_network(n_stops, seed=seed)
    rng = np.random.default_rng(seed + 1)
    # centrality: stops in the middle of their route, hubs ×5; Zipf over the ranks
    pos = np.arange(n_stops) % 15
    centrality = 1.0 / (1.0 + np.abs(pos - 7))
    centrality[net.hubs] *= 5.0
    rank = np.empty(n_stops)
    rank[np.argsort(-centrality, kind="stable")] = np.arange(1, n_stops + 1)
    home_w = rng.permutation(1.0 / rank ** 0.6)
    work_w = 1.0 / rank ** 1.0
    return _week(rng, n_passengers, home_w, work_w, max_length, net.hubs, transfer, weekday_active=0.56), net


#: Commuter week (:func:`synthesize_commuter_week`): share of passengers by number of active weekdays 1..5
COMMUTER_DAYS = (0.15, 0.15, 0.2, 0.2, 0.3)
#: preferred morning and evening hours of the day and their shares
MORNING_HOURS = ((6, 0.15), (7, 0.4), (8, 0.35), (9, 0.1))
EVENING_HOURS = ((15, 0.1), (16, 0.25), (17, 0.35), (18, 0.2), (19, 0.1))
#: chance that a commuter taps at their preferred hour on a given day (else the hour before or after)
SAME_HOUR = 0.8


def synthesize_commuter_week(n_passengers: int = 300_000, seed: int = 0, *, home_zipf: float = 0.9,
                             work_zipf: float = 1.3) -> tuple[Trajectories, Metro]:
    """A week of commuters only, over the synthetic metro's 68 stations.

    Each passenger has a home and a different work station (Zipf weights as in
    :func:`synthesize_metro_trajectories`), a preferred morning and evening hour, and 1–5 active
    weekdays (:data:`COMMUTER_DAYS`, the days a uniform choice among Monday–Friday). On every active
    day they tap at home in a morning hour and at work in an evening hour (the preferred hour with
    probability :data:`SAME_HOUR`, else the hour before or after it): ``home@(24d+m) work@(24d+e)``
    for each day ``d`` in order, so every trajectory has 2–10 points and hours never decrease.
    """
    metro = build_metro()
    rng = np.random.default_rng(seed)
    n_loc = metro.n_stations
    rank = metro_centrality_rank(metro)
    home_p = rng.permutation(1.0 / rank ** home_zipf)
    home_p /= home_p.sum()
    work_p = 1.0 / rank ** work_zipf
    work_p /= work_p.sum()
    home = rng.choice(n_loc, n_passengers, p=home_p)
    work = rng.choice(n_loc, n_passengers, p=work_p)
    for _ in range(50):  # work elsewhere than home: redraw the few that coincide
        same = np.flatnonzero(work == home)
        if same.size == 0:
            break
        work[same] = rng.choice(n_loc, same.size, p=work_p)
    work = np.where(work == home, (home + 1) % n_loc, work)
    n_days = 1 + rng.choice(5, n_passengers, p=COMMUTER_DAYS)
    keys = rng.random((n_passengers, 5))
    order = np.argsort(keys, axis=1)
    active = np.zeros((n_passengers, 5), dtype=bool)
    np.put_along_axis(active, order, np.arange(5)[None, :] < n_days[:, None], axis=1)
    morning = np.array([h for h, _ in MORNING_HOURS])[rng.choice(len(MORNING_HOURS), n_passengers,
                                                                  p=[s for _, s in MORNING_HOURS])]
    evening = np.array([h for h, _ in EVENING_HOURS])[rng.choice(len(EVENING_HOURS), n_passengers,
                                                                  p=[s for _, s in EVENING_HOURS])]
    who, day = np.nonzero(active)  # row-major: each passenger's days in order
    shift = lambda: np.where(rng.random(who.size) < SAME_HOUR, 0, rng.choice([-1, 1], who.size))  # noqa: E731
    m = morning[who] + shift()
    e = evening[who] + shift()
    loc = np.stack([home[who], work[who]], axis=1).ravel()
    hour = np.stack([24 * day + m, 24 * day + e], axis=1).ravel()
    lengths = 2 * n_days
    offsets = np.zeros(n_passengers + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Trajectories(loc.astype(np.int64), hour.astype(np.int64), offsets, n_loc, HOURS_PER_WEEK), metro
