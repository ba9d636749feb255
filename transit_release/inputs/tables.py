"""Reading the custodian's input files (CSV or Parquet) and fingerprinting them.

Error messages name the file and the problem, never a value from the file.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from transit_release.errors import InputDataError

TRIP_COLUMN_TYPES = {
    "card_id": pa.int64(),
    "mode": pa.string(),
    "tap_on_time": pa.timestamp("s"),
    "tap_on_stop": pa.int64(),
    "tap_off_time": pa.timestamp("s"),
    "tap_off_stop": pa.int64(),
}
STOP_COLUMN_TYPES = {
    "stop_id": pa.int64(),
    "mode": pa.string(),
    "name": pa.string(),
    "postcode": pa.int64(),
}


def file_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt"):
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise InputDataError(f"{path.name}: unsupported file type {suffix!r}; use .csv or .parquet")


#: Local wall-clock times only: a time zone offset would silently shift a tap to another bin.
TIME_FORMATS = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
_LOCAL_TIME = r"^\d{4}-\d{2}-\d{2}[ T]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?$"


BLOCK_BYTES = 1 << 24  # a row must fit in one block of the CSV reader


def _read_csv(path: Path, column_types: dict[str, pa.DataType] | None) -> pa.Table:
    convert = pacsv.ConvertOptions(
        column_types=column_types or {},
        strings_can_be_null=True,
        null_values=[""],
        timestamp_parsers=TIME_FORMATS if column_types else None,
    )
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
            table = pq.read_table(path)
        else:
            try:
                table = _read_csv(path, column_types)
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" in str(exc):
                    raise InputDataError(f"{what} file {path.name}: the file is empty (no header row)") from None
                table = _read_csv(path, None)
    except InputDataError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise InputDataError(f"{what} file {path.name}: cannot be read as {fmt}: {_explain(exc)}") from None
    df = table.to_pandas()
    _check_time_text(df, column_types, f"{what} file {path.name}")
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_integer(typ) and pd.api.types.is_string_dtype(df[name]):
            df[name] = _integral(df[name])
    return df


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
    """Times read as text (the slow path) must be local times; name the rows that are not."""
    from transit_release.inputs.problems import ProblemTally

    tally = ProblemTally(where, sort_keys=False)
    tally.add(time_text_problems(df, column_types))
    tally.raise_if_any()


TIME_TEXT_CHECK = "not a local time YYYY-MM-DD HH:MM[:SS] (text, hour 24 or a time zone offset?)"


def time_text_problems(df: pd.DataFrame, column_types: dict[str, pa.DataType],
                       row_offset: int = 0) -> dict[tuple[str, str], np.ndarray]:
    """Rows (file positions) whose time, read as text, is not a local time, per time column."""
    problems = {}
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_timestamp(typ) and pd.api.types.is_string_dtype(df[name]):
            col = df[name]
            bad = (col.notna() & ~col.astype("string").str.strip().str.fullmatch(_LOCAL_TIME).fillna(False)).to_numpy()
            if bad.any():
                problems[(name, TIME_TEXT_CHECK)] = np.flatnonzero(bad) + row_offset
    return problems


def _integral(text: pd.Series) -> pd.Series:
    """Text like ``200782`` or ``200782.0`` (a float export) as integers; anything else stays text (the contract
    then names its rows), including integers too large to hold exactly."""
    num = pd.to_numeric(text, errors="coerce")
    present = text.notna() & (text.astype("string").str.strip() != "")
    if (num[present].notna() & (num[present] % 1 == 0) & (num[present].abs() < 2**53)).all():
        return num.astype("Int64")
    return text


def read_trips(path: str | Path) -> pd.DataFrame:
    return read_table(path, TRIP_COLUMN_TYPES, "trips")


def read_stops(path: str | Path) -> pd.DataFrame:
    return read_table(path, STOP_COLUMN_TYPES, "stops")


def fingerprint(*paths: str | Path, key: bytes) -> str:
    """HMAC-SHA-256, keyed by the home's secret, over the input files' bytes (internal: ledger only).

    Keyed because the ledger's published head hash chains it (see ``Home.fingerprint_key``).
    """
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in paths:
        if not Path(p).is_file():
            raise InputDataError(f"input file {p}: not found")
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        h.update(b"\x00")
    return h.hexdigest()
