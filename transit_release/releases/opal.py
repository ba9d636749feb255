"""The Opal release as plain functions: plan the spends, sanitize, assemble tables, manifest, data card.

Order of operations (STYLE.md, "validate, then charge, then sample"): the flow
validates and preprocesses, :func:`plan_spends` describes every mechanism run
as an event, the ledger charges them, and only then :func:`sanitize_partition`
draws noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from transit_release.accounting.events import (DEFAULT_POPULATION, CardStabilityHistogramEvent,
                                               StabilityHistogramEvent, TruncatedCardStabilityHistogramEvent)
from transit_release.config import MARGINAL_BY_NAME, MARGINALS, ReleaseConfig, marginal_numbers
from transit_release.errors import NoiseSourceMismatchError
from transit_release.mechanisms.stability_histogram import (TruncatedCardLevelBudget, card_level_stability_histogram,
                                                            drop_probability, mean_released,
                                                            truncated_card_level_stability_histogram)
from transit_release.files.publish import CSV_NEUTRALISATION
from transit_release.noise import NoiseSource
from transit_release.opendata.titles import card_heading
from transit_release.releases.loss_statement import person_text, unit_text
from transit_release.preprocessing import (Histogram, KeySpace, PartitionHistograms, location_label,
                                           time_label)

NEIGHBOURING = "replace-one"
OUTPUT_COLUMNS = {
    "time": ["mode", "date", "tap", "time", "count"],
    "location": ["mode", "date", "tap", "loc", "count"],
    "time-loc": ["mode", "date", "tap", "time", "loc", "count"],
}


def partitions_of(period, config: ReleaseConfig) -> list[tuple[str, str]]:
    """Every (mode, date) of the declared period: the public domain of the release. A partition nobody rode in
    is spent on and sanitized like any other (it releases nothing), so which partitions are charged never
    depends on the data."""
    return [(mode, day.strftime("%Y%m%d")) for mode in sorted(config.modes) for day in period.days]


def same_release(config: ReleaseConfig, fingerprint) -> Callable[[list], bool]:
    """Do earlier spends describe this very release (same input, same budgets)? ``fingerprint`` is the input's, or
    a future of it (Prefect's): it is waited for only when there are earlier spends to compare with."""

    def same(earlier: list) -> bool:
        fp = fingerprint.result() if hasattr(fingerprint, "result") else fingerprint
        wanted = {(name, b.epsilon, b.delta, config.unit_of_privacy, fp) for name, b in config.budgets.items()}
        return wanted <= {(e.component, e.epsilon, e.delta, e.unit_of_privacy, e.input_fingerprint) for e in earlier}

    return same


def plan_spends(period, config: ReleaseConfig, release_id: str, input_fingerprint: str,
                code_version: str, population: str = DEFAULT_POPULATION) -> list:
    """One event per (partition, marginal) of the declared period, in (mode, date, j) order, about ``population``."""
    events = []
    # each marginal's public figures once (its noise bound is a search over the noise table: 672 of them cost
    # about 2 s of a tiny release's planning, twice)
    figures = {}
    for m in MARGINALS:
        sbh = config.sbh_budget(m.name)
        figures[m.name] = (sbh, sbh.threshold, str(sbh.scale),
                           sbh.noise_bound if isinstance(sbh, TruncatedCardLevelBudget) else None)
    for mode, date in partitions_of(period, config):
        for m in MARGINALS:
            b = config.budgets[m.name]
            sbh, threshold, scale, noise_bound = figures[m.name]
            common = dict(release_id=release_id, mode=mode, date=date, marginal=m.name, epsilon=b.epsilon,
                          delta=b.delta, threshold=threshold, noise_scale=scale,
                          unit_of_privacy=config.unit_of_privacy, neighbouring=config.neighbouring,
                          input_fingerprint=input_fingerprint, code_version=code_version, population=population)
            if config.unit_of_privacy == "card":
                card = dict(**common, sensitivity=sbh.sensitivity[1],
                            max_trips_per_partition=config.bounds.max_trips_per_partition,
                            max_partitions=config.bounds.max_partitions, period_start=period.start.isoformat(),
                            period_end=period.end.isoformat())
                events.append(TruncatedCardStabilityHistogramEvent(**card, noise_bound=noise_bound)
                              if isinstance(sbh, TruncatedCardLevelBudget) else CardStabilityHistogramEvent(**card))
            else:
                events.append(StabilityHistogramEvent(**common, sensitivity=1))
    return events


@dataclass(frozen=True)
class SanitizedPartition:
    mode: str
    date: str
    released: dict[str, Histogram]  # kept keys (ascending) and noisy counts
    kept_positions: dict[str, np.ndarray]  # positions into the true histogram's keys
    thresholds: dict[str, int]


def sanitizer_for(budget):
    """The SBH a marginal's budget calls for: truncated noise for a :class:`TruncatedCardLevelBudget` (the card
    level), the paper's discrete Laplace otherwise (the trip level)."""
    if isinstance(budget, TruncatedCardLevelBudget):
        return truncated_card_level_stability_histogram
    return card_level_stability_histogram


def sanitize_partition(ph: PartitionHistograms, config: ReleaseConfig, noise: NoiseSource) -> SanitizedPartition:
    """The SBH on each of the partition's six histograms, each with its own stream, at the unit's sensitivity
    (trip: scale 2/ε_j, the paper's thresholds; card: scale k/ε_j, noise truncated to ``[−A, A]`` and threshold
    ``A + k + 1``)."""
    released, kept, thresholds = {}, {}, {}
    for m in MARGINALS:
        h = ph.histograms[m.name]
        budget = config.sbh_budget(m.name)
        res = sanitizer_for(budget)(h.counts, budget, noise.stream(ph.mode, ph.date, m.name))
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
    """What the whole release guarantees, for the manifest and the data card (public parameters only)."""
    marginals = {}
    for m in MARGINALS:
        sbh = config.sbh_budget(m.name)
        marginals[m.name] = {"j": m.j, "epsilon": config.budgets[m.name].epsilon,
                             "delta": config.budgets[m.name].delta, "noise_scale": str(sbh.scale),
                             "threshold": sbh.threshold, "file": m.output}
        if isinstance(sbh, TruncatedCardLevelBudget):
            marginals[m.name]["noise_bound"] = sbh.noise_bound
    mechanism = "stability-based histogram with discrete Laplace noise (Asghar, Tyler & Kaafar 2018, Alg. 1)"
    if config.unit_of_privacy == "card":
        b = config.bounds
        return {
            "unit_of_privacy": "card",
            "neighbouring_relation": "add or remove one card's trips",
            "epsilon": config.release_epsilon,
            "delta": config.release_delta,
            "partition_epsilon": config.partition_epsilon,
            "partition_delta": config.partition_delta,
            "bounds": {"max_trips_per_partition": b.max_trips_per_partition, "max_partitions": b.max_partitions},
            "composition": (f"before the card id was dropped each card kept at most {b.max_trips_per_partition} "
                            f"trips per (mode, date) partition and at most {b.max_partitions} partitions, chosen at "
                            "random; basic composition of the six marginals within a partition and over the "
                            f"{b.max_partitions} partitions a card can be in"),
            "mechanism": f"card-level {mechanism}, the noise truncated to [−A, A] and the threshold A + "
                         f"{b.max_trips_per_partition} + 1 (truncated Laplace mechanism, Geng et al. 2020), "
                         f"sensitivity (L0, L1, L∞) = ({b.max_trips_per_partition}, "
                         f"{b.max_trips_per_partition}, {b.max_trips_per_partition}) per marginal",
            "marginals": marginals,
        }
    return {
        "unit_of_privacy": config.unit_of_privacy,
        "neighbouring_relation": "replace one trip (row) by another",
        "epsilon": config.partition_epsilon,
        "delta": config.partition_delta,
        "add_remove_epsilon": config.partition_epsilon / 2,
        "add_remove_delta": config.partition_delta / 2,
        "composition": ("basic (sequential) composition of the six marginals within each (mode, date) "
                        "partition; parallel composition across the disjoint partitions"),
        "mechanism": mechanism,
        "marginals": marginals,
    }


def bound_card_contributions(trips: pd.DataFrame, bounds, noise: NoiseSource, period=None,
                             modes: tuple[str, ...] | None = None) -> tuple[np.ndarray, dict]:
    """Clean trips of a card-level release, bounded per card (:mod:`~transit_release.mechanisms.contribution_bounding`):
    a partition is the (mode, tap-on date); a card's rows are told apart by their times and stops. Which trips
    survive depends only on each card's own rows and the release's random keys, never on row order.

    A partition's code (which the partitions-per-card priorities hash) is that of the public domain, mode index
    × days of ``period`` + day index (:func:`~transit_release.inputs.streaming.partition_labels`), as the
    streamed release computes it; without a period (tests), the days the trips span stand in for it."""
    from transit_release.config import KNOWN_MODES
    from transit_release.inputs.streaming import bounding_columns, partition_labels
    from transit_release.mechanisms.contribution_bounding import bound_contributions

    modes = tuple(modes or KNOWN_MODES)
    on_ns = trips["tap_on_time"].to_numpy(dtype="datetime64[ns]").view(np.int64)
    day = on_ns // (1440 * 60_000_000_000)
    if period is None:
        from transit_release.inputs.screening import Period

        first = day.min() if day.size else 0
        period = Period(*(pd.Timestamp(int(d), unit="D").date() for d in (first, day.max() if day.size else 0)))
    n_days = len(period.days)
    day_index = day - pd.Timestamp(period.start).value // (1440 * 60_000_000_000)
    mode_index = pd.Categorical(trips["mode"], categories=list(modes)).codes.astype(np.int64)
    if day.size and (mode_index.min() < 0 or day_index.min() < 0 or day_index.max() >= n_days):
        raise ValueError("contribution bounding: every trip must be of a known mode and inside the period")
    partition = mode_index * n_days + day_index
    labels = [f"{m}/{d}" for m, d in partition_labels(period, modes)]
    rows = {"on_ns": on_ns, "on_stop": trips["tap_on_stop"].to_numpy(dtype=np.int64),
            "off_ns": trips["tap_off_time"].to_numpy(dtype="datetime64[ns]").view(np.int64),
            "off_stop": trips["tap_off_stop"].fillna(-1).to_numpy(dtype=np.int64)}
    result = bound_contributions(trips["card_id"].to_numpy(dtype=np.int64), partition, bounding_columns(rows),
                                 bounds, noise, labels)
    return result.kept, result.counts()


def release_id_for(start, end, unit: str) -> str:
    """``opal-<unit>-<first date>-<last date>``: the same period and unit give the same id, and a card-level
    release never collides with a trip-level one of the same period."""
    return f"opal-{unit}-{start:%Y%m%d}-{end:%Y%m%d}"


def earlier_release_ids(start, end) -> list[str]:
    """The default id releases of this period had before ids named their unit (``opal-<first>-<last>``): a release
    published under it from the same input and parameters is recognised as already published."""
    return [f"opal-{start:%Y%m%d}-{end:%Y%m%d}"]


def check_charges(ph: PartitionHistograms, config: ReleaseConfig, charged_events: list) -> None:
    """Refuse to draw noise for a partition unless each of its six spends is on the ledger and describes the
    noise about to be drawn: the same kind of event, ε, δ, noise scale and threshold, and at the card level
    the same bounds and noise bound."""
    have = {(e.mode, e.date, e.marginal): e for e in charged_events}
    for m in MARGINALS:
        e = have.get((ph.mode, ph.date, m.name))
        b = config.budgets[m.name]
        if e is None or e.epsilon != b.epsilon or e.delta != b.delta:
            raise RuntimeError(f"no ledger charge for {ph.partition} {m.name}: noise is never drawn before "
                               "its spend is recorded")
        sbh = config.sbh_budget(m.name)
        expected = {"kind": (TruncatedCardStabilityHistogramEvent.kind if isinstance(sbh, TruncatedCardLevelBudget)
                             else CardStabilityHistogramEvent.kind if config.unit_of_privacy == "card"
                             else StabilityHistogramEvent.kind),
                    "noise_scale": str(sbh.scale), "threshold": sbh.threshold,
                    "noise_bound": getattr(sbh, "noise_bound", None),
                    "max_trips_per_partition": config.bounds.max_trips_per_partition if config.bounds else None,
                    "max_partitions": config.bounds.max_partitions if config.bounds else None}
        found = {k: getattr(e, k, None) for k in expected}
        if found != expected:
            differ = sorted(k for k in expected if found[k] != expected[k])
            raise RuntimeError(f"the ledger charge for {ph.partition} {m.name} describes other noise than the one "
                               f"about to be drawn ({', '.join(differ)} differ): noise is never drawn for a spend "
                               "that does not describe it")


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
        true_counts={m.name: _truth_at(ph, sp, m.name)[1] for m in MARGINALS},
        input_time_bins=np.unique(np.concatenate(times)), input_locations=np.unique(np.concatenate(locs)),
        noise_kind=noise.kind)


def noise_kind(outcomes: list[PartitionOutcome]) -> str:
    """The one kind of noise source every sanitizer used (what the manifest states)."""
    kinds = sorted({o.noise_kind for o in outcomes})
    if len(kinds) > 1:
        raise NoiseSourceMismatchError(f"sanitizers used different noise sources ({', '.join(kinds)}): the test seed is set "
                           "in some worker environments and not in others; nothing is published")
    return kinds[0] if kinds else NoiseSource.from_environment().kind


def _truth_at(ph: PartitionHistograms, sp: SanitizedPartition, marginal: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the released points in the truth histogram (all trips, before any bounding), and their true
    counts there."""
    truth = ph.truth[marginal]
    positions = np.searchsorted(truth.keys, sp.released[marginal].keys)
    return positions, truth.counts[positions]


def partition_utility(ph: PartitionHistograms, sp: SanitizedPartition, config: ReleaseConfig) -> list[dict]:
    """One row per marginal of the partition with the internal utility figures."""
    from transit_release.utility.histogram import TOP_K, histogram_utility

    rows = []
    for m in MARGINALS:
        positions, _ = _truth_at(ph, sp, m.name)
        fig = histogram_utility(ph.truth[m.name].counts, positions, sp.released[m.name].counts,
                                rank_top_k=TOP_K if (m.has_loc and not m.has_time) else None)
        rows.append({"partition": ph.partition, "mode": ph.mode, "date": ph.date, "marginal": m.name,
                     "j": m.j, "trips": ph.n_trips_unbounded if ph.n_trips_unbounded is not None else ph.n_trips, "epsilon": config.budgets[m.name].epsilon,
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


KIND = "opal"
MECHANISM = "stability_histogram"


def build_manifest(release_id: str, period, config: ReleaseConfig, noise_kind: str, code_version: str,
                   created_at: str) -> dict:
    """Everything public about the release except the file list, the ledger head and the cumulative loss
    (added when it is staged). Built from public parameters only."""
    return {
        "release_id": release_id,
        "kind": KIND,
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


def _threshold_effects(m: dict) -> str:
    """How a marginal's threshold shapes what is published, with the release's own numbers."""
    t, scale, bound = m["threshold"], m["noise_scale"], m.get("noise_bound")
    drop = {c: drop_probability(c, scale, t, bound) for c in (t - 5, t, t + 5, t + 10)}
    bias = mean_released(t, scale, t, bound) - t
    return (f"| {m['j']} | {t} | {_percent(drop[t - 5])} | {_percent(drop[t])} | {_percent(drop[t + 5])} | "
            f"{_percent(drop[t + 10])} | +{bias:.1f} |")


def _percent(p: float) -> str:
    """A probability as a percentage, one decimal (two significant digits below 1%)."""
    return f"{100 * p:.1f}%" if p >= 0.01 else f"{100 * p:.2g}%"


def _group_privacy(epsilon: float, delta: float) -> str:
    rows = []
    for n in (2, 4, 10):
        d = n * np.exp((n - 1) * epsilon) * delta
        rows.append(f"| {n} | {n * epsilon:g} | {'≥ 1 (no guarantee)' if d >= 1 else f'{d:.2g}'} |")
    return "\n".join(rows)



def _bounds_text(p: dict) -> str:
    """"A = 402 for j = 1–4 and A = 208 for j = 5–6": the noise bounds of a card-level release's marginals."""
    by_bound: dict[int, list[int]] = {}
    for m in p["marginals"].values():
        by_bound.setdefault(m["noise_bound"], []).append(m["j"])
    parts = [f"A = {a} for j = {marginal_numbers(js)}" for a, js in by_bound.items()]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def _guarantee_text(p: dict) -> str:
    """The privacy guarantee in plain words: per trip (with what that means for a rider) or per card."""
    if p["unit_of_privacy"] == "card":
        b = p["bounds"]
        k, n = b["max_trips_per_partition"], b["max_partitions"]
        return f"""The release is ({p['epsilon']:g}, {p['delta']:.3g})-differentially private for one
**card**: all of one passenger's trips in the period.
Neighbouring data sets: {p['neighbouring_relation']}.

What that protects: whether a card travelled in the period, on which modes and days, when and where, can be
learnt from these files only to the extent ε = {p['epsilon']:g} allows.
This holds however many trips the card made.

How one card's part was bounded, before the card id was dropped:

- Each card kept at most **{k} trips per mode and day**, chosen at random.
- Each card kept at most **{n} (mode, day) partitions** of the period, chosen at random.
- The trips left out are a small share: those of very frequent travellers.

What one card costs:

- In one (mode, day) partition, the six counts cost a card at most ε = {p['partition_epsilon']:g}.
- Over the {n} partitions a card can be in, that adds up to at most {n} × {p['partition_epsilon']:g} = {p['epsilon']:g}
  (basic composition).
- Composed by privacy-loss distributions it is lower; the audit states both.

The noise is bounded.
Each count's noise never exceeds A taps either way: {_bounds_text(p)} (A = T − {k} − 1).
So a combination that one card alone makes up (at most {k} taps) can never reach the threshold.
δ is the small chance that the noise lands on its outermost values.
"""
    return f"""The release is ({p['epsilon']:g}, {p['delta']:.3g})-differentially private for one
**{p['unit_of_privacy']}** (neighbouring data sets: {p['neighbouring_relation']};
equivalently ({p['add_remove_epsilon']:g}, {p['add_remove_delta']:.3g}) when one trip is added or removed).
Composition: {p['composition']}.

**A passenger is protected per trip, not as a whole.** A passenger with n trips
in one (mode, day) can be told apart only at n times the guarantee (group
privacy: ε·n, and δ·n·e^((n−1)ε)):

| trips in one mode and day | ε | δ |
| --- | --- | --- |
{_group_privacy(p['epsilon'], p['delta'])}
"""


def render_datacard(manifest: dict) -> str:
    """The public data card: what the files are, what the counts mean, what the guarantee means, with numbers."""
    p = manifest["privacy"]
    rows = "\n".join(
        f"| {m['j']} | `{name}` | `{m['file']}.csv` | {m['epsilon']:g} | {m['delta']:.3g} | {m['noise_scale']} | "
        f"{m['threshold']} |" for name, m in p["marginals"].items())
    seen, effects = set(), []
    for m in p["marginals"].values():
        if (m["epsilon"], m["delta"]) not in seen:
            seen.add((m["epsilon"], m["delta"]))
            effects.append(_threshold_effects(m))
    period = manifest["period"]
    unit_words = ("one card: all of its trips in a release's period" if p["unit_of_privacy"] == "card"
                  else "one trip, in the most-spent (mode, day) partition of this period")
    unit = unit_text(p, unit_words)
    cumulative_text = person_text(p) + ("\n" + unit if unit else "")
    return f"""{card_heading(manifest)}

Public-transport tap-on/tap-off counts for {period['start']} to {period['end']},
per mode ({', '.join(manifest['modes'])}) and day, released under differential privacy.

## Files
| file | columns | one row is |
| --- | --- | --- |
| `time.csv` | `mode,date,tap,time,count` | taps in a {manifest['parameters']['bin_minutes']}-minute window (`time` = window start, `-1` = unknown) |
| `location.csv` | `mode,date,tap,loc,count` | taps at a location (bus: postcode; other modes: stop, station or wharf name; `-1` = unknown, e.g. a missing tap-off) |
| `time-loc.csv` | `mode,date,tap,time,loc,count` | taps at a location in a time window |

Each CSV has a Parquet twin with the same rows. `tap` is `on` or `off`. Rows are
sorted by mode, date, tap, time and location. `manifest.json` lists every file's
SHA-256. In the CSV files, {CSV_NOTE}.

## How the counts were made
For each (mode, date) and each of six column combinations, every combination
present in the data got integer noise from the discrete Laplace distribution and
was published only if its noisy count reached a threshold T (the stability-based
histogram of Asghar, Tyler & Kaafar, 2018).

| j | marginal | file | ε | δ | noise scale | threshold T |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

What this means for users:

- **A missing row is not a small count.** A combination absent from a file did
  not occur, or its noisy count fell below T. A true count *at* the threshold is
  dropped about as often as not, and counts well above it are sometimes dropped
  too (table below): do not read an absent row as "fewer than T".
- **Published counts near T are biased upward.** Only noisy counts that cleared
  T are shown, so among published rows those near T are on average above their
  true count (last column below); far above T the bias vanishes.
- **Counts are noisy.** The noise has mean 0 and standard deviation of about
  `1.4 × scale` taps; add rows up to reduce relative error.
- **Files disagree slightly.** Each file got its own noise, so totals over
  `time.csv` and `location.csv` differ.
- **No invented combinations.** Every published (time, location) occurred in the data.

| j (of this ε, δ) | T | P(dropped), true count T−5 | true T | true T+5 | true T+10 | mean published − true, at true T |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(effects)}

## Privacy guarantee
{_guarantee_text(p)}{cumulative_text}
Noise source: {manifest['noise_source']}. Code version: {manifest['code_version']}.
Produced by transit-release; licence of the data: {manifest.get('licence', 'CC BY 4.0')}.
Ledger head at publication: entry {manifest.get('ledger_head', {}).get('seq', '—')},
`{manifest.get('ledger_head', {}).get('hash', '—')}` (anyone holding this file can
check that the privacy ledger's history up to that entry was never rewritten).
"""


def tracking(manifest: dict, utility: pd.DataFrame, quarantine: dict, validations: dict,
             sanitizers: dict) -> dict:
    """What the MLflow run of a release records beyond its spends: tags, params, metrics, and the partitions' own
    figures (:func:`partition_series`, :func:`partition_table`). Internal figures only (utility compares with true
    counts; never published)."""
    privacy = manifest["privacy"]
    tags = {"modes": ",".join(manifest["modes"]), "mode_set": "+".join(sorted(manifest["modes"])),
            "sanitize.runner": sanitizers["runner"]}
    params = {"bin_minutes": manifest["parameters"]["bin_minutes"], "partitions": utility["partition"].nunique(),
              "sanitize.processes": sanitizers["processes"]}
    if "prepare_processes" in sanitizers:
        params["prepare.processes"] = sanitizers["prepare_processes"]
    for name, mp in privacy["marginals"].items():
        params.update({f"{name}.epsilon": mp["epsilon"], f"{name}.delta": mp["delta"],
                       f"{name}.threshold": mp["threshold"], f"{name}.noise_scale": mp["noise_scale"]})
        if "noise_bound" in mp:
            params[f"{name}.noise_bound"] = mp["noise_bound"]
    metrics = {"partitions": utility["partition"].nunique()}
    for f, meta in manifest["files"].items():
        if "rows" in meta and f.endswith(".csv"):
            metrics[f"rows.{f[:-4]}"] = meta["rows"]
    agg = utility.groupby("marginal")[list(UTILITY_METRICS)].mean(numeric_only=True)
    for name in agg.index:
        for k in UTILITY_METRICS:
            metrics[f"{name}.{k}"] = agg.loc[name, k]
    metrics["trip_coverage"] = utility["trip_coverage"].mean()
    metrics.update({"input.rows": quarantine["rows"], "input.quarantined": quarantine["quarantined"],
                    "input.quarantined_share": quarantine["quarantined_share"],
                    **{f"input.quarantined.{r}": c for r, c in quarantine["by_reason"].items()}})
    for name, result in validations.items():
        metrics[f"validation.{name}.success"] = float(result["success"])
    for k, v in quarantine.get("bounding", {}).items():  # card level: what contribution bounding left out
        metrics[f"bounding.{k}"] = v
    released = utility["points_released"].sum()
    if released:  # mean relative error over every released cell (the experiment's figure)
        metrics["mean_rel_error"] = float((utility["mean_rel_error"].fillna(0) * utility["points_released"]).sum()
                                          / released)
    metrics["cells.released"] = float(released)
    for mode, rows in utility.groupby("mode", sort=True):  # each mode's period, beside the whole release's
        cells = rows["points_released"].sum()
        metrics[f"{mode}.cells.released"] = float(cells)
        metrics[f"{mode}.trip_coverage"] = rows["trip_coverage"].mean()
        if cells:
            metrics[f"{mode}.mean_rel_error"] = float((rows["mean_rel_error"].fillna(0) * rows["points_released"])
                                                      .sum() / cells)
    return {"kind": KIND, "mechanism": MECHANISM, "tags": tags, "params": params, "metrics": metrics,
            "series": partition_series(utility, manifest["period"]["start"]),
            "texts": {"partitions.csv": partition_table(utility)},
            "artifacts": {"input_quality.json": {"screen": quarantine, "validations": validations}}}


#: The partitions' figures a release's MLflow run charts day by day (all of :data:`UTILITY_METRICS` are in its
#: ``partitions.csv``).
SERIES_METRICS = ("points_released", "trip_coverage", "mean_rel_error", "total_variation")


def partition_series(utility: pd.DataFrame, period_start: str) -> dict[str, list[tuple[int, int, float]]]:
    """Each partition's figures as MLflow metric histories, keyed by mode and marginal: ``<mode>/<marginal>.<figure>``
    (MLflow's charts group the keys of a mode under its name) with one value per day of the period, at step = the
    day's index in the period (0: its first day; a weekly release's Monday) and at the day's own time. The same
    keys and steps in every release, so that the runs view lays two weeks over each other, day by day."""
    start = pd.Timestamp(period_start)
    out: dict[str, list[tuple[int, int, float]]] = {}
    for r in utility.sort_values(["mode", "marginal", "date"]).itertuples(index=False):
        day = pd.to_datetime(r.date, format="%Y%m%d")
        step, at = int((day - start).days), int(day.tz_localize("UTC").value // 1_000_000)
        for k in SERIES_METRICS:
            out.setdefault(f"{r.mode}/{r.marginal}.{k}", []).append((step, at, getattr(r, k)))
    return out


def partition_table(utility: pd.DataFrame) -> str:
    """Every partition's figures, one row per (partition, marginal), as CSV (``partitions.csv``: MLflow shows it as a
    table)."""
    table = utility.assign(weekday=pd.to_datetime(utility["date"], format="%Y%m%d").dt.day_name())
    columns = ["partition", "mode", "date", "weekday", "marginal", "threshold", *UTILITY_METRICS]
    return table[columns].sort_values(["mode", "date", "marginal"]).to_csv(index=False, float_format="%.6g")


UTILITY_METRICS = ("kept_point_share", "trip_coverage", "mean_abs_error", "max_abs_error", "mean_rel_error",
                   "total_variation", "top_rank_correlation", "points", "points_released")
CSV_NOTE = CSV_NEUTRALISATION
