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
flatter weekend profile; durations are log-normal per mode. Cards make
``1 + Poisson(1.4)`` trips a day, drawn from one pool for the week.

Randomness here is NumPy's PCG64 from ``seed``: synthetic data is not a
privacy mechanism, so it need not (and must not) use the noise source.
"""

from __future__ import annotations

from dataclasses import dataclass
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
TRIPS_PER_CARD_EXTRA = 1.4
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


def synthesize_week(scale: float = 1.0, seed: int = 0, progress=None) -> SyntheticWeek:
    """Generate the week; ``progress(advance)`` is called once per (mode, date)."""
    if not scale > 0:
        raise ValueError(f"scale must be positive. Found {scale}.")
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
        day0 = np.datetime64(pd.Timestamp(date).strftime("%Y-%m-%d"), "m")
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
    trips.insert(0, "card_id", _card_ids(rng, trips["tap_on_time"].dt.normalize().to_numpy()))
    trips["mode"] = trips["mode"].astype("string")
    return SyntheticWeek(trips=trips, stops=stops)


def _card_ids(rng: np.random.Generator, day: np.ndarray) -> np.ndarray:
    """Card ids such that each active card makes 1 + Poisson(1.4) trips a day."""
    out = np.empty(day.size, dtype=np.int64)
    days, inverse = np.unique(day, return_inverse=True)
    per_day = np.bincount(inverse)
    pool = int(per_day.max() / (1 + TRIPS_PER_CARD_EXTRA) * 1.6) + 16
    for d in range(len(days)):
        idx = np.flatnonzero(inverse == d)
        n = idx.size
        k = 1 + rng.poisson(TRIPS_PER_CARD_EXTRA, size=int(n / (1 + TRIPS_PER_CARD_EXTRA) * 1.2) + 16)
        k = k[: np.searchsorted(np.cumsum(k), n) + 1]
        cards = rng.choice(pool, size=k.size, replace=False) + 10_000_000
        out[idx] = rng.permutation(np.repeat(cards, k)[:n])
    return out


def write_synthetic_week(out: str | Path, scale: float = 1.0, seed: int = 0, fmt: str = "csv",
                         show_progress: bool = True) -> dict[str, Path]:
    """Write ``trips.<fmt>`` and ``stops.<fmt>`` into ``out``."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    from rich.progress import Progress

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with Progress(disable=not show_progress, transient=False) as bar:
        task = bar.add_task(f"synthesising week (scale {scale:g})", total=7 * len(MODES) + 1)
        week = synthesize_week(scale=scale, seed=seed, progress=lambda k: bar.advance(task, k))
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
