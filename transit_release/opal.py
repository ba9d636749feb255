"""The Opal release as plain functions: plan the spends, sanitize, assemble tables.

Order of operations (STYLE.md, "validate, then charge, then sample"): the flow
validates and preprocesses, :func:`plan_spends` describes every mechanism run
as an event, the ledger charges them, and only then :func:`sanitize_partition`
draws noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from transit_release.accounting.events import StabilityHistogramEvent
from transit_release.config import MARGINAL_BY_NAME, MARGINALS, ReleaseConfig
from transit_release.errors import NoiseSourceMismatchError
from transit_release.mechanisms.stability_histogram import sbh_scale, sbh_threshold, stability_histogram
from transit_release.noise import NoiseSource
from transit_release.preprocessing import (Histogram, KeySpace, PartitionHistograms, location_label,
                                           time_label)

NEIGHBOURING = "replace-one"
OUTPUT_COLUMNS = {
    "time": ["mode", "date", "tap", "time", "count"],
    "location": ["mode", "date", "tap", "loc", "count"],
    "time-loc": ["mode", "date", "tap", "time", "loc", "count"],
}


def plan_spends(partitions: list, config: ReleaseConfig, release_id: str,
                input_fingerprint: str, code_version: str) -> list[StabilityHistogramEvent]:
    """One event per (partition, marginal), in (mode, date, j) order; ``partitions`` need only ``mode`` and
    ``date`` (stored partitions or their histograms)."""
    events = []
    for ph in sorted(partitions, key=lambda p: (p.mode, p.date)):
        for m in MARGINALS:
            b = config.budgets[m.name]
            events.append(StabilityHistogramEvent(
                release_id=release_id, mode=ph.mode, date=ph.date, marginal=m.name,
                epsilon=b.epsilon, delta=b.delta, threshold=sbh_threshold(b.epsilon, b.delta),
                noise_scale=str(sbh_scale(b.epsilon)), sensitivity=1,
                unit_of_privacy=config.unit_of_privacy, neighbouring=NEIGHBOURING,
                input_fingerprint=input_fingerprint, code_version=code_version))
    return events


@dataclass(frozen=True)
class SanitizedPartition:
    mode: str
    date: str
    released: dict[str, Histogram]  # kept keys (ascending) and noisy counts
    kept_positions: dict[str, np.ndarray]  # positions into the true histogram's keys
    thresholds: dict[str, int]


def sanitize_partition(ph: PartitionHistograms, config: ReleaseConfig, noise: NoiseSource) -> SanitizedPartition:
    """The SBH on each of the partition's six histograms, each with its own stream."""
    released, kept, thresholds = {}, {}, {}
    for m in MARGINALS:
        h = ph.histograms[m.name]
        b = config.budgets[m.name]
        res = stability_histogram(h.counts, b.epsilon, b.delta, noise.stream(ph.mode, ph.date, m.name))
        released[m.name] = Histogram(keys=h.keys[res.kept], counts=res.counts)
        kept[m.name] = res.kept
        thresholds[m.name] = res.threshold
    return SanitizedPartition(ph.mode, ph.date, released, kept, thresholds)


def release_tables(sanitized: list[SanitizedPartition], ks: KeySpace, vocab: dict[str, tuple[str, ...]],
                   bin_minutes: int) -> dict[str, pd.DataFrame]:
    """The three published tables, sorted by (mode, date, tap, key)."""
    pieces: dict[str, list[pd.DataFrame]] = {k: [] for k in OUTPUT_COLUMNS}
    for sp in sorted(sanitized, key=lambda s: (s.mode, s.date)):
        for tap in ("on", "off"):
            for m in MARGINALS:
                if m.tap != tap:
                    continue
                h = sp.released[m.name]
                tb, lc = ks.decode(m, h.keys)
                cols = {"mode": sp.mode, "date": sp.date, "tap": tap}
                if m.has_time:
                    cols["time"] = time_label(tb, bin_minutes)
                if m.has_loc:
                    cols["loc"] = location_label(lc, vocab[sp.mode])
                cols["count"] = h.counts.astype(np.int64)
                pieces[m.output].append(pd.DataFrame(cols, index=pd.RangeIndex(len(h.keys))))
    tables = {}
    for name, cols in OUTPUT_COLUMNS.items():
        df = pd.concat(pieces[name], ignore_index=True) if pieces[name] else pd.DataFrame(columns=cols)
        df = df[cols]
        for c in cols[:-1]:
            df[c] = df[c].astype(str)
        df["count"] = df["count"].astype(np.int64)
        tables[name] = df
    return tables


def privacy_statement(config: ReleaseConfig) -> dict:
    """What the whole release guarantees, for the manifest and the data card."""
    return {
        "unit_of_privacy": config.unit_of_privacy,
        "neighbouring_relation": "replace one trip (row) by another",
        "epsilon": config.partition_epsilon,
        "delta": config.partition_delta,
        "add_remove_epsilon": config.partition_epsilon / 2,
        "add_remove_delta": config.partition_delta / 2,
        "composition": ("basic (sequential) composition of the six marginals within each (mode, date) "
                        "partition; parallel composition across the disjoint partitions"),
        "mechanism": "stability-based histogram with discrete Laplace noise (Asghar, Tyler & Kaafar 2018, Alg. 1)",
        "marginals": {m.name: {"j": m.j, "epsilon": config.budgets[m.name].epsilon,
                               "delta": config.budgets[m.name].delta,
                               "noise_scale": str(sbh_scale(config.budgets[m.name].epsilon)),
                               "threshold": sbh_threshold(config.budgets[m.name].epsilon,
                                                          config.budgets[m.name].delta),
                               "file": m.output}
                      for m in MARGINALS},
    }


__all__ = ["plan_spends", "sanitize_partition", "sanitize_and_evaluate", "release_tables", "PartitionOutcome", "privacy_statement", "SanitizedPartition",
           "MARGINAL_BY_NAME", "OUTPUT_COLUMNS", "NEIGHBOURING"]


def release_id_for(start, end) -> str:
    """``opal-<first date>-<last date>``: the same period gives the same id."""
    return f"opal-{start:%Y%m%d}-{end:%Y%m%d}"


def check_charges(ph: PartitionHistograms, config: ReleaseConfig, charged_events: list) -> None:
    """Refuse to draw noise for a partition unless each of its six spends is on the ledger."""
    have = {(e.mode, e.date, e.marginal): e for e in charged_events}
    for m in MARGINALS:
        e = have.get((ph.mode, ph.date, m.name))
        b = config.budgets[m.name]
        if e is None or e.epsilon != b.epsilon or e.delta != b.delta:
            raise RuntimeError(f"no ledger charge for {ph.partition} {m.name}: noise is never drawn before "
                               "its spend is recorded")


@dataclass(frozen=True)
class PartitionOutcome:
    """What the rest of the flow needs from one sanitized partition, so the true histograms stay where they
    were counted: the released histograms, the utility rows, the true counts of the released points (for the
    internal report) and the time bins and locations present in the input (for the release checks)."""

    sanitized: SanitizedPartition
    n_trips: int
    utility: tuple[dict, ...]
    true_counts: dict[str, np.ndarray]  # true count of each released point, per marginal
    input_time_bins: np.ndarray  # distinct time bins (-1 = unknown) of the input, both taps
    input_locations: np.ndarray  # distinct location codes (-1 = unknown) of the input, both taps
    noise_kind: str
    process: str = ""  # host/pid of the process that drew the noise (set by the task)


def sanitize_and_evaluate(ph: PartitionHistograms, config: ReleaseConfig, charged_events: list, ks: KeySpace,
                          noise: NoiseSource) -> PartitionOutcome:
    """Check the partition's six charges, sanitize it, and reduce it to a :class:`PartitionOutcome`."""
    check_charges(ph, config, charged_events)
    sp = sanitize_partition(ph, config, noise)
    decoded = [ks.decode(m, ph.histograms[m.name].keys) for m in MARGINALS]
    times = [tb for tb, _ in decoded if tb is not None]
    locs = [lc for _, lc in decoded if lc is not None]
    return PartitionOutcome(
        sanitized=sp, n_trips=ph.n_trips, utility=tuple(partition_utility(ph, sp, config)),
        true_counts={m.name: ph.histograms[m.name].counts[sp.kept_positions[m.name]] for m in MARGINALS},
        input_time_bins=np.unique(np.concatenate(times)), input_locations=np.unique(np.concatenate(locs)),
        noise_kind=noise.kind)


def noise_kind(outcomes: list[PartitionOutcome]) -> str:
    """The one kind of noise source every sanitizer used (what the manifest states)."""
    kinds = sorted({o.noise_kind for o in outcomes})
    if len(kinds) > 1:
        raise NoiseSourceMismatchError(f"sanitizers used different noise sources ({', '.join(kinds)}): the test seed is set "
                           "in some worker environments and not in others; nothing is published")
    return kinds[0] if kinds else NoiseSource.from_environment().kind


def partition_utility(ph: PartitionHistograms, sp: SanitizedPartition, config: ReleaseConfig) -> list[dict]:
    """One row per marginal of the partition with the internal utility figures."""
    from transit_release.utility.histogram import TOP_K, histogram_utility

    rows = []
    for m in MARGINALS:
        h = ph.histograms[m.name]
        fig = histogram_utility(h.counts, sp.kept_positions[m.name], sp.released[m.name].counts,
                                rank_top_k=TOP_K if (m.has_loc and not m.has_time) else None)
        rows.append({"partition": ph.partition, "mode": ph.mode, "date": ph.date, "marginal": m.name,
                     "j": m.j, "trips": ph.n_trips, "epsilon": config.budgets[m.name].epsilon,
                     "delta": config.budgets[m.name].delta, "threshold": sp.thresholds[m.name], **fig})
    return rows


def utility_table(outcomes: list[PartitionOutcome]) -> pd.DataFrame:
    """One row per (partition, marginal), in (mode, date, j) order."""
    return pd.DataFrame([row for o in sorted(outcomes, key=lambda o: (o.sanitized.mode, o.sanitized.date))
                         for row in o.utility])


def released_vs_true(outcomes: list[PartitionOutcome],
                     max_points: int = 20000) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(true, released) counts of released points per marginal, thinned evenly to ``max_points``."""
    ordered = sorted(outcomes, key=lambda o: (o.sanitized.mode, o.sanitized.date))
    out = {}
    for m in MARGINALS:
        t = np.concatenate([o.true_counts[m.name] for o in ordered] or [np.zeros(0, np.int64)])
        r = np.concatenate([o.sanitized.released[m.name].counts for o in ordered] or [np.zeros(0, np.int64)])
        step = max(1, t.size // max_points)
        out[m.name] = (t[::step], r[::step])
    return out


def build_manifest(release_id: str, period, config: ReleaseConfig,
                   noise_kind: str, code_version: str, created_at: str) -> dict:
    """Everything public about the release except the file list (added when written)."""
    return {
        "release_id": release_id,
        "created_at": created_at,
        "product": "Opal-style tap counts: time, location and time-location marginals per mode and day",
        "period": {"start": period.start.isoformat(), "end": period.end.isoformat()},
        "modes": list(config.modes),
        "parameters": {"bin_minutes": config.bin_minutes, "date_format": "YYYYMMDD", "unknown": "-1"},
        "privacy": privacy_statement(config),
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }
