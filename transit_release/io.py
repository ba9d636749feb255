"""Reading the custodian's input files (CSV or Parquet) and fingerprinting them.

Error messages name the file and the problem, never a value from the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

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


def _read_csv(path: Path, column_types: dict[str, pa.DataType] | None) -> pa.Table:
    convert = pacsv.ConvertOptions(
        column_types=column_types or {},
        strings_can_be_null=True,
        null_values=[""],
        timestamp_parsers=[pacsv.ISO8601] if column_types else None,
    )
    if not column_types:
        # everything as text: the schema's coercion reports what does not parse
        with pacsv.open_csv(path) as reader:
            names = reader.schema.names
        convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                       strings_can_be_null=True, null_values=[""])
    return pacsv.read_csv(path, read_options=pacsv.ReadOptions(block_size=1 << 24), convert_options=convert)


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
        raise InputDataError(f"{what} file {path.name}: cannot be read as {fmt} ({exc.__class__.__name__})") from None
    df = table.to_pandas()
    for name, typ in column_types.items():
        if name in df.columns and pa.types.is_integer(typ) and pd.api.types.is_string_dtype(df[name]):
            df[name] = _integral(df[name])
    return df


def _integral(text: pd.Series) -> pd.Series:
    """Text like ``200782`` or ``200782.0`` (a float export) as integers; anything else stays text."""
    num = pd.to_numeric(text, errors="coerce")
    present = text.notna() & (text.astype("string").str.strip() != "")
    if (num[present].notna() & (num[present] % 1 == 0)).all():
        return num.astype("Int64")
    return text


def read_trips(path: str | Path) -> pd.DataFrame:
    return read_table(path, TRIP_COLUMN_TYPES, "trips")


def read_stops(path: str | Path) -> pd.DataFrame:
    return read_table(path, STOP_COLUMN_TYPES, "stops")


def fingerprint(*paths: str | Path) -> str:
    """SHA-256 over the input files' bytes (internal: ledger only, never published)."""
    h = hashlib.sha256()
    for p in paths:
        if not Path(p).is_file():
            raise InputDataError(f"input file {p}: not found")
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        h.update(b"\x00")
    return h.hexdigest()
