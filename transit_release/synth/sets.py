"""Synthetic set-valued data: the stations each passenger or card used.

* :func:`metro_sets`: a passenger's distinct stations in the synthetic metro
  (:func:`transit_release.synth.metro.synthesize_metro`), 68 stations.
* :func:`opal_week_sets`: a card's distinct stations (tap-on and tap-off
  locations, all modes) over the synthetic Opal week
  (:mod:`transit_release.synth.opal_week`), built with the same code as real
  tap data (:func:`transit_release.inputs.sets.sets_from_trips`).
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
