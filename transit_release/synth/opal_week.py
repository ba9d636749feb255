"""A synthetic Opal week, calibrated to the real released tap-location counts.

Raw trips (card id, mode, tap-on time and stop, tap-off time and stop, to the
minute) and the stop table (stop id → mode, name, postcode for bus stops; a
few bus stops per postcode; a handful of bus stops without a postcode, which
preprocessing maps to ``-1``).

Calibration: for every (mode, date, tap, location) of the real release
(``data/opal_location_20160808-14.csv``, CC BY 4.0 Transport for NSW) the
synthetic week at ``scale`` has ``round(scale · count)`` taps (largest-remainder
rounding inside each (mode, date, tap)). Locations the real release dropped on
a day (true count below its threshold of 34) get a small count (1–33), and each
mode gets a few rare locations, so sparse points exist as in real data. The
bus ``-1`` tap-off counts become missing tap-offs (no time, no stop); the bus
``-1`` tap-on counts become taps at stops without a postcode.

Tap-on and tap-off locations of a trip are paired at random (the marginals
are what the release publishes); tap-on times follow weekday AM/PM peaks and a
flatter weekend profile; durations are log-normal per mode.

Cards (who made which trip) are assigned afterwards, so they never disturb the
calibrated counts. Three kinds of rider (:data:`RIDER_TYPES`): commuters
(about 30% of cards; active on ~85% of weekdays, mostly 2 trips a day, 4 on a
transfer commute: about 10 trips a week), regular riders (2–3 days a week,
1–2 trips a day) and occasional riders (a day or two in the week, if at all).
Each card has a main mode and a secondary one (drawn by the modes' shares);
on a day of one or two trips it rides its main mode (8% of trips on the
other), on a day of three or more it alternates main and secondary (bus to
train and back). Each day's activity is scaled so that the expected trips
match that day's calibrated total; the per-(mode, date) totals are then met
exactly by moving the fewest possible trips to another mode or card. At scale
1.0 this gives 2.11 million cards in the week; 1–2 trips on 80% of card-days
(1: 20%, 2: 60%, 3: 8%, 4: 12%); trips per card-week mean 6.4, median 6,
90th percentile 12, with 25% of cards at one or two trips and 27% at ten or
more; 1–2 trips per card per (mode, date) for 98.8% of (card, partition) pairs
(3: 1.1%); partitions per card-week median 4, 90th percentile 7
(``benchmarks/experiment_card_level.py`` prints the distributions). The
previous version (each active card-day ``1 + Poisson(1.4)`` trips from one
pool, modes at random) had no occasional riders (3% of cards with at most two
trips a week), 41% of card-days with three or more trips and 95% of cards on
two or more modes.

Randomness here is NumPy's PCG64 from ``seed``: synthetic data is not a
privacy mechanism, so it need not (and must not) use the noise source.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

CALIBRATION_FILE = "opal_location_20160808-14.csv"
MODES = ("bus", "ferry", "lightrail", "train")
STOP_ID_BASE = {"train": 100_000, "bus": 200_000, "ferry": 300_000, "lightrail": 400_000}
UNMAPPED_BUS_STOPS = 6
RARE_LOCATIONS = {"bus": 10, "ferry": 2, "lightrail": 1, "train": 4}
# log-normal trip durations in minutes: (median, sigma)
DURATION = {"bus": (16.0, 0.6), "train": (24.0, 0.5), "ferry": (20.0, 0.4), "lightrail": (11.0, 0.5)}
#: name → (share of cards, P(active) on a weekday, on a weekend day, P(1, 2, 3, 4 trips | active day))
RIDER_TYPES = {
    "commuter": (0.30, 0.85, 0.12, (0.05, 0.70, 0.08, 0.17)),
    "regular": (0.30, 0.40, 0.30, (0.35, 0.50, 0.08, 0.07)),
    "occasional": (0.40, 0.08, 0.12, (0.50, 0.42, 0.06, 0.02)),
}
OTHER_MODE_SHARE = 0.08  # trips of a one- or two-trip day on the card's secondary mode
CARD_ID_BASE = 10_000_000
MAX_DURATION = 240  # minutes: synthetic data stays inside the validation gate's limits


@dataclass(frozen=True)
class SyntheticWeek:
    trips: pd.DataFrame
    stops: pd.DataFrame


def load_calibration() -> pd.DataFrame:
    path = resources.files("transit_release.synth") / "data" / CALIBRATION_FILE
    with path.open("rb") as fh:
        df = pd.read_csv(fh, dtype={"mode": str, "date": str, "tap": str, "loc": str, "count": np.int64})
    return df


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` that sum exactly to ``total``."""
    if total <= 0 or weights.sum() <= 0:
        return np.zeros(len(weights), dtype=np.int64)
    exact = weights / weights.sum() * total
    base = np.floor(exact).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        order = np.lexsort((np.arange(len(exact)), -(exact - base)))
        base[order[:short]] += 1
    return base


def _tap_on_minutes(rng: np.random.Generator, n: int, weekend: bool) -> np.ndarray:
    if weekend:
        comps = [(0.70, "normal", 13 * 60, 180), (0.30, "uniform", 6 * 60, 1439)]
    else:
        comps = [(0.32, "normal", 8 * 60, 50), (0.30, "normal", 17 * 60 + 15, 60),
                 (0.25, "normal", 12 * 60 + 30, 150), (0.13, "uniform", 5 * 60, 23 * 60 + 30)]
    which = rng.choice(len(comps), size=n, p=[c[0] for c in comps])
    out = np.empty(n, dtype=np.float64)
    for k, (_, kind, a, b) in enumerate(comps):
        idx = np.flatnonzero(which == k)
        out[idx] = rng.normal(a, b, idx.size) if kind == "normal" else rng.uniform(a, b, idx.size)
    return np.clip(np.rint(out), 0, 1438).astype(np.int64)


def _build_stops(rng: np.random.Generator, locations: dict[str, list[str]], volume: dict[tuple[str, str], int]):
    """Stop table plus, per (mode, location), the stop ids and their weights."""
    rows = []
    stops_of: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for mode in MODES:
        next_id = STOP_ID_BASE[mode]
        for loc in locations[mode]:
            if mode == "bus":
                k = int(np.clip(round(np.sqrt(volume.get((mode, loc), 0) / 3000.0)) + 2, 2, 12))
            else:
                k = 1
            ids = np.arange(next_id, next_id + k, dtype=np.int64)
            next_id += k
            w = 1.0 / np.arange(1, k + 1) ** 0.8
            stops_of[(mode, loc)] = (ids, w / w.sum())
            for i, sid in enumerate(ids):
                if mode == "bus":
                    rows.append((sid, mode, f"Stop {i + 1}, postcode {loc}", int(loc)))
                else:
                    rows.append((sid, mode, loc, None))
        if mode == "bus":
            ids = np.arange(next_id, next_id + UNMAPPED_BUS_STOPS, dtype=np.int64)
            stops_of[(mode, "-1")] = (ids, np.full(len(ids), 1.0 / len(ids)))
            rows += [(sid, mode, f"Temporary stop {i + 1}", None) for i, sid in enumerate(ids)]
    stops = pd.DataFrame(rows, columns=["stop_id", "mode", "name", "postcode"])
    stops["stop_id"] = stops["stop_id"].astype("int64")
    stops["postcode"] = stops["postcode"].astype("Int64")
    return stops, stops_of


def synthesize_week(scale: float = 1.0, seed: int = 0, progress=None, week_start: date | None = None) -> SyntheticWeek:
    """Generate the week; ``progress(advance)`` is called once per (mode, date). ``week_start`` (a Monday) moves it
    to that week: the calibration week's days, Monday to Sunday, fall on that week's (default: the calibration
    week, 2016-08-08)."""
    if not scale > 0:
        raise ValueError(f"scale must be positive. Found {scale}.")
    shift = np.timedelta64(week_offset_days(week_start), "D")
    rng = np.random.default_rng(seed)
    cal = load_calibration()
    dates = sorted(cal["date"].unique())

    # locations per mode: the released ones plus a few rare ones
    locations: dict[str, list[str]] = {}
    for mode in MODES:
        locs = sorted(set(cal.loc[(cal["mode"] == mode) & (cal["loc"] != "-1"), "loc"]))
        if mode == "bus":
            used = {int(x) for x in locs}
            free = [p for p in range(2000, 2800) if p not in used]
            extra = [str(p) for p in rng.choice(free, RARE_LOCATIONS[mode], replace=False)]
        else:
            suffix = {"train": "Station", "ferry": "Wharf", "lightrail": "Light Rail"}[mode]
            extra = [f"Synthetic Halt {i + 1} {suffix}" for i in range(RARE_LOCATIONS[mode])]
        locations[mode] = sorted(locs + extra)
    volume = cal.groupby(["mode", "loc"])["count"].sum().to_dict()
    stops, stops_of = _build_stops(rng, locations, volume)

    target = cal.set_index(["mode", "date", "tap", "loc"])["count"]
    parts = []
    for date in dates:
        weekend = pd.Timestamp(date).dayofweek >= 5
        day0 = np.datetime64(pd.Timestamp(date).strftime("%Y-%m-%d"), "m") + shift
        for mode in MODES:
            labels = list(locations[mode]) + (["-1"] if mode == "bus" else [])
            counts = {}
            for tap in ("on", "off"):
                c = np.array([target.get((mode, date, tap, loc), 0) for loc in labels], dtype=np.float64)
                missing = np.array([(loc != "-1") and ((mode, date, tap, loc) not in target.index) for loc in labels])
                c[missing] = rng.integers(1, 34, missing.sum())
                counts[tap] = c
            n = int(round(scale * counts["on"].sum()))
            on_n = _largest_remainder(counts["on"], n)
            off_n = _largest_remainder(counts["off"], n)
            on_lab = rng.permutation(np.repeat(np.arange(len(labels)), on_n))
            off_lab = rng.permutation(np.repeat(np.arange(len(labels)), off_n))

            def stops_for(lab: np.ndarray) -> np.ndarray:
                out = np.full(lab.size, -1, dtype=np.int64)
                for i, loc in enumerate(labels):
                    idx = np.flatnonzero(lab == i)
                    if idx.size == 0:
                        continue
                    ids, w = stops_of[(mode, loc)]
                    out[idx] = rng.choice(ids, size=idx.size, p=w)
                return out

            on_stop = stops_for(on_lab)
            off_present = np.array([lab != "-1" for lab in labels])[off_lab] if mode == "bus" else np.ones(n, bool)
            off_stop = stops_for(off_lab)
            on_min = _tap_on_minutes(rng, n, weekend)
            med, sig = DURATION[mode]
            dur = np.clip(np.rint(rng.lognormal(np.log(med), sig, n)), 1, MAX_DURATION).astype(np.int64)
            off_min = np.minimum(on_min + dur, 1439)
            parts.append(pd.DataFrame({
                "mode": mode,
                "tap_on_time": (day0 + on_min.astype("timedelta64[m]")).astype("datetime64[s]"),
                "tap_on_stop": on_stop,
                "tap_off_time": np.where(off_present, day0 + off_min.astype("timedelta64[m]"),
                                         np.datetime64("NaT")).astype("datetime64[s]"),
                "tap_off_stop": pd.array(np.where(off_present, off_stop, 0), dtype="Int64"),
            }))
            parts[-1].loc[~off_present, "tap_off_stop"] = pd.NA
            if progress is not None:
                progress(1)
    trips = pd.concat(parts, ignore_index=True)
    trips.insert(0, "card_id", _card_ids(rng, trips["tap_on_time"].dt.normalize().to_numpy(),
                                         trips["mode"].to_numpy()))
    trips["mode"] = trips["mode"].astype("string")
    return SyntheticWeek(trips=trips, stops=stops)


def _card_ids(rng: np.random.Generator, day: np.ndarray, mode: np.ndarray) -> np.ndarray:
    """Card ids for trips given their day and mode, by the rider model of the module docstring."""
    n = day.size
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    days, day_idx = np.unique(day, return_inverse=True)
    mode_idx = pd.Categorical(mode, categories=list(MODES)).codes.astype(np.int64)
    block = day_idx * len(MODES) + mode_idx
    order = np.argsort(block, kind="stable")
    edges = np.searchsorted(block[order], np.arange(len(days) * len(MODES) + 1))
    supply = np.diff(edges).reshape(len(days), len(MODES))
    share = supply.sum(axis=0) / n

    names = list(RIDER_TYPES)
    type_share = np.array([RIDER_TYPES[t][0] for t in names])
    p_active = np.array([[RIDER_TYPES[t][1], RIDER_TYPES[t][2]] for t in names])
    trips_pmf = np.array([RIDER_TYPES[t][3] for t in names])
    mean_trips = trips_pmf @ np.arange(1, 5)
    weekend = np.array([pd.Timestamp(d).dayofweek >= 5 for d in days])
    active_days = p_active @ np.array([(~weekend).sum(), weekend.sum()], dtype=np.float64)
    per_card_week = type_share @ (active_days * mean_trips)
    n_cards = max(int(round(n / per_card_week)), 1)
    ctype = rng.choice(len(names), size=n_cards, p=type_share)
    main = rng.choice(len(MODES), size=n_cards, p=share)
    second_w = np.tile(share, (len(MODES), 1))
    np.fill_diagonal(second_w, 0)
    second_w /= second_w.sum(axis=1, keepdims=True)
    second = (rng.random(n_cards)[:, None] > np.cumsum(second_w[main], axis=1)).sum(axis=1)
    ids = CARD_ID_BASE + rng.permutation(n_cards)
    cdf = np.cumsum(trips_pmf, axis=1)

    for d in range(len(days)):
        n_day = int(supply[d].sum())
        if n_day == 0:
            continue
        p = p_active[ctype, int(weekend[d])]
        p = np.clip(p * n_day / float(p @ mean_trips[ctype]), 0, 1)
        active = np.flatnonzero(rng.random(n_cards) < p)
        m = 1 + (rng.random(active.size)[:, None] > cdf[ctype[active]]).sum(axis=1)
        # slots: one per trip of each active card-day; position r within the card-day
        card = np.repeat(active, m)
        r = np.arange(card.size) - np.repeat(np.cumsum(m) - m, m)
        big = np.repeat(m, m) >= 3
        on_main = np.where(big, r % 2 == 0, rng.random(card.size) >= OTHER_MODE_SHARE)
        slot_mode = np.where(on_main, main[card], second[card])
        # meet the day's total: drop random slots, or give extra trips to random active cards
        if card.size > n_day:
            keep = np.sort(rng.choice(card.size, n_day, replace=False))
            card, slot_mode = card[keep], slot_mode[keep]
        elif card.size < n_day:
            extra = rng.choice(active if active.size else np.arange(n_cards), n_day - card.size)
            card = np.concatenate([card, extra])
            slot_mode = np.concatenate([slot_mode, main[extra]])
        # meet each mode's total: move random surplus slots to the modes short of trips
        demand = np.bincount(slot_mode, minlength=len(MODES))
        surplus = demand - supply[d]
        moved = np.concatenate([rng.choice(np.flatnonzero(slot_mode == k), surplus[k], replace=False)
                                for k in range(len(MODES)) if surplus[k] > 0] or [np.zeros(0, np.int64)])
        if moved.size:
            short = np.repeat(np.arange(len(MODES)), np.maximum(-surplus, 0))
            slot_mode[moved] = rng.permutation(short)
        for k in range(len(MODES)):
            rows = order[edges[d * len(MODES) + k]:edges[d * len(MODES) + k + 1]]
            out[rows] = ids[rng.permutation(card[slot_mode == k])]
    return out


def week_offset_days(week_start: date | None) -> int:
    """Days from the calibration week's Monday to ``week_start`` (a Monday; None: the calibration week)."""
    if week_start is None:
        return 0
    if week_start.weekday() != 0:
        raise ValueError(f"the week must start on a Monday: {week_start.isoformat()} is a {week_start:%A}")
    first = date.fromisoformat(week_period()[0])
    return (week_start - first).days


def write_synthetic_week(out: str | Path, scale: float = 1.0, seed: int = 0, fmt: str = "csv",
                         show_progress: bool = True, week_start: date | None = None) -> dict[str, Path]:
    """Write ``trips.<fmt>`` and ``stops.<fmt>`` into ``out``: the week of ``week_start`` (a Monday; default
    the calibration week, 2016-08-08)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    from rich.progress import Progress

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with Progress(disable=not show_progress, transient=False) as bar:
        task = bar.add_task(f"synthesising week (scale {scale:g})", total=7 * len(MODES) + 1)
        week = synthesize_week(scale=scale, seed=seed, progress=lambda k: bar.advance(task, k), week_start=week_start)
        paths = {}
        for name, df in (("trips", week.trips), ("stops", week.stops)):
            table = pa.Table.from_pandas(df, preserve_index=False)
            path = out / f"{name}.{fmt}"
            if fmt == "csv":
                pacsv.write_csv(table, path)
            elif fmt == "parquet":
                pq.write_table(table, path)
            else:
                raise ValueError(f"format must be csv or parquet. Found {fmt!r}.")
            paths[name] = path
        bar.advance(task, 1)
    return paths


def week_period() -> tuple[str, str]:
    """The synthetic week's period (the calibration release's first and last day), as ISO dates."""
    dates = sorted(load_calibration()["date"].unique())
    return (f"{dates[0][:4]}-{dates[0][4:6]}-{dates[0][6:]}", f"{dates[-1][:4]}-{dates[-1][4:6]}-{dates[-1][6:]}")


def write_synthetic_weeks(out: str | Path, weeks: int, scale: float = 1.0, seed: int = 0,
                          show_progress: bool = False) -> dict[str, Path]:
    """``weeks`` consecutive weeks in one ``trips.csv`` (and the week's ``stops.csv``): the synthetic week
    repeated with its dates moved by 7, 14, … days (the same cards riding every week), written week by week
    so that memory holds one week. For a month-size input (four weeks of the full-size week: about 54 M trips)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if weeks < 1:
        raise ValueError(f"weeks must be at least 1. Found {weeks}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    week = synthesize_week(scale=scale, seed=seed)
    pacsv.write_csv(pa.Table.from_pandas(week.stops, preserve_index=False), out / "stops.csv")
    trips = week.trips
    writer = None
    try:
        for w in range(weeks):
            shifted = trips.assign(**{c: (trips[c] + pd.Timedelta(days=7 * w)).astype("datetime64[s]")
                                      for c in ("tap_on_time", "tap_off_time")})  # whole seconds, as the week
            table = pa.Table.from_pandas(shifted, preserve_index=False)
            if writer is None:
                writer = pacsv.CSVWriter(out / "trips.csv", table.schema)
            writer.write_table(table)
            del shifted, table
    finally:
        if writer is not None:
            writer.close()
    return {"trips": out / "trips.csv", "stops": out / "stops.csv"}


def weeks_period(weeks: int) -> tuple[str, str]:
    """The period of :func:`write_synthetic_weeks`' output, as ISO dates."""
    start, _ = week_period()
    first = pd.Timestamp(start)
    return start, (first + pd.Timedelta(days=7 * weeks - 1)).strftime("%Y-%m-%d")
