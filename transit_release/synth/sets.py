"""Synthetic set-valued data: the stations each passenger or card used.

* :func:`metro_sets`: a passenger's distinct stations in the synthetic metro
  (:func:`transit_release.synth.metro.synthesize_metro`), 68 stations.
* :func:`opal_week_sets`: a card's distinct stations (tap-on and tap-off
  locations, all modes) over the synthetic Opal week
  (:mod:`transit_release.synth.opal_week`), built with the same code as real
  tap data (:func:`transit_release.inputs.sets.sets_from_trips`).
* :func:`heavy_tailed_sets`: a small universe with heavy-tailed set sizes, correlated items and a long tail
  of rare combinations, matching the public statistics of the thesis's MSNBC data (below): the data set the
  small-universe set mechanisms are chosen and measured on.
* :func:`stm_like_sets`: shaped like the thesis's STM data set (Table 4.2:
  1,210,096 sets over 1,012 stations, average size 4.82, largest 64) for the
  benchmark. Stations are numbered along routes (neighbouring ids are
  neighbouring stations, as a public stop list sorted by route would be);
  each passenger has a home and a work station (Zipf popularity), and the
  other stations are near home or work (along the route) or anywhere by
  popularity. Sizes: ``2 + NegBin`` (most 2–6), 0.2% heavy users with 20–64.

Randomness is NumPy's PCG64: synthetic data is not a privacy mechanism.
"""

from __future__ import annotations

import numpy as np

from transit_release.mechanisms.diffpart import ItemSets

STM_RECORDS = 1_200_000
STM_STATIONS = 1_012
STM_MAX_SIZE = 64


def metro_sets(n_passengers: int = 850_000, seed: int = 0):
    """(sets, metro): each passenger's distinct stations; item ids are the metro's station ids."""
    from transit_release.synth.metro import synthesize_metro

    seqs, metro = synthesize_metro(n_passengers, seed=seed)
    return ItemSets.from_arrays(seqs.locations, seqs.offsets, seqs.n_locations), metro


def opal_week_sets(scale: float = 0.05, seed: int = 0, modes: tuple[str, ...] | None = None):
    """A :class:`~transit_release.inputs.sets.SetInput`: each card's distinct locations over the synthetic week."""
    import pandas as pd

    from transit_release.inputs.screening import Period
    from transit_release.inputs.sets import sets_from_trips
    from transit_release.inputs.universe import from_stop_locations
    from transit_release.synth.opal_week import load_calibration, synthesize_week

    dates = sorted(load_calibration()["date"].unique())  # the declared week: the calibration's dates
    period = Period(pd.Timestamp(dates[0]).date(), pd.Timestamp(dates[-1]).date())
    week = synthesize_week(scale=scale, seed=seed)
    universe = from_stop_locations(week.stops, modes, "synthetic stop table")
    return sets_from_trips(week.trips, week.stops, period, universe, modes=modes)


def stm_like_sets(n_records: int = STM_RECORDS, n_stations: int = STM_STATIONS, seed: int = 0,
                  max_size: int = STM_MAX_SIZE) -> ItemSets:
    """``n_records`` station sets over ``n_stations`` shaped like the STM data (average ≈ 4.8, largest 64)."""
    rng = np.random.default_rng(seed)
    rank = rng.permutation(n_stations) + 1
    popularity = 1.0 / rank ** 0.9
    popularity /= popularity.sum()
    work_pop = 1.0 / np.arange(1, n_stations + 1) ** 1.2  # work places: central (low ids of each route) first
    work_pop = rng.permutation(work_pop)
    work_pop /= work_pop.sum()
    size = 2 + rng.negative_binomial(1.2, 1.2 / (1.2 + 3.2), n_records)
    heavy = rng.random(n_records) < 0.002
    size[heavy] = 0
    who = np.repeat(np.arange(n_records, dtype=np.int64), size)
    offsets = np.concatenate([[0], np.cumsum(size)])
    step = np.arange(who.size) - offsets[who]
    home = rng.choice(n_stations, n_records, p=popularity)
    work = rng.choice(n_stations, n_records, p=work_pop)
    anchor = np.where(rng.random(who.size) < 0.5, home[who], work[who])
    near = anchor + np.rint(rng.normal(0, 3, who.size)).astype(np.int64)
    far = rng.choice(n_stations, who.size, p=popularity)
    item = np.where(rng.random(who.size) < 0.6, near, far)
    item = np.where(step == 0, home[who], np.where(step == 1, work[who], item))
    item = np.clip(item, 0, n_stations - 1)
    # heavy users: 20..max_size distinct stations by popularity
    heavy_ids = np.flatnonzero(heavy)
    heavy_size = rng.integers(min(20, max_size), max_size + 1, heavy_ids.size)  # small universes: at most all
    heavy_size[:1] = max_size  # the largest set has max_size stations, as in the STM data
    heavy_items = [rng.choice(n_stations, int(k), replace=False, p=popularity) for k in heavy_size]
    who = np.concatenate([who, np.repeat(heavy_ids, heavy_size)])
    item = np.concatenate([item, *heavy_items]) if heavy_items else item
    order = np.argsort(who, kind="stable")
    counts = np.bincount(who, minlength=n_records)
    return ItemSets.from_arrays(item[order], np.concatenate([[0], np.cumsum(counts)]), n_stations)


#: :func:`small_universe_sets`: shaped like the thesis's MSNBC data (Table 4.2: 989,818 sets over 17 items,
#: average size 1.72, largest 17)
SMALL_RECORDS = 989_818
SMALL_ITEMS = 17


def small_universe_sets(n_records: int = SMALL_RECORDS, n_items: int = SMALL_ITEMS, seed: int = 0) -> ItemSets:
    """``n_records`` sets over a small universe of ``n_items``, shaped like the MSNBC data the thesis uses
    (a public set-valued data set that is not available offline here): most sets hold one or two items
    (sizes ``1 + Geometric``, average ≈ 1.7), item popularity is Zipf-like, and each record has a favourite
    item that it holds and a "neighbourhood" of items it is likelier to add (items close to it in the fixed
    order: related categories or stations along a line), so that pairs and triples are frequent too."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, n_items + 1) ** 1.1
    popularity = rng.permutation(popularity)
    popularity /= popularity.sum()
    size = np.minimum(rng.geometric(0.58, n_records), n_items)
    who = np.repeat(np.arange(n_records, dtype=np.int64), size)
    offsets = np.concatenate([[0], np.cumsum(size)])
    step = np.arange(who.size) - offsets[who]
    favourite = rng.choice(n_items, n_records, p=popularity)
    near = (favourite[who] + rng.choice([-2, -1, 1, 2], who.size)) % n_items
    far = rng.choice(n_items, who.size, p=popularity)
    item = np.where(step == 0, favourite[who], np.where(rng.random(who.size) < 0.6, near, far))
    return ItemSets.from_arrays(item, offsets, n_items)


# ---- heavy-tailed sets over a small universe, matching MSNBC's public statistics -----------------------------

#: The public statistics :func:`heavy_tailed_sets` matches (MSNBC, the web visits of one day on msnbc.com by URL
#: category; UCI repository): thesis Table 4.2 (as sets) and Table 6.9 (as sequences), and the UCI description.
MSNBC_STATISTICS = {"records": 989_818, "items": 17, "max_set_size": 17, "avg_set_size": 1.72,
                    "max_visits": 14_795, "avg_visits": 5.7}
#: the visits' tail exponent: ``P(visits ≥ k) = k^-β``, capped at 14,795; β = 1.15 gives the average 5.7
VISIT_TAIL = 1.15
#: a visit repeats the previous visit's category with this probability (calibrated: average set size 1.72)
REPEAT = 0.40
#: a new category comes from the user's own group of related categories, the front page (the hub), or by
#: popularity, with these probabilities
SAME_GROUP, HUB = 0.5, 0.2
GROUP_SIZE = 4


def heavy_tailed_sets(n_records: int = MSNBC_STATISTICS["records"], n_items: int = MSNBC_STATISTICS["items"],
                      seed: int = 0, max_visits: int = MSNBC_STATISTICS["max_visits"], with_visits: bool = False):
    """``n_records`` sets over ``n_items`` items made like the MSNBC set data: each record is the set of
    categories one user visited in a day (thesis Table 4.2: 989,818 records over 17 items, average set size
    1.72, largest 17; as sequences, Table 6.9 and the UCI description: 5.7 visits a user on average, the
    longest 14,795).

    * **Heavy-tailed sizes.** A user's number of visits is discrete Pareto, ``P(V ≥ k) = k^-1.15`` (average
      5.7; one user has ``max_visits``, the thesis's longest sequence). Most users visit one category, a few
      wander through nearly all of them: sizes 1–5 hold about 68%, 17%, 7%, 3.6% and 1.9% of the records
      and the tail reaches the whole universe.
    * **Correlated items.** Item popularity is Zipf (exponent 1, item 0 the most popular: the front page); a
      user starts at a favourite item (by popularity); each further visit repeats the previous category with
      probability 0.40 (calibrated to the average size 1.72), else goes to a category of the favourite's group
      of related categories (groups of 4 consecutive ids; probability 0.5), to the front page (0.2) or to any
      category by popularity.
    * **A long tail of rare combinations.** The users with many visits hold most of the containment counts of
      two or more items, in sets that few others share: at the default size about 2.5% of the records hold a
      set fewer than 12 records share, and 4.5% one fewer than 50 share, yet they hold most of the
      3-item containment counts.

    Returns the :class:`ItemSets` (and, with ``with_visits``, each user's number of visits). Randomness is NumPy's
    PCG64 (synthetic data is not a privacy mechanism).
    """
    if n_items < 1 or n_records < 1:
        raise ValueError("the generator needs at least one record and one item")
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, n_items + 1)
    popularity /= popularity.sum()
    visits = np.minimum(np.floor(rng.random(n_records) ** (-1.0 / VISIT_TAIL)).astype(np.int64), max_visits)
    visits[0] = max_visits
    who = np.repeat(np.arange(n_records, dtype=np.int64), visits)
    offsets = np.concatenate([[0], np.cumsum(visits)]).astype(np.int64)
    step = np.arange(who.size, dtype=np.int64) - offsets[who]
    favourite = rng.choice(n_items, n_records, p=popularity)
    repeat = rng.random(who.size) < REPEAT
    group = np.minimum((favourite[who] // GROUP_SIZE) * GROUP_SIZE + rng.integers(0, GROUP_SIZE, who.size),
                       n_items - 1)
    anywhere = rng.choice(n_items, who.size, p=popularity)
    r = rng.random(who.size)
    new = np.where(r < SAME_GROUP, group, np.where(r < SAME_GROUP + HUB, 0, anywhere))
    item = np.where(step == 0, favourite[who], new)
    # a repeated visit takes the category of the last visit that was not a repeat (its own record's: step 0 never
    # repeats)
    last_new = np.maximum.accumulate(np.where(repeat & (step > 0), 0, np.arange(who.size, dtype=np.int64)))
    sets = ItemSets.from_arrays(item[last_new], offsets, n_items)
    return (sets, visits) if with_visits else sets


def set_statistics(sets: ItemSets) -> dict:
    """|D|, |I|, the largest and the average set size: the columns of the thesis's Table 4.2."""
    sizes = sets.sizes
    return {"records": len(sets), "items": sets.universe_size, "max_set_size": int(sizes.max()),
            "avg_set_size": float(sizes.mean())}
