"""Reading the custodian's input files (CSV or Parquet) and fingerprinting them.

Error messages name the file and the problem, never a value from the file.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from transit_release.errors import InputDataError
from transit_release.inputs.stored_types import (STOP_COLUMN_TYPES, TRIP_COLUMN_TYPES,  # noqa: F401
                                                  check_stored_types, file_format)



#: Local wall-clock times only: a time zone offset would silently shift a tap to another bin.
_LOCAL_TIME = r"^\d{4}-\d{2}-\d{2}[ T]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?$"
#: The lengths of ``YYYY-MM-DD HH:MM`` and ``YYYY-MM-DD HH:MM:SS`` (``T`` or a space between date and time).
LOCAL_TIME_LENGTHS = (16, 19)


def text_times(column_types: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    """The column types a CSV is read with: the times as text, parsed afterwards by :func:`parse_local_times`.

    Not Arrow's CSV ``timestamp_parsers``: those strptime formats are lenient (``2016-02-30`` is read as
    1 March, second 60 as the next minute, unpadded fields pass) and take about twice as
    long as the ISO 8601 cast used instead."""
    return {n: (pa.string() if pa.types.is_timestamp(t) else t) for n, t in column_types.items()}


def _local_lengths(col) -> bool:
    """Is every present value of the text column as long as a local time?"""
    import pyarrow.compute as pc

    n = pc.utf8_length(col)
    local = pc.or_(pc.equal(n, LOCAL_TIME_LENGTHS[0]), pc.equal(n, LOCAL_TIME_LENGTHS[1]))
    return pc.all(pc.or_kleene(pc.is_null(col), local)).as_py()


def parse_local_times(table: pa.Table, column_types: dict[str, pa.DataType]) -> pa.Table | None:
    """``table`` with its time columns (read as text) as timestamps, or None if any present value is not a
    local time ``YYYY-MM-DD[ T]HH:MM[:SS]`` of the calendar (the caller then reads the file as text, whose
    checks say where).

    Arrow's ISO 8601 cast is strict — a real calendar date, hour 00–23, minute and second 00–59, no zone, no
    fraction — but also takes a date alone (10 characters) or a date and an hour (13); the lengths rule
    those out."""
    import pyarrow.compute as pc

    for name, typ in column_types.items():
        if name not in table.column_names or not pa.types.is_timestamp(typ):
            continue
        col = table.column(name)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue
        if not _local_lengths(col):
            col = pc.utf8_trim_whitespace(col)  # blanks around a time are allowed, as on the text path
            if not _local_lengths(col):
                return None
        try:
            parsed = pc.cast(col, typ)
        except pa.ArrowInvalid:
            return None
        table = table.set_column(table.column_names.index(name), name, parsed)
    return table


BLOCK_BYTES = 1 << 24  # a row must fit in one block of the CSV reader


def _read_csv(path: Path, column_types: dict[str, pa.DataType] | None) -> pa.Table:
    convert = pacsv.ConvertOptions(column_types=text_times(column_types or {}), strings_can_be_null=True,
                                   null_values=[""])
    if not column_types:
        # everything as text: the schema's coercion reports what does not parse
        with pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES)) as reader:
            names = reader.schema.names
        convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                       strings_can_be_null=True, null_values=[""])
    return pacsv.read_csv(path, read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES), convert_options=convert)


def read_table(path: str | Path, column_types: dict[str, pa.DataType], what: str) -> pd.DataFrame:
    """Read ``path`` with the expected column types where they parse, as text otherwise.

    Typed reading is the fast path; if any value does not parse the file is read
    again as text so that schema validation can report *where* (row numbers),
    without Arrow's messages, which quote the offending value.
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"{what} file {path}: not found")
    fmt = file_format(path)
    try:
        if fmt == "parquet":
            check_stored_types(pq.read_schema(path), column_types, f"{what} file {path.name}")
            table = pq.read_table(path)
        else:
            try:
                table = parse_local_times(_read_csv(path, column_types), column_types)
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" in str(exc):
                    raise InputDataError(f"{what} file {path.name}: the file is empty (no header row)") from None
                table = None
            if table is None:  # a value that does not parse with its column's type: as text, to say where
                table = _read_csv(path, None)
    except InputDataError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise InputDataError(f"{what} file {path.name}: cannot be read as {fmt}: {_explain(exc)}") from None
    df = to_frame(table)
    _check_time_text(df, column_types, f"{what} file {path.name}")
    return integers_from_text(df, column_types)


def _explain(exc: Exception, block_bytes: int = BLOCK_BYTES) -> str:
    """What went wrong, without Arrow's quotation of the offending row."""
    text = str(exc)
    m = re.search(r"Expected (\d+) columns, got (\d+)", text)
    if m:
        return (f"a row has {m.group(2)} fields where the header has {m.group(1)} "
                "(a truncated file, a wrong delimiter or an unquoted comma?)")
    if "UTF8" in text or "UTF-8" in text or isinstance(exc, UnicodeDecodeError):
        return "the text is not valid UTF-8 (export the file as UTF-8)"
    if "straddl" in text:
        return (f"a row is longer than {block_bytes >> 20} MiB (an unclosed quote, or not a CSV export of "
                "trips?)")
    if "Parquet" in text or "magic" in text.lower():
        return "not a readable Parquet file (truncated or corrupt?)"
    return exc.__class__.__name__


def _check_time_text(df: pd.DataFrame, column_types: dict[str, pa.DataType], where: str) -> None:
    """Times and integers read as text (the slow path) must be local times and whole numbers; name the rows that
    are not."""
    from transit_release.inputs.problems import ProblemTally

    tally = ProblemTally(where, sort_keys=False)
    tally.add(text_problems(df, column_types))
    tally.raise_if_any()


TIME_TEXT_CHECK = "not a local time YYYY-MM-DD HH:MM[:SS] (text, hour 24 or a time zone offset?)"
TIME_CALENDAR_CHECK = "not a day of the calendar (e.g. 30 February)"


def time_text_problems(df: pd.DataFrame, column_types: dict[str, pa.DataType],
                       row_offset: int = 0) -> dict[tuple[str, str], np.ndarray]:
    """Rows (file positions) whose time, read as text, is not a local time, per time column."""
    problems = {}
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_timestamp(typ) and pd.api.types.is_string_dtype(df[name]):
            text = df[name].astype("string").str.strip()
            local = text.str.fullmatch(_LOCAL_TIME).fillna(False).to_numpy(dtype=bool)
            bad = (text.notna().to_numpy() & ~local)
            if bad.any():
                problems[(name, TIME_TEXT_CHECK)] = np.flatnonzero(bad) + row_offset
            # the form of a local time, on a day the calendar does not have (the month's day 30 or 31)
            unreal = np.zeros(len(text), dtype=bool)
            unreal[local] = pd.to_datetime(text[local], format="ISO8601", errors="coerce").isna().to_numpy()
            if unreal.any():
                problems[(name, TIME_CALENDAR_CHECK)] = np.flatnonzero(unreal) + row_offset
    return problems


INTEGER_TEXT_CHECK = "not a whole number (a decimal point, an exponent or letters: a float export?)"
INTEGER_RANGE_CHECK = "a whole number outside the 64-bit integer range"
_DIGITS = r"^-?\d+$"
_INT64_MAX = str(np.iinfo(np.int64).max)


def _in_int64(text: pd.Series) -> pd.Series:
    """Whether each whole number written as text (``-?\\d+``) fits in int64 (by its digits, never by a float)."""
    digits = text.str.lstrip("-").str.lstrip("0")
    n = digits.str.len()
    return (n < len(_INT64_MAX)) | ((n == len(_INT64_MAX)) & (digits <= _INT64_MAX))


def _integer_text_problems(df: pd.DataFrame, column_types: dict[str, pa.DataType],
                           row_offset: int = 0) -> dict[tuple[str, str], np.ndarray]:
    """Rows whose integer column, read as text, is not a whole number written as one (``200782.0`` is a float
    written out, and a float id above 2^53 may already have merged two cards: refused, never rounded), or one
    too large for an integer."""
    problems = {}
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_integer(typ) and pd.api.types.is_string_dtype(df[name]):
            text = df[name].astype("string").str.strip()
            present = (text.notna() & (text != "")).to_numpy(dtype=bool)
            whole = text.str.fullmatch(_DIGITS).fillna(False).to_numpy(dtype=bool)
            bad = present & ~whole
            if bad.any():
                problems[(name, INTEGER_TEXT_CHECK)] = np.flatnonzero(bad) + row_offset
            large = present & whole
            large[large] = ~_in_int64(text[large]).to_numpy(dtype=bool)
            if large.any():
                problems[(name, INTEGER_RANGE_CHECK)] = np.flatnonzero(large) + row_offset
    return problems


def text_problems(df: pd.DataFrame, column_types: dict[str, pa.DataType],
                  row_offset: int = 0) -> dict[tuple[str, str], np.ndarray]:
    """What columns read as text break: times that are not local times, integers not written as whole numbers."""
    return {**time_text_problems(df, column_types, row_offset), **_integer_text_problems(df, column_types, row_offset)}


def integers_from_text(df: pd.DataFrame, column_types: dict[str, pa.DataType]) -> pd.DataFrame:
    """``df`` with its integer columns read as text (a CSV read as text, a Parquet file storing them as strings)
    as integers, where every present value is a whole number (:func:`text_problems` names the rows of the others,
    which stay text)."""
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_integer(typ) and pd.api.types.is_string_dtype(df[name]):
            text = df[name].astype("string").str.strip()
            text = text.where(text != "").dropna()
            if text.str.fullmatch(_DIGITS).all() and _in_int64(text).all():
                df[name] = df[name].astype("string").str.strip().replace("", None).astype("Int64")
    return df


def to_frame(table: pa.Table | pa.RecordBatch) -> pd.DataFrame:
    """``table`` as a frame, integer columns holding missing values as pandas' nullable ``Int64`` (Arrow's default
    makes them float64, which rounds ids above 2^53 and can merge two cards)."""
    nullable = {f.type for f, col in zip(table.schema, table.columns)
                if pa.types.is_integer(f.type) and col.null_count}
    return table.to_pandas(types_mapper=lambda t: pd.Int64Dtype() if t in nullable else None)


def read_trips(path: str | Path) -> pd.DataFrame:
    return read_table(path, TRIP_COLUMN_TYPES, "trips")


def read_stops(path: str | Path) -> pd.DataFrame:
    return read_table(path, STOP_COLUMN_TYPES, "stops")


#: The scheme of the fingerprints recorded now, named in each (``blake2b:<hex>``). A fingerprint without a
#: scheme is HMAC-SHA-256, what the ledger recorded before (until 2026-11): see :func:`legacy_fingerprint`.
FINGERPRINT_SCHEME = "blake2b"


def fingerprint(*paths: str | Path, key: bytes) -> str:
    """Keyed BLAKE2b-256 (the home's secret as BLAKE2's own key) over the input files' bytes, as
    ``blake2b:<hex>`` (internal: ledger only).

    Keyed because the ledger's published head hash chains it (see ``Home.fingerprint_key``). BLAKE2b, not
    HMAC-SHA-256: on this project's 2-core machine (no SHA extensions) it hashes 640 MB/s against 380, and the
    hash of the full-size week (894 MiB) runs beside the pass over the same file, competing for the same cores
    (the pass took 6.4 s with SHA-256, 5.5 s with BLAKE2b, 5.3 s without any hash).
    """
    return f"{FINGERPRINT_SCHEME}:{_digest(hashlib.blake2b(key=key, digest_size=32), paths)}"


def legacy_fingerprint(*paths: str | Path, key: bytes) -> str:
    """HMAC-SHA-256 (hex, no scheme), keyed by the home's secret: the fingerprints recorded before the scheme was
    named. Computed only for a release whose earlier spends carry one (a run resumed after an upgrade)."""
    return _digest(hmac.new(key, digestmod=hashlib.sha256), paths)


def is_legacy_fingerprint(value: str) -> bool:
    return ":" not in value


def _digest(h, paths) -> str:
    buf = bytearray(FINGERPRINT_CHUNK)
    view = memoryview(buf)
    for p in paths:
        if not Path(p).is_file():
            raise InputDataError(f"input file {p}: not found")
        with open(p, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                h.update(view[:n])
        h.update(b"\x00")
    return h.hexdigest()


#: Bytes hashed per call: few, large calls, because the hash runs without the GIL and every call must take it
#: back (a 4 MiB chunk spent 1.6 s of 2.6 s waiting for it while another thread imported modules).
FINGERPRINT_CHUNK = 1 << 26


def recognising_earlier_fingerprints(same: Callable[[list], bool], fingerprint, inputs: list[str],
                                     key: Callable[[], bytes]) -> Callable[[list], bool]:
    """``same`` for earlier spends of which some carry an HMAC-SHA-256 fingerprint (recorded before fingerprints
    named their scheme): those equal to the earlier fingerprint of ``inputs`` are compared as carrying this run's
    ``fingerprint`` (or its future). The earlier fingerprint is computed only when there are such spends (a release
    published before the upgrade, published again)."""
    from dataclasses import replace

    def check(earlier: list) -> bool:
        if any(is_legacy_fingerprint(e.input_fingerprint) for e in earlier):
            old = legacy_fingerprint(*inputs, key=key())
            current = fingerprint.result() if hasattr(fingerprint, "result") else fingerprint
            earlier = [replace(e, input_fingerprint=current) if e.input_fingerprint == old else e for e in earlier]
        return same(earlier)

    return check
