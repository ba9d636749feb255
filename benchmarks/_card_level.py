"""Shared pieces of the card-level experiment and the PipelineDP comparison (library calls only, no Prefect).

bounding → encode → histograms → user-level SBH, on the synthetic week.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.config import MARGINALS  # noqa: E402
from transit_release.mechanisms.contribution_bounding import (BoundingResult, ContributionBounds,  # noqa: E402
                                                              bound_contributions)
from transit_release.mechanisms.stability_histogram import (CardLevelBudget, TruncatedCardLevelBudget,  # noqa: E402
                                                            card_level_stability_histogram, stability_histogram,
                                                            truncated_card_level_stability_histogram)
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.preprocessing import (EncodedTrips, PartitionHistograms, build_location_index,  # noqa: E402
                                           encode_trips, partition_histograms)

MODES = ("bus", "ferry", "lightrail", "train")
PAPER_EPSILONS = (1.0, 1.0, 1.0, 1.0, 2.0, 2.0)
PAPER_DELTA = 1 / 8_000_000
BOUNDING_COLUMNS = ("on_bin", "off_bin", "on_loc", "off_loc")


@dataclass
class Week:
    enc: EncodedTrips
    card: np.ndarray  # card id of each encoded row
    n_trips: int


def load_week(scale: float, seed: int, work: Path) -> Week:
    """The synthetic week at ``scale``, cached as Parquet under ``work``; encoded with its card ids."""
    from transit_release.synth.opal_week import synthesize_week

    work.mkdir(parents=True, exist_ok=True)
    trips_path, stops_path = work / f"trips-{scale:g}-{seed}.parquet", work / f"stops-{scale:g}-{seed}.parquet"
    if trips_path.exists():
        trips, stops = pd.read_parquet(trips_path), pd.read_parquet(stops_path)
    else:
        week = synthesize_week(scale=scale, seed=seed)
        trips, stops = week.trips, week.stops
        trips.to_parquet(trips_path)
        stops.to_parquet(stops_path)
    return encode_week(trips, stops)


def encode_week(trips: pd.DataFrame, stops: pd.DataFrame) -> Week:
    index = build_location_index(stops, MODES)
    enc = encode_trips(trips, index, 15)
    keep = pd.Categorical(trips["mode"], categories=list(MODES)).codes >= 0
    return Week(enc=enc, card=trips["card_id"].to_numpy(dtype=np.int64)[keep], n_trips=int(keep.sum()))


def partition_labels(enc: EncodedTrips) -> list[str]:
    return [f"{m}/{d}" for m, d in enc.partitions]


def bound_week(week: Week, bounds: ContributionBounds, noise: NoiseSource) -> tuple[EncodedTrips, BoundingResult]:
    f = week.enc.frame
    res = bound_contributions(week.card, f["part"].to_numpy(), [f[c].to_numpy() for c in BOUNDING_COLUMNS],
                              bounds, noise, partition_labels(week.enc))
    bounded = EncodedTrips(partitions=week.enc.partitions, frame=f[res.kept].reset_index(drop=True),
                           vocab=week.enc.vocab, bin_minutes=week.enc.bin_minutes)
    return bounded, res


def sanitize_card_level(parts: list[PartitionHistograms], epsilons, delta: float, k: int,
                        noise: NoiseSource, truncated: bool = True) -> dict:
    """{(mode, date, marginal): (released keys, released counts)} with the card-level SBH: with truncated noise
    (what card-level releases draw), or with ``truncated=False`` the untruncated SBH (same (ε, δ) per card,
    higher thresholds)."""
    out = {}
    budget, sanitize = ((TruncatedCardLevelBudget, truncated_card_level_stability_histogram) if truncated
                        else (CardLevelBudget, card_level_stability_histogram))
    for ph in parts:
        for m, e in zip(MARGINALS, epsilons):
            h = ph.histograms[m.name]
            res = sanitize(h.counts, budget(e, delta, k), noise.stream(ph.mode, ph.date, m.name))
            out[(ph.mode, ph.date, m.name)] = (h.keys[res.kept], res.counts)
    return out


def sanitize_trip_level(parts: list[PartitionHistograms], epsilons, delta: float, noise: NoiseSource) -> dict:
    out = {}
    for ph in parts:
        for m, e in zip(MARGINALS, epsilons):
            h = ph.histograms[m.name]
            res = stability_histogram(h.counts, e, delta, noise.stream(ph.mode, ph.date, m.name))
            out[(ph.mode, ph.date, m.name)] = (h.keys[res.kept], res.counts)
    return out


def true_lookup(parts: list[PartitionHistograms]) -> dict:
    return {(ph.mode, ph.date, m.name): ph.histograms[m.name] for ph in parts for m in MARGINALS}


def utility(released: dict, truth: dict, n_trips: int) -> dict:
    """Against the true (unbounded) week: released cells, trips covered (share of the week's trips on
    released cells, averaged over the six marginals), mean relative error of released cells
    (|released − true| / true, true = the unbounded count), mean absolute error."""
    cells, covered, rel, absum = 0, 0, [], 0.0
    per_marginal = {m.name: 0 for m in MARGINALS}
    for key, (keys, counts) in released.items():
        h = truth[key]
        pos = np.searchsorted(h.keys, keys)
        true = h.counts[pos]
        cells += keys.size
        covered += int(true.sum())
        per_marginal[key[2]] += int(true.sum())
        rel.append(np.abs(counts - true) / true)
        absum += float(np.abs(counts - true).sum())
    rel = np.concatenate(rel) if rel else np.zeros(0)
    return {"cells": cells, "trip_coverage": covered / (len(MARGINALS) * n_trips),
            "mre": float(rel.mean()) if rel.size else float("nan"),
            "mae": absum / cells if cells else float("nan"),
            **{f"coverage_{k}": v / n_trips for k, v in per_marginal.items()}}


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


__all__ = ["Week", "load_week", "encode_week", "bound_week", "sanitize_card_level", "sanitize_trip_level",
           "true_lookup", "utility", "timed", "partition_histograms", "PAPER_EPSILONS", "PAPER_DELTA"]
