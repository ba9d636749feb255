"""The Opal release's input in bounded memory: one streaming pass, then one step per partition.

**The pass** (:func:`stream_trips`) reads the trips file in record batches
(pyarrow's streaming CSV reader, or a Parquet file's row groups) and, batch by
batch, applies the file contract (pandera ``TripsFile``), the row-local part of
the screen (every reason but ``duplicate``) and splits the rows that pass by
partition (mode, date of the declared period). It writes

- each batch's quarantined raw rows (with their row number and reason) to a
  fragment of the quarantine, under ``private/`` only;
- each batch's clean rows of each partition to that partition's *spill*
  (``<spill>/mode=<m>/date=<YYYYMMDD>/b<batch>.arrow``): the row number, the
  card id and the four tap columns as integers;

and keeps only counts (per reason, the first row numbers the gate names, the
distinct unknown stop ids). No process ever holds more than one batch.

**The partition step** (:func:`load_spill`, :func:`duplicates`,
:func:`bound_rows`, :func:`encode_partition`) runs once per partition, in any
process that sees the spill (a Dask worker): the exact repeats of a row — which
may come from different batches but always fall in the same partition, as
equal rows have the same mode and tap-on date — are found there, in file order,
so "a duplicate is a row equal to an earlier row" keeps its meaning; the card
level's per-(card, partition) bound is applied there with the same keyed
priorities as the in-memory path; then the card id is dropped and the rows are
encoded (time bins, location codes) into the partition dataset the sanitizers
read. The spill is deleted once its partition is encoded: the card id goes no
further than the spill.

The result equals the in-memory path (:func:`~transit_release.inputs.screening.screen_trips`,
:func:`~transit_release.releases.opal.bound_card_contributions`,
:func:`~transit_release.preprocessing.encode_trips`) row for row; the tests
compare them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq

from transit_release.config import QualityPolicy
from transit_release.errors import InputDataError, TransitReleaseError
from transit_release.inputs import screening
from transit_release.inputs.refusals import refusal
from transit_release.inputs.screening import MAX_ROWS_NAMED, REASONS, GateFigures, Period
from transit_release.inputs.tables import (BLOCK_BYTES, TRIP_COLUMN_TYPES, _explain, check_stored_types, file_format,
                                           integers_from_text, parse_local_times, text_problems, text_times, to_frame)

#: CSV bytes per batch (about half a million trips): what one contract and screen call gets.
BATCH_BYTES = 1 << 25
#: The CSV reader's block (a row must fit in one); blocks are grouped into batches. The reader keeps a couple of
#: dozen blocks in flight whatever the consumer does, so its memory is set by this, not by the batch.
READ_BLOCK_BYTES = 1 << 23
#: Rows per batch of a Parquet file.
PARQUET_BATCH_ROWS = 1 << 20
#: The spill's columns: the row number (0-based, in the file), the card id and the taps as integers.
SPILL_COLUMNS = ("row", "card", "on_ns", "on_stop", "off_ns", "off_stop")
NAT = np.iinfo(np.int64).min
NS_PER_MIN = 60_000_000_000
_NS_PER_DAY = 1440 * NS_PER_MIN


class TextNeeded(Exception):
    """A value did not parse with its column's type: the file is read again as text to say where."""


def partition_labels(period: Period, modes: tuple[str, ...]) -> list[tuple[str, str]]:
    """The public partitions of the period, in code order: code = mode index × days + day index."""
    return [(m, d.strftime("%Y%m%d")) for m in modes for d in period.days]


def _batches(path: Path, text: bool, batch_bytes: int) -> Iterator[pa.RecordBatch | pa.Table]:
    if file_format(path) == "parquet":
        with pq.ParquetFile(path) as pf:
            check_stored_types(pf.schema_arrow, TRIP_COLUMN_TYPES, f"trips file {path.name}")
            yield from pf.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        return
    read = pacsv.ReadOptions(block_size=min(batch_bytes, READ_BLOCK_BYTES))
    if text:
        with pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES)) as probe:
            names = probe.schema.names
        convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                       null_values=[""])
    else:
        convert = pacsv.ConvertOptions(column_types=text_times(TRIP_COLUMN_TYPES), strings_can_be_null=True,
                                       null_values=[""])

    def batch(group: list[pa.RecordBatch]) -> pa.Table:
        table = pa.Table.from_batches(group).combine_chunks()
        if text:
            return table
        typed = parse_local_times(table, TRIP_COLUMN_TYPES)
        if typed is None:  # a time that is not a local time: the file is read again as text, to say where
            raise TextNeeded()
        return typed

    with pacsv.open_csv(path, read_options=read, convert_options=convert) as reader:
        group, size = [], 0
        for block in reader:
            group.append(block)
            size += block.nbytes
            if size >= batch_bytes:
                yield batch(group)
                group, size = [], 0
        if group:
            yield batch(group)


#: Batches read ahead of the one being screened (each about 32 MiB of CSV).
READ_AHEAD = 2


def _read_ahead(batches: Iterator, depth: int = READ_AHEAD) -> Iterator:
    """``batches``, produced by a thread of its own up to ``depth`` ahead of the consumer: Arrow reads and
    parses the next batch (without the GIL) while this thread screens the current one. The reader's errors
    are raised here, as if it ran in this thread; when the consumer stops early, the reader stops at its next
    batch and its file is closed."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for b in batches:
                if not put((b, None)):
                    break
        except BaseException as exc:  # noqa: BLE001 — handed to the consumer, which raises it
            put((None, exc))
            return
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        put((done, None))

    reader = threading.Thread(target=produce, name="trips-reader", daemon=True)
    reader.start()
    try:
        while True:
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is done:
                return
            yield item
            del item
    finally:
        stop.set()
        reader.join()


def trip_frames(path: str | Path, text: bool = False,
                batch_bytes: int | None = None) -> Iterator[tuple[int, pd.DataFrame, dict]]:
    """(first row's position in the file, the batch as a frame, its text problems) for each batch.

    Typed reading raises :class:`TextNeeded` where a value does not parse; read again with ``text=True``
    (as :func:`~transit_release.inputs.tables.read_table` does): times read as text must then be local
    times and integers whole numbers (``200782.0`` is refused, not rounded). A Parquet file's stored types are
    checked first (:func:`~transit_release.inputs.tables.check_stored_types`). Errors name the file and the
    problem, never a value."""
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"trips file {path}: not found")
    fmt = file_format(path)
    batch_bytes = batch_bytes or BATCH_BYTES  # read when called: a test may make the batches small
    offset = 0
    try:
        for batch in _read_ahead(_batches(path, text, batch_bytes)):
            df = to_frame(batch)
            del batch
            # columns that arrive as text (a CSV read as text, or a Parquet file that stores them as strings):
            # times must be local times, integers whole numbers — as a whole-file read checks them
            time_problems = text_problems(df, TRIP_COLUMN_TYPES, offset)
            yield offset, integers_from_text(df, TRIP_COLUMN_TYPES), time_problems
            offset += len(df)
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            raise InputDataError(f"trips file {path.name}: the file is empty (no header row)") from None
        if fmt == "csv" and not text:
            raise TextNeeded() from None
        why = _explain(exc, min(batch_bytes, READ_BLOCK_BYTES))
        raise InputDataError(f"trips file {path.name}: cannot be read as {fmt}: {why}") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        why = _explain(exc, min(batch_bytes, READ_BLOCK_BYTES))
        raise InputDataError(f"trips file {path.name}: cannot be read as {fmt}: {why}") from None


@dataclass
class ScreenTally:
    """The screen's figures gathered batch by batch (counts and the first row numbers only)."""

    period: Period
    n_modes: int
    rows: int = 0
    by_reason: np.ndarray = field(default_factory=lambda: np.zeros(len(REASONS) + 1, dtype=np.int64))
    unknown_stop_rows: int = 0
    unknown_stop_first: list[int] = field(default_factory=list)
    unknown_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    outside_rows: int = 0
    outside_first: list[int] = field(default_factory=list)
    spilled: np.ndarray | None = None  # clean rows per partition code (mode index × days + day index)
    batches: int = 0

    def __post_init__(self):
        if self.spilled is None:
            self.spilled = np.zeros(self.n_modes * len(self.period.days), dtype=np.int64)

    @property
    def complete(self) -> bool:
        """Did the pass find every duplicate? Yes when the file was one batch (a repeat in another batch is
        found by its partition's step): the gate can then be applied before any partition is prepared."""
        return self.batches <= 1

    def add(self, rs: screening.RowScreen, code: np.ndarray, offset: int) -> None:
        """One batch's screen; ``code`` is each clean row's partition code (-1 for the others)."""
        self.batches += 1
        self.spilled += np.bincount(code[code >= 0], minlength=self.spilled.size)
        self.rows += rs.reason.size
        self.by_reason += np.bincount(rs.reason, minlength=len(REASONS) + 1)
        self.unknown_stop_rows += int(rs.unknown_stop.sum())
        _extend_first(self.unknown_stop_first, rs.unknown_stop, offset)
        outside = rs.reason == REASONS.index("outside_period") + 1
        self.outside_rows += int(outside.sum())
        _extend_first(self.outside_first, outside, offset)
        self.unknown_ids = np.union1d(self.unknown_ids, rs.unknown_ids)

    def spilled_rows(self, modes: tuple[str, ...]) -> dict[tuple[str, str], int]:
        """Rows the pass spilled per partition: what the partition steps must account for, row for row."""
        return {lab: int(n) for lab, n in zip(partition_labels(self.period, modes), self.spilled)}

    def figures(self, duplicates_per_day: np.ndarray | None = None) -> GateFigures:
        """The gate's figures, with the repeats the partition steps found across batches (per day)."""
        n_days = len(self.period.days)
        extra = np.zeros(n_days, np.int64) if duplicates_per_day is None else np.asarray(duplicates_per_day)
        counts = self.by_reason[1:].copy()
        counts[REASONS.index("duplicate")] += int(extra.sum())
        clean_per_day = self.spilled.reshape(self.n_modes, n_days).sum(axis=0) - extra
        return GateFigures(
            total_rows=self.rows, counts={r: int(c) for r, c in zip(REASONS, counts) if c},
            unknown_stop_rows=self.unknown_stop_rows, unknown_stop_first=tuple(self.unknown_stop_first),
            unknown_stop_ids=int(self.unknown_ids.size), outside_rows=self.outside_rows,
            outside_first=tuple(self.outside_first), clean_per_day=clean_per_day, period=self.period)


def _extend_first(first: list[int], mask: np.ndarray, offset: int) -> None:
    if len(first) < MAX_ROWS_NAMED:
        first.extend(int(r) + offset + 1 for r in np.flatnonzero(mask)[:MAX_ROWS_NAMED - len(first)])


@dataclass(frozen=True)
class StreamedTrips:
    """What the pass leaves: where the spill and the quarantine's fragments are, and the figures so far."""

    spill: Path
    quarantine_parts: tuple[Path, ...]
    tally: ScreenTally


def stream_trips(path: str | Path, stops: pd.DataFrame, period: Period, quality: QualityPolicy,
                 modes: tuple[str, ...], spill: Path, quarantine_parts: Path, validate_batch,
                 batch_bytes: int | None = None) -> StreamedTrips:
    """The one pass: contract, row-local screen, quarantine fragments and per-partition spill.

    ``validate_batch(frame, row_offset)`` is the file contract: it returns (the coerced frame or None, its
    problems by (column, check) with file positions), e.g. ``schemas.validation.check`` with ``TripsFile``.
    Contract problems are gathered over the whole file and raised at its end (the message of a whole-file
    validation); a problem of the columns themselves is raised at once. Raises before anything is returned;
    ``spill`` and ``quarantine_parts`` are the caller's to remove on failure.
    """
    from transit_release.inputs.problems import ProblemTally

    for text in (False, True):
        try:
            return _pass(Path(path), text, stops, period, quality, modes, spill, quarantine_parts, validate_batch,
                         batch_bytes)
        except TextNeeded:
            continue
    raise AssertionError("unreachable")


def _pass(path: Path, text: bool, stops, period, quality, modes, spill, quarantine_parts, validate_batch,
          batch_bytes) -> StreamedTrips:
    from transit_release.inputs.problems import ProblemTally

    where = f"trips file {path.name}"
    labels = partition_labels(period, modes)
    n_days = len(period.days)
    _reset(spill, quarantine_parts)
    tally = ScreenTally(period, len(modes))
    times, contract = ProblemTally(where, sort_keys=False), ProblemTally(where)
    parts: list[Path] = []
    with closing(trip_frames(path, text, batch_bytes)) as frames:  # its reader thread stops with the pass
        for batch_no, (offset, df, time_problems) in enumerate(frames):
            times.add(time_problems)
            if times:
                continue  # as a whole-file read: bad times are reported before anything else
            frame, problems = validate_batch(df, offset)
            contract.add(problems)
            if contract.column_level:
                contract.raise_if_any()
            if contract:
                continue  # keep counting the contract's problems; nothing more is done with the file
            rs = screening.screen_rows(frame, stops, period, quality, modes)
            screening.mark_duplicates(frame, rs)  # within the batch; repeats across batches: the partition steps
            bad = rs.reason > 0
            code = np.where(bad, -1, rs.mode_code.astype(np.int64) * n_days + rs.day)
            tally.add(rs, code, offset)
            if bad.any():
                q = frame.loc[bad].copy()
                q.insert(0, "reason", np.array(REASONS, dtype=object)[rs.reason[bad] - 1])
                q.insert(0, "row", np.flatnonzero(bad) + offset + 1)
                part = quarantine_parts / f"a{batch_no:06d}.parquet"
                q.to_parquet(part, index=False)
                parts.append(part)
            _spill_batch(spill, batch_no, rs, code, offset, labels)
    times.raise_if_any()
    if tally.rows == 0 and not contract:
        raise refusal("row-count", InputDataError(f"{where}: no data rows (header only)"))
    contract.raise_if_any()
    return StreamedTrips(spill, tuple(parts), tally)


def _reset(*dirs: Path) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True, mode=0o700)


def spill_dir(spill: Path, mode: str, date: str) -> Path:
    return Path(spill) / f"mode={mode}" / f"date={date}"


def _spill_batch(spill: Path, batch_no: int, rs: screening.RowScreen, code: np.ndarray, offset: int,
                 labels: list[tuple[str, str]]) -> None:
    rows = np.flatnonzero(code >= 0)
    if not rows.size:
        return
    code = code[rows]
    order = np.argsort(code, kind="stable")
    rows, code = rows[order], code[order]
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    ends = np.r_[starts[1:], rows.size]
    columns = {"row": rows + offset, "card": rs.card, "on_ns": rs.on_ns, "on_stop": rs.on_stop,
               "off_ns": rs.off_ns, "off_stop": rs.off_stop}
    for s, e in zip(starts, ends):
        mode, date = labels[int(code[s])]
        sel = rows[s:e]
        table = pa.table({name: (col[s:e] if name == "row" else col[sel]).astype(np.int64, copy=False)
                          for name, col in columns.items()})
        target = spill_dir(spill, mode, date)
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        feather.write_feather(table, target / f"b{batch_no:06d}.arrow", compression="uncompressed")


# ---- the partition step ---------------------------------------------------------------------------------

def load_spill(spill: Path, mode: str, date: str) -> dict[str, np.ndarray]:
    """A partition's spilled rows in file order (empty arrays if it has none)."""
    folder = spill_dir(spill, mode, date)
    files = sorted(folder.glob("b*.arrow")) if folder.is_dir() else []
    if not files:
        return {c: np.zeros(0, dtype=np.int64) for c in SPILL_COLUMNS}
    tables = [feather.read_table(f, memory_map=False) for f in files]
    cols = {c: np.concatenate([t.column(c).to_numpy() for t in tables]) for c in SPILL_COLUMNS}
    del tables
    row = cols["row"]
    if row.size < 2 or bool((row[1:] > row[:-1]).all()):  # as the pass writes them: no reordering (0.2 s a week)
        return cols
    order = np.argsort(row, kind="stable")
    return {c: v[order] for c, v in cols.items()}


def remove_spill(spill: Path, mode: str, date: str) -> None:
    shutil.rmtree(spill_dir(spill, mode, date), ignore_errors=True)


def duplicates(rows: dict[str, np.ndarray]) -> np.ndarray:
    """Rows equal in every column to an earlier row of the partition (the rows are in file order)."""
    cols = [rows[c] for c in SPILL_COLUMNS[1:]]
    n = cols[0].size
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    h = screening._row_hash(*cols)
    hs = np.sort(h)
    repeated = hs[1:][hs[1:] == hs[:-1]]
    if repeated.size:
        cand = np.flatnonzero(np.isin(h, repeated))
        frame = pd.DataFrame({i: c[cand] for i, c in enumerate(cols)})
        out[cand] = frame.duplicated(keep="first").to_numpy()
    return out


def raw_rows(rows: dict[str, np.ndarray], mode: str, mask: np.ndarray, reason: str) -> pd.DataFrame:
    """Some spilled rows as the raw columns (for the quarantine), with their row number and reason."""
    n = int(mask.sum())
    off_stop = rows["off_stop"][mask]
    return pd.DataFrame({
        "row": rows["row"][mask] + 1,
        "reason": np.full(n, reason, dtype=object),
        "card_id": pd.array(rows["card"][mask], dtype="Int64"),
        "mode": pd.array(np.full(n, mode, dtype=object), dtype="string"),
        "tap_on_time": rows["on_ns"][mask].view("datetime64[ns]"),
        "tap_on_stop": pd.array(rows["on_stop"][mask], dtype="Int64"),
        "tap_off_time": rows["off_ns"][mask].view("datetime64[ns]"),  # the int64 minimum is NaT
        "tap_off_stop": pd.Series(off_stop, dtype="Int64").mask(off_stop < 0),
    })


def minutes(ns: np.ndarray) -> np.ndarray:
    """Nanosecond times as whole minutes since the epoch (missing stays the int64 minimum)."""
    return np.where(ns == NAT, NAT, ns // NS_PER_MIN)


def bounding_columns(rows: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The columns that tell a card's rows in one partition apart, as the in-memory bounding uses them:
    the tap times in minutes and the stops (a missing tap-off stop as -1)."""
    return [minutes(rows["on_ns"]), rows["on_stop"], minutes(rows["off_ns"]), rows["off_stop"]]


@dataclass(frozen=True)
class PartitionPairs:
    """A partition's (card, partition) pairs after the per-partition bound: the cards (ascending), how many of
    each card's rows the bound kept and whether it dropped any. Private (card ids): a file under the run's
    work directory, read by the flow for the partitions-per-card bound, never a task's result.

    Stored sharded by card (:func:`card_shard`): the pairs of shard ``s`` are one contiguous slice of the file,
    so the partitions-per-card bound can take the period's pairs one shard at a time."""

    cards: np.ndarray
    rows_kept: np.ndarray
    over: np.ndarray

    def save(self, path: Path, shards: int) -> None:
        """``path`` (``.npy``: card, rows kept, over, pair index per row, ordered by shard) and its
        ``.offsets.npy`` (the ``shards + 1`` slice bounds)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shard = card_shard(self.cards, shards)
        order = np.argsort(shard, kind="stable")  # cards stay ascending within a shard
        table = np.stack([self.cards, self.rows_kept, self.over.astype(np.int64),
                          np.arange(self.cards.size, dtype=np.int64)], axis=1)[order]
        np.save(path, table)
        np.save(_offsets(path), np.searchsorted(shard[order], np.arange(shards + 1)))


class _PairsFile:
    """Rows ``[a, b)`` of a saved pairs table, read from the file (not memory-mapped: mapped pages would stay
    resident, and the whole period's pairs would count in the process's memory)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            shape, _, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(fh))
            self.data_offset = fh.tell()
        self.width, self.dtype = shape[1], np.dtype(dtype)

    def rows(self, a: int, b: int) -> np.ndarray:
        if b <= a:
            return np.zeros((0, self.width), dtype=self.dtype)
        with open(self.path, "rb") as fh:
            fh.seek(self.data_offset + int(a) * self.width * self.dtype.itemsize)
            return np.fromfile(fh, dtype=self.dtype, count=int(b - a) * self.width).reshape(-1, self.width)


def _offsets(path: Path) -> Path:
    return Path(path).with_suffix(".offsets.npy")


def card_shard(cards: np.ndarray, shards: int) -> np.ndarray:
    """A card's shard (balanced whatever the ids look like: a bijective 64-bit mix, then modulo)."""
    from transit_release.mechanisms.contribution_bounding import _fmix64

    return (_fmix64(np.asarray(cards, dtype=np.int64).view(np.uint64).copy()) % np.uint64(shards)).astype(np.int64)


def pairs_path(pairs: Path, mode: str, date: str) -> Path:
    return Path(pairs) / f"{mode}-{date}.npy"


def bound_rows(rows: dict[str, np.ndarray], max_rows: int, noise, label: str) -> tuple[np.ndarray, np.ndarray,
                                                                                           PartitionPairs]:
    """Card level, in one partition: keep at most ``max_rows`` rows per card (the in-memory path's keyed
    priorities and noise stream, so the same rows). Returns (kept mask, each row's pair index, the pairs)."""
    from transit_release.mechanisms.contribution_bounding import choose_rows

    kept, cards, pair = choose_rows(rows["card"], bounding_columns(rows), max_rows, noise, label)
    per_pair = np.bincount(pair, minlength=cards.size)
    kept_per_pair = np.bincount(pair[kept], minlength=cards.size)
    return kept, pair, PartitionPairs(cards, kept_per_pair, kept_per_pair < per_pair)


def encode_partition(rows: dict[str, np.ndarray], mode_index: int, index, bin_minutes: int,
                     kept: np.ndarray | None = None, pair: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The partition's rows as the sanitizers read them: time bins, location codes, the bound's flag (and,
    at the card level, each row's pair index for the partitions-per-card bound); no card id."""
    from transit_release.preprocessing import encode_rows

    n = rows["row"].size
    out = encode_rows(np.full(n, mode_index, dtype=np.int8), rows["on_ns"], rows["on_stop"], rows["off_ns"],
                      rows["off_stop"], index, bin_minutes)
    out["kept"] = np.ones(n, dtype=bool) if kept is None else kept
    if pair is not None:
        out["pair"] = pair.astype(np.int32)
    return out


@dataclass(frozen=True)
class PreparedPartition:
    """What the partition step tells the flow: counts and verdicts only (never rows or ids)."""

    mode: str
    date: str
    rows: int  # clean rows, after the duplicates
    duplicates: int
    tap_off_missing: int
    kept: int  # after the per-partition bound (card level; = rows at the trip level)
    checks: dict  # the partition's validation results (counts only)
    entry: object  # partition_store.StoredPartition, or None when the partition holds no trip
    process: str = ""

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.date}"


def prepare_partition(spill: Path, staging: Path, quarantine_parts: Path, pairs: Path, mode: str, date: str,
                      mode_index: int, index, bin_minutes: int, max_rows: int | None, noise,
                      check_clean, check_encoded, shards: int = 1, content: Path | None = None) -> PreparedPartition:
    """The partition step: duplicates to the quarantine, the clean rows' checks (``check_clean(rows)`` raises if
    the rows break their contract; what it returns is kept as the partition's ``checks``: the flow's tasks
    return aggregates there, which the partitions' suite then replaces by its results), the content of the clean
    rows (their digest and distinct card ids, to ``content``: :mod:`transit_release.inputs.content`), the
    per-partition bound (``max_rows``, card level; its pairs saved in ``shards`` card shards), the encoding and
    its check (``check_encoded(encoded)``), the partition's file; then the spill of the partition is removed."""
    from transit_release.files import partition_store
    from transit_release.inputs import content as contents

    for stale in (pairs_path(pairs, mode, date), _offsets(pairs_path(pairs, mode, date))):
        stale.unlink(missing_ok=True)  # a re-run of this step (Dask re-runs a task whose worker died)
    rows = load_spill(spill, mode, date)
    dup = duplicates(rows)
    if dup.any():
        raw_rows(rows, mode, dup, "duplicate").to_parquet(Path(quarantine_parts) / f"d-{mode}-{date}.parquet",
                                                          index=False)
        rows = {c: v[~dup] for c, v in rows.items()}
    checks = check_clean(rows)
    kept = pair = None
    if max_rows is not None:
        kept, pair, pp = bound_rows(rows, max_rows, noise, f"{mode}/{date}")
        if pp.cards.size:
            pp.save(pairs_path(pairs, mode, date), shards)
    n = rows["row"].size
    encoded = encode_partition(rows, mode_index, index, bin_minutes, kept, pair)
    if content is not None:  # what the overlap check between populations compares (private: the run's work dir)
        keys = {(tap, as_id): contents.location_keys(index, mode_index, encoded[f"{tap}_loc"], as_id)
                for tap in ("on", "off") for as_id in (False, True)}
        named = [contents.trip_rows(  # the stops as their public locations (as named; as location ids: #40)
            contents.mode_code(mode), rows["on_ns"], keys["on", as_id], rows["off_ns"], keys["off", as_id])
            for as_id in (False, True)]
        places = [contents.place_tokens(index, mode_index, encoded[f"{tap}_loc"]) for tap in ("on", "off")]
        day = int(pd.Timestamp(date).value // 86_400_000_000_000)  # the partition's date (YYYYMMDD), in days
        names = contents.tap_on_tokens(index, rows["on_stop"], mode_index)
        contents.save_partition(content, mode, date, named[0], rows["card"], named=named[1], shards=shards,
                                taps=(names, *places), days=contents.tap_on_days(day, places[0], mode),
                                day=contents.tap_ons_of_day(date, places[0], mode, names),
                                counts=(contents.token_counts(places[0]), contents.token_counts(names),
                                        contents.token_counts(places[1])))
    missing = int((rows["off_ns"] == NAT).sum())
    del rows
    check_encoded(encoded)
    entry = partition_store.write_partition(staging, mode, date, encoded) if n else None
    remove_spill(spill, mode, date)
    return PreparedPartition(mode, date, n, int(dup.sum()), missing, int(encoded["kept"].sum()), checks, entry)


class UnaccountedRowsError(TransitReleaseError):
    """A partition step did not account for every row the pass spilled for it."""


def check_accounted(tally: ScreenTally, prepared: list[PreparedPartition], modes: tuple[str, ...]) -> None:
    """Every row the pass spilled was prepared or found a duplicate, partition by partition: a step that ran
    again after its spill was removed (Dask re-runs a task whose worker died), or read a spill in part, fails
    here, before anything is charged."""
    spilled = tally.spilled_rows(modes)
    for p in prepared:
        if p.rows + p.duplicates != spilled[(p.mode, p.date)]:
            raise UnaccountedRowsError(
                f"partition {p.label}: its step accounted for {p.rows + p.duplicates:,} of the "
                f"{spilled[(p.mode, p.date)]:,} rows the pass spilled (was the step run twice?); nothing was charged")


@dataclass(frozen=True)
class CardBounding:
    """The partitions-per-card bound over all partitions' pairs, and the bounding's internal counts."""

    dropped: dict[tuple[str, str], np.ndarray]  # per partition, the indices of its dropped pairs
    counts: dict[str, int]


def bound_partitions_per_card(pairs: Path, labels: list[tuple[str, str]], prepared: list[PreparedPartition],
                              max_partitions: int, noise, shards: int) -> CardBounding:
    """Card level: at most ``max_partitions`` partitions per card, over the pairs the partition steps saved
    (the in-memory path's priorities: a pair's code is its partition's public code). One card shard at a time:
    a card's choice needs only its own pairs, so memory holds the pairs of one shard, about 1/``shards`` of the
    period's."""
    from transit_release.mechanisms.contribution_bounding import _choose_partitions

    files = [(code, lab, _PairsFile(pairs_path(pairs, *lab)), np.load(_offsets(pairs_path(pairs, *lab))))
             for code, lab in enumerate(labels) if pairs_path(pairs, *lab).exists()]
    dropped: dict[tuple[str, str], list[np.ndarray]] = {}
    c = dict.fromkeys(("rows_kept", "rows_kept_in_partitions", "rows_dropped_partitions_cap", "cards",
                       "cards_truncated", "cards_over_rows_cap", "cards_over_partitions_cap", "pairs",
                       "pairs_dropped"), 0)
    for s in range(shards):
        parts = [(code, lab, table.rows(off[s], off[s + 1])) for code, lab, table, off in files]
        parts = [(code, lab, t) for code, lab, t in parts if t.shape[0]]
        if not parts:
            continue
        table = np.concatenate([t for _, _, t in parts])
        code = np.concatenate([np.full(t.shape[0], k, dtype=np.int64) for k, _, t in parts])
        card, kept_rows, over = table[:, 0], table[:, 1], table[:, 2].astype(bool)
        pair_kept, card_of_pair, per_card = _choose_partitions(card, code, max_partitions, noise)
        start = 0
        for _, lab, t in parts:
            d = t[~pair_kept[start:start + t.shape[0]], 3]
            if d.size:
                dropped.setdefault(lab, []).append(d)
            start += t.shape[0]
        n_cards = per_card.size
        c["rows_kept"] += int(kept_rows[pair_kept].sum())
        c["rows_kept_in_partitions"] += int(kept_rows.sum())
        c["rows_dropped_partitions_cap"] += int(kept_rows[~pair_kept].sum())
        c["cards"] += int(n_cards)
        c["cards_truncated"] += int((np.bincount(card_of_pair[~pair_kept | over], minlength=n_cards) > 0).sum())
        c["cards_over_rows_cap"] += int((np.bincount(card_of_pair[over], minlength=n_cards) > 0).sum())
        c["cards_over_partitions_cap"] += int((per_card > max_partitions).sum())
        c["pairs"] += int(card.size)
        c["pairs_dropped"] += int((~pair_kept).sum())
    del files
    rows_in = sum(p.rows for p in prepared)
    return CardBounding({lab: np.sort(np.concatenate(ds)) for lab, ds in dropped.items()}, {
        "rows_in": rows_in, "rows_kept": c["rows_kept"], "rows_dropped": rows_in - c["rows_kept"],
        "rows_dropped_per_partition_cap": rows_in - c["rows_kept_in_partitions"],
        "rows_dropped_partitions_cap": c["rows_dropped_partitions_cap"], "cards": c["cards"],
        "cards_truncated": c["cards_truncated"], "cards_over_rows_cap": c["cards_over_rows_cap"],
        "cards_over_partitions_cap": c["cards_over_partitions_cap"], "pairs": c["pairs"],
        "pairs_dropped": c["pairs_dropped"]})


def infer_period(path: str | Path) -> Period:
    """The period the tap-on dates suggest (a dry run's suggestion), counted batch by batch."""
    from transit_release.inputs.problems import ProblemTally

    for text in (False, True):
        try:
            days = pd.Series(dtype=np.int64)
            times = ProblemTally(f"trips file {Path(path).name}", sort_keys=False)
            for _, df, time_problems in trip_frames(path, text):
                times.add(time_problems)
                if "tap_on_time" not in df.columns or times:
                    continue
                on = pd.to_datetime(df["tap_on_time"], errors="coerce").dt.normalize().value_counts()
                days = days.add(on, fill_value=0)
            times.raise_if_any()
            return screening.infer_period_from_days(days)
        except TextNeeded:
            continue
    raise AssertionError("unreachable")


def refused_file(refused: Exception, path: str | Path, where: str | None) -> Exception:
    """The gate's refusal of the trips file ``path`` as the command prints it: the file's name, the reason, and
    where the quarantined rows were kept (``where``), if any."""
    return type(refused)(f"trips file {Path(path).name}: {refused}" + (f" (quarantined rows: {where})" if where else ""))


def gather_quarantine(home, release_id: str, parts: Path) -> str:
    """The quarantine's fragments under ``parts`` as one Parquet file under ``<home>/private/quarantine/<release
    id>``, fragment by fragment (the screen's, in file order, then each partition's duplicates), so that memory
    holds one fragment at a time. Returns its path."""
    from datetime import datetime, timezone

    folder = home.quarantine / release_id
    home.quarantine.mkdir(exist_ok=True, mode=0o700)
    folder.mkdir(exist_ok=True, mode=0o700)
    path = folder / f"quarantine-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}.parquet"
    fragments = sorted(parts.glob("a*.parquet")) + sorted(parts.glob("d-*.parquet"))
    writer = None
    try:
        for part in fragments:
            table = pq.read_table(part)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table.select(writer.schema.names).cast(writer.schema))
    finally:
        if writer is not None:
            writer.close()
    os.chmod(path, 0o600)
    return str(path)


def period_may_not_fit(path: str | Path, period: Period, limit: float) -> bool:
    """May the declared ``period`` not fit the trips of the CSV file ``path`` (a file of one batch)? Its tap-on
    times read alone, as text: True when more than ``limit`` of the rows do not start with a date of the period
    (or are not read as dates at all), or a day of the period starts none. Only says whether the whole screen is
    worth running before the flow (False for a larger or Parquet file, or one this read cannot parse)."""
    path = Path(path)
    if file_format(path) == "parquet" or path.stat().st_size > BATCH_BYTES:
        return False
    import pyarrow.compute as pc

    try:
        column = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            include_columns=["tap_on_time"], column_types={"tap_on_time": pa.string()})).column(0)
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        return False
    n = len(column)
    if n == 0:
        return False
    dates = pc.utf8_slice_codeunits(column, 0, 10)
    dated = pc.match_substring_regex(column, r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d*)?)?)?$")
    inside = pc.and_kleene(dated, pc.and_kleene(pc.greater_equal(dates, period.start.isoformat()),
                                                pc.less_equal(dates, period.end.isoformat())))
    inside = pc.fill_null(inside, False)
    if n - pc.sum(inside).as_py() > limit * n:
        return True
    seen = set(pc.unique(pc.filter(dates, inside)).to_pylist())
    return any(d.isoformat() not in seen for d in period.days)
