"""The column types of the input files' contract, and the types a Parquet file may store them as.

Only pyarrow is imported here: a command checks a Parquet file's stored types before Prefect starts, and before
pandas and pandera are imported (seconds on a busy machine), so a file that would lie is refused at once.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

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
    suffix = Path(path).suffix.lower()
    if suffix in (".csv", ".txt"):
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise InputDataError(f"{Path(path).name}: unsupported file type {suffix!r}; use .csv or .parquet")


#: Integer types an id column may be stored as (all fit in int64 exactly).
_INTEGER_STORAGE = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())


def _text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def stored_type_problem(found: pa.DataType, expected: pa.DataType) -> str | None:
    """Why a column stored (in Parquet) as ``found`` is refused where the contract expects ``expected``; None if
    it is read as it is. A column of nulls only is accepted (its values are missing); text is accepted for every
    column (and checked row by row, as a CSV's)."""
    if pa.types.is_null(found) or _text(found):
        return None
    if pa.types.is_timestamp(expected):
        if pa.types.is_timestamp(found) and found.tz is None:
            return None
        if pa.types.is_timestamp(found):
            return ("a time with a time zone is refused (converting it would move taps between bins and days); "
                    "store local times without a time zone, or as text YYYY-MM-DD HH:MM[:SS]")
        return "times must be local timestamps without a time zone, or text YYYY-MM-DD HH:MM[:SS]"
    if pa.types.is_integer(expected):
        if found in _INTEGER_STORAGE:
            return None
        return ("ids must be stored as integers (int8 to int64, uint8 to uint32) or text of whole numbers (a float "
                "can round an id and merge two)")
    if pa.types.is_dictionary(found) and _text(found.value_type):
        return None
    return "it must be text"


def check_stored_types(schema: pa.Schema, column_types: dict[str, pa.DataType], where: str) -> None:
    """Refuse, in one line naming each column and the type found, a Parquet file whose columns are stored as
    types the contract would have to convert (a time zone, a number for a time, a float for an id): the same
    contract as a CSV's text, never a coercion. Missing or unexpected columns are the file contract's to name."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, typ in column_types.items():
        if name in schema.names:
            stored = schema.field(name).type
            why = stored_type_problem(stored, typ)
            if why:
                found.setdefault((str(stored), why), []).append(name)
    if found:
        raise InputDataError(f"{where}: " + "; ".join(
            f"column{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)} "
            f"{'are' if len(names) > 1 else 'is'} stored as {stored}: {why}" for (stored, why), names in found.items()))
