"""The validation gate's row screening: reason codes, quarantine, file-level aborts.

Row-level problems are quarantined with a reason code (the first that applies,
in the order of :data:`REASONS`); the release goes on only if the quarantined
share is at most ``quality.quarantine_limit``. Problems that mean the *file* is
wrong abort with a message naming the file, what is wrong and the first row
numbers (1 = first data row), never a value.

Why this protects privacy and not only quality: the SBH's sensitivity
argument assumes one row = one trip of one card (duplicates break it), times
inside the day being released, and known modes and stops. The gate makes those
assumptions true of every row that reaches preprocessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
import pandas as pd

from transit_release.config import QualityPolicy
from transit_release.errors import InputDataError
from transit_release.inputs.refusals import refusal

#: Row-level reason codes, in the order they are tested.
REASONS = (
    "unknown_mode",
    "invalid_card_id",
    "missing_tap_on",
    "unknown_stop",
    "tap_off_incomplete",
    "tap_off_before_tap_on",
    "absurd_duration",
    "outside_period",
    "duplicate",
)
MAX_ROWS_NAMED = 5
#: A date holding fewer rows than this share of the median day is not part of an inferred period.
STRAY_DAY_SHARE = 0.05


class QuarantineLimitError(InputDataError):
    """Too many rows had to be quarantined: the file is probably not what it should be."""


class StopTableCoverageError(InputDataError):
    """The stop table does not cover the stops the trips use."""


class PeriodMismatchError(InputDataError):
    """The trips do not cover the release period."""


@dataclass(frozen=True)
class Period:
    start: date
    end: date  # inclusive

    def __post_init__(self):
        if self.end < self.start:
            raise InputDataError(f"release period ends ({self.end}) before it starts ({self.start})")

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range((self.end - self.start).days + 1)]

    def __str__(self) -> str:
        return f"{self.start.isoformat()}..{self.end.isoformat()}"


PERIOD_REQUIRED = ("declare the release period with --period-start and --period-end (YYYY-MM-DD): what is "
                   "published never depends on the data; `--dry-run` shows the period the tap-on dates suggest")


def declared_period(start: str | None, end: str | None, dry_run: bool, suggest) -> Period:
    """The declared period. A publishing run must declare it (the public period, the release id and which days
    are published never depend on the data); a dry run without one uses ``suggest()``, the period the tap-on
    dates suggest."""
    if start is None and end is None:
        if dry_run:
            return suggest()
        raise InputDataError(PERIOD_REQUIRED)
    return parse_period(start, end)


#: The longest release period, in days: one release covers at most a year (a card-level Opal release plans one spend
#: per mode, day and marginal, and the budget caps are per calendar year); release longer spans year by year.
MAX_PERIOD_DAYS = 366


def parse_period(start: str | None, end: str | None) -> Period:
    """``--period-start``/``--period-end`` as a :class:`Period` (both or neither; ISO dates, in order; at most
    :data:`MAX_PERIOD_DAYS` days: a public refusal at once, instead of minutes of planning and reading first)."""
    if start is None or end is None:
        raise InputDataError("give both --period-start and --period-end")
    try:
        period = Period(date.fromisoformat(str(start)), date.fromisoformat(str(end)))
    except ValueError:
        raise InputDataError("--period-start and --period-end must be dates as YYYY-MM-DD") from None
    days = (period.end - period.start).days + 1
    if days > MAX_PERIOD_DAYS:
        raise InputDataError(f"release period {period}: {days:,} days; a release covers at most {MAX_PERIOD_DAYS} "
                             "days (its spends are planned per day, and the budget caps are per calendar year): "
                             "release a longer span period by period")
    return period


def _first_rows(mask: np.ndarray) -> str:
    rows = np.flatnonzero(mask)[:MAX_ROWS_NAMED] + 1
    return ", ".join(str(r) for r in rows)


def infer_period(trips: pd.DataFrame) -> Period:
    """The period the tap-on dates suggest, ignoring stray dates (fewer than 5% of the median day's rows).

    Data-dependent: a suggestion for a dry run, never the period of a publishing run."""
    return infer_period_from_days(trips["tap_on_time"].dropna().dt.normalize().value_counts())


def infer_period_from_days(days: pd.Series) -> Period:
    """:func:`infer_period` from the number of rows per tap-on date."""
    if days.empty:
        raise InputDataError("trips: no row has a tap-on time, so the release period cannot be inferred")
    kept = days[days >= max(1.0, STRAY_DAY_SHARE * float(days.median()))]
    return Period(kept.index.min().date(), kept.index.max().date())


@dataclass(frozen=True)
class ScreenResult:
    clean: pd.DataFrame
    quarantined: pd.DataFrame  # raw rows: private, never logged or published
    counts: dict[str, int]
    total_rows: int
    reason: np.ndarray  # per input row: 0 clean, k = REASONS[k - 1]
    unknown_stop: np.ndarray  # per input row (also where another reason came first)
    unknown_stop_ids: int  # distinct stop ids missing from the table
    clean_per_day: np.ndarray  # clean rows per day of the period
    period: Period

    @property
    def quarantined_rows(self) -> int:
        return _figures(self).quarantined_rows

    @property
    def share(self) -> float:
        return _figures(self).share

    def summary(self) -> dict:
        """Counts only: safe for logs, MLflow and reports."""
        return _figures(self).summary()


_NS_PER_MIN = 60_000_000_000
_NS_PER_DAY = 1440 * _NS_PER_MIN
_NAT = np.iinfo(np.int64).min


def _ints(s: pd.Series) -> np.ndarray:
    """A column as int64, -1 for missing (ids are non-negative)."""
    if s.dtype == np.int64:
        return s.to_numpy()
    return s.astype("Int64").to_numpy(dtype=np.int64, na_value=-1)


def _ns(s: pd.Series) -> np.ndarray:
    """Timestamps as int64 nanoseconds, NaT as the int64 minimum."""
    return s.to_numpy(dtype="datetime64[ns]").view(np.int64)


def _row_hash(*columns: np.ndarray) -> np.ndarray:
    """A 64-bit polynomial hash of int64 columns (wrapping arithmetic); collisions only cost time."""
    h = np.zeros(columns[0].size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            h = h * np.uint64(0x100000001B3) + c.view(np.uint64)
    return h


def _exact_duplicates(df: pd.DataFrame, columns: list[np.ndarray]) -> np.ndarray:
    """Rows equal in every column to an earlier row: hash and sort first, then compare the candidates exactly."""
    h = _row_hash(*columns)
    hs = np.sort(h)
    repeated = hs[1:][hs[1:] == hs[:-1]]
    out = np.zeros(len(df), dtype=bool)
    if repeated.size:
        candidates = np.isin(h, repeated)
        out[candidates] = df.loc[candidates].duplicated(keep="first").to_numpy()
    return out


def stop_lookup(stops: pd.DataFrame, modes: tuple[str, ...], mode_code: np.ndarray):
    """``known(stop_ids)``: whether each (stop id, the row's mode) is in the stop table (vectorised)."""
    stop_mode = np.array([modes.index(m) if m in modes else -1 for m in stops["mode"]], dtype=np.int64)
    table = np.sort(stops["stop_id"].to_numpy(dtype=np.int64) * 8 + stop_mode)
    dense = None
    if table.size and 0 <= table[0] and table[-1] < 64_000_000:  # small ids: a direct lookup table
        dense = np.zeros(int(table[-1]) + 1, dtype=bool)
        dense[table] = True

    def known(ids: np.ndarray) -> np.ndarray:
        if table.size == 0:
            return np.zeros(ids.size, dtype=bool)
        key = ids * 8 + mode_code
        valid = (ids >= 0) & (mode_code >= 0)
        if dense is not None:
            inside = valid & (key < dense.size)
            out = np.zeros(ids.size, dtype=bool)
            out[inside] = dense[key[inside]]
            return out
        pos = np.searchsorted(table, key).clip(0, table.size - 1)
        return (table[pos] == key) & valid

    return known


def mode_codes(trips: pd.DataFrame, modes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(raw factor codes, index into ``modes`` or -1) of each row's mode."""
    raw_codes, uniques = pd.factorize(trips["mode"], use_na_sentinel=True)
    lookup = np.array([modes.index(u) if u in modes else -1 for u in uniques] + [-1], dtype=np.int64)
    return raw_codes, lookup[raw_codes]  # raw_codes == -1 (missing) picks the trailing -1


@dataclass(frozen=True)
class RowScreen:
    """The row-local part of the screen for one frame (a whole file or one batch of it): every reason but
    ``duplicate``, which needs the rows of a whole partition, and the integer columns the later steps use."""

    reason: np.ndarray  # int8 per row: 0 clean so far, k = REASONS[k - 1]
    unknown_stop: np.ndarray  # per row (also where another reason came first)
    unknown_ids: np.ndarray  # the distinct stop ids missing from the table (sorted)
    mode_code: np.ndarray  # index into ``modes`` or -1
    raw_codes: np.ndarray  # factor codes of the raw mode text (for the exact-duplicate test)
    day: np.ndarray  # day of the tap-on within the period (-1 missing; may be outside 0..n_days-1)
    card: np.ndarray
    on_ns: np.ndarray
    on_stop: np.ndarray
    off_ns: np.ndarray  # int64 minimum when missing
    off_stop: np.ndarray  # -1 when missing


def screen_rows(trips: pd.DataFrame, stops: pd.DataFrame, period: Period, quality: QualityPolicy,
                modes: tuple[str, ...]) -> RowScreen:
    """Give every row its first failing row-local reason (all of :data:`REASONS` but ``duplicate``)."""
    n = len(trips)
    reason = np.zeros(n, dtype=np.int8)  # 0 = clean, k = REASONS[k - 1]

    def mark(code: str, bad: np.ndarray) -> None:
        reason[(reason == 0) & bad] = REASONS.index(code) + 1

    raw_codes, mode_code = mode_codes(trips, modes)
    mark("unknown_mode", mode_code < 0)
    card = _ints(trips["card_id"])
    mark("invalid_card_id", card < 0)
    on_ns, off_ns = _ns(trips["tap_on_time"]), _ns(trips["tap_off_time"])
    on_stop, off_stop = _ints(trips["tap_on_stop"]), _ints(trips["tap_off_stop"])
    mark("missing_tap_on", (on_ns == _NAT) | (on_stop < 0))

    known = stop_lookup(stops, modes, mode_code)
    off_present = off_stop >= 0
    # rows of an unknown mode are "unknown_mode", not evidence against the stop table
    unknown_stop = (mode_code >= 0) & (~known(on_stop) | (off_present & ~known(off_stop)))
    mark("unknown_stop", unknown_stop)
    off_time_present = off_ns != _NAT
    mark("tap_off_incomplete", off_time_present != off_present)
    both = off_time_present & (on_ns != _NAT)
    duration = np.where(both, off_ns - on_ns, 0)
    mark("tap_off_before_tap_on", both & (duration < 0))
    mark("absurd_duration", both & (duration > quality.max_trip_minutes * _NS_PER_MIN))
    start_ns = pd.Timestamp(period.start).value
    day = np.where(on_ns == _NAT, -1, (on_ns - start_ns) // _NS_PER_DAY)
    n_days = len(period.days)
    mark("outside_period", (day < 0) | (day >= n_days))
    ids = np.unique(np.concatenate([on_stop[unknown_stop & ~known(on_stop)], off_stop[unknown_stop & off_present]]))
    return RowScreen(reason=reason, unknown_stop=unknown_stop, unknown_ids=ids, mode_code=mode_code,
                     raw_codes=raw_codes, day=day, card=card, on_ns=on_ns, on_stop=on_stop, off_ns=off_ns,
                     off_stop=off_stop)


def mark_duplicates(trips: pd.DataFrame, rs: RowScreen) -> None:
    """Give ``duplicate`` to every clean row equal in every column to an earlier row of ``trips`` (equal rows
    have equal row-local reasons, so the first of them is clean too)."""
    dup = _exact_duplicates(trips, [rs.card, rs.raw_codes.astype(np.int64), rs.on_ns, rs.on_stop, rs.off_ns,
                                    rs.off_stop])
    rs.reason[(rs.reason == 0) & dup] = REASONS.index("duplicate") + 1


def screen_trips(trips: pd.DataFrame, stops: pd.DataFrame, period: Period, quality: QualityPolicy,
                 modes: tuple[str, ...]) -> ScreenResult:
    """Give every row its first failing reason; return the clean rows and the quarantine (a whole frame in
    memory; the Opal release streams instead, see :mod:`transit_release.inputs.streaming`)."""
    rs = screen_rows(trips, stops, period, quality, modes)
    mark_duplicates(trips, rs)
    reason = rs.reason
    n_days = len(period.days)
    bad = reason > 0
    counts = {r: int(c) for r, c in zip(REASONS, np.bincount(reason, minlength=len(REASONS) + 1)[1:]) if c}
    quarantined = trips.loc[bad].copy()
    quarantined.insert(0, "reason", np.array(REASONS, dtype=object)[reason[bad] - 1])
    quarantined.insert(0, "row", np.flatnonzero(bad) + 1)
    clean = trips.loc[~bad].reset_index(drop=True) if bad.any() else trips.reset_index(drop=True)
    clean_days = np.bincount(rs.day[~bad], minlength=n_days)[:n_days] if n_days else np.zeros(0, np.int64)
    return ScreenResult(clean=clean, quarantined=quarantined.reset_index(drop=True), counts=counts,
                        total_rows=len(trips), reason=reason, unknown_stop=rs.unknown_stop,
                        unknown_stop_ids=int(rs.unknown_ids.size), clean_per_day=clean_days, period=period)


@dataclass(frozen=True)
class GateFigures:
    """What the gate decides on: counts and the first row numbers (1-based) of two reasons, whether the rows
    were screened in one frame (:meth:`ScreenResult.figures`) or batch by batch (the streaming pass)."""

    total_rows: int
    counts: dict[str, int]
    unknown_stop_rows: int
    unknown_stop_first: tuple[int, ...]
    unknown_stop_ids: int
    outside_rows: int
    outside_first: tuple[int, ...]
    clean_per_day: np.ndarray
    period: Period

    @property
    def quarantined_rows(self) -> int:
        return int(sum(self.counts.values()))

    @property
    def share(self) -> float:
        return self.quarantined_rows / self.total_rows if self.total_rows else 0.0

    def summary(self) -> dict:
        """Counts only: safe for logs, MLflow and reports."""
        return {"rows": self.total_rows, "quarantined": self.quarantined_rows,
                "quarantined_share": self.share, "by_reason": dict(self.counts)}


def _figures(result: ScreenResult) -> GateFigures:
    outside = result.reason == REASONS.index("outside_period") + 1
    first = lambda mask: tuple(int(r) + 1 for r in np.flatnonzero(mask)[:MAX_ROWS_NAMED])  # noqa: E731
    return GateFigures(total_rows=result.total_rows, counts=dict(result.counts),
                       unknown_stop_rows=int(result.unknown_stop.sum()), unknown_stop_first=first(result.unknown_stop),
                       unknown_stop_ids=result.unknown_stop_ids, outside_rows=int(outside.sum()),
                       outside_first=first(outside), clean_per_day=result.clean_per_day, period=result.period)


def check_gate(result: ScreenResult | GateFigures, quality: QualityPolicy) -> None:
    """Problems that mean the file (not a few rows) is wrong: raise, naming what and where."""
    f = result if isinstance(result, GateFigures) else _figures(result)
    n = f.total_rows
    limit = quality.quarantine_limit
    period = f.period
    rows = lambda first: ", ".join(str(r) for r in first)  # noqa: E731
    if n < quality.min_rows or n > quality.max_rows:
        raise refusal("row-count", InputDataError(
            f"{n:,} data rows, outside the allowed {quality.min_rows:,}..{quality.max_rows:,}"))
    if f.unknown_stop_rows > limit * n:
        raise refusal("unknown-stops", StopTableCoverageError(
            f"the stop table does not cover the trips: {f.unknown_stop_rows:,} rows "
            f"({f.unknown_stop_rows / n:.1%}) use stops missing from it for their mode "
            f"({f.unknown_stop_ids:,} distinct stop ids), first at row(s) {rows(f.unknown_stop_first)}"))
    if f.outside_rows > limit * n:
        raise refusal("outside-period", PeriodMismatchError(
            f"the trips do not match the release period {period}: {f.outside_rows:,} rows ({f.outside_rows / n:.1%}) "
            f"fall outside it, first at row(s) {rows(f.outside_first)}"))
    if f.share > limit:
        parts = ", ".join(f"{r} {c:,}" for r, c in f.counts.items())
        raise refusal("quarantine-share", QuarantineLimitError(
            f"{f.quarantined_rows:,} of {n:,} rows ({f.share:.2%}) would be quarantined, more than the "
            f"limit of {limit:.2%}: {parts}"))
    missing = [d for d, c in zip(period.days, f.clean_per_day) if c == 0]
    if missing:
        listed = ", ".join(d.isoformat() for d in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise refusal("empty-day", PeriodMismatchError(
            f"the trips do not cover the release period {period}: no trips on {listed}"))
