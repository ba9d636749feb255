"""What a command can check before any flow starts (no Prefect, no MLflow; of the trips, only the header and,
for Parquet, the stored types; the stop table, public and small, whole).

A bad invocation — a missing or unreadable file, a wrong header, a Parquet column stored as the wrong type
(a time zone, a number for a time, a float id), a stop name that breaks the stop table's contract, a missing or
malformed period, a broken configuration or budget policy, an unusable home —
is refused in about a second with one clear line, without Prefect (the command's
temporary Prefect server is started meanwhile, in a process of its own, and
stopped at once by a refusal). The flows run the same checks again (a scheduled
run has no command line), so nothing here is the only line of defence.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from transit_release.errors import InputDataError
from transit_release.inputs.stored_types import file_format

#: A CSV header must end within this many bytes (a huge file without a line break is refused, not read).
HEADER_BYTES = 1 << 16
#: The largest stop table read: rows, and bytes of the file. A stop table is the public universe of one agency's
#: network (the synthetic Opal week's has a few thousand stops; a large agency's GTFS some 100,000); checked whole,
#: as one is, 250,000 rows take about 1.5 s on the 2-core machine (benchmarks/bench_cli_latency.py), so a
#: refusal stays within its 3 s. A larger table is refused before it is read.
MAX_STOP_ROWS = 250_000
MAX_STOP_BYTES = 64 << 20


def readable_file(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputDataError(f"{what} file {path}: not found")
    if not path.is_file():
        raise InputDataError(f"{what} file {path}: is not a file")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise InputDataError(f"{what} file {path}: cannot be read ({exc.strerror})") from None
    return path


def header_columns(path: str | Path, what: str) -> list[str]:
    """The column names of a CSV (its first line) or Parquet file (its schema), reading nothing else."""
    path = readable_file(path, what)
    if file_format(path) == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise InputDataError(f"{what} file {path.name}: not a readable Parquet file (truncated or corrupt?)") from None
    with open(path, "rb") as fh:
        head = fh.read(HEADER_BYTES)
    if not head.strip():
        raise InputDataError(f"{what} file {path.name}: the file is empty (no header row)")
    end = head.find(b"\n")
    if end < 0 and len(head) == HEADER_BYTES:
        raise InputDataError(f"{what} file {path.name}: no line break in the first {HEADER_BYTES // 1024} KiB: "
                             "not a CSV file with a header row")
    line = head[: end if end >= 0 else len(head)]
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputDataError(f"{what} file {path.name}: the header is not valid UTF-8 (export the file as UTF-8)") from None
    return [c.strip() for c in next(csv.reader(io.StringIO(text)), [])]


def check_header(path: str | Path, what: str, model, column_types: dict | None = None) -> None:
    """The header holds exactly the columns of the pandera ``model`` (any order): the flow's own contract,
    applied to the header alone, so the refusal is the very message the flow would give. A Parquet file's
    stored types are checked too, against ``column_types`` (a time zone, a number for a time, a float id)."""
    import pandas as pd

    from schemas import validate

    if column_types:
        check_parquet_types(path, what, column_types)
    cols = header_columns(path, what)
    validate(model, pd.DataFrame({c: pd.Series([], dtype="string") for c in cols}), f"{what} file {Path(path).name}")


def check_parquet_types(path: str | Path, what: str, column_types: dict) -> None:
    """A Parquet file's stored column types (pyarrow alone: before pandas and pandera are imported); nothing for a
    CSV, whose text is checked row by row."""
    path = readable_file(path, what)
    if file_format(path) != "parquet":
        return
    import pyarrow.parquet as pq

    from transit_release.inputs.stored_types import check_stored_types

    try:
        schema = pq.read_schema(path)
    except Exception:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise InputDataError(f"{what} file {path.name}: not a readable Parquet file (truncated or corrupt?)") from None
    check_stored_types(schema, column_types, f"{what} file {path.name}")


def check_trip_inputs(trips: str | Path, stops: str | Path) -> None:
    from transit_release.inputs.stored_types import STOP_COLUMN_TYPES, TRIP_COLUMN_TYPES

    check_parquet_types(trips, "trips", TRIP_COLUMN_TYPES)  # at once: a file that would lie
    check_parquet_types(stops, "stops", STOP_COLUMN_TYPES)
    from schemas import Stops, TripsFile

    check_header(trips, "trips", TripsFile)
    check_header(stops, "stops", Stops)


def check_stop_table_size(stops: str | Path) -> None:
    """Refuse a stop table larger than :data:`MAX_STOP_ROWS` rows or :data:`MAX_STOP_BYTES` bytes, before reading
    it (a CSV's line breaks are counted, a Parquet file's metadata read)."""
    path = readable_file(stops, "stops")
    size = path.stat().st_size
    what = f"stops file {path.name}"
    if size > MAX_STOP_BYTES:
        raise InputDataError(f"{what}: {size / 2**20:.0f} MiB; a stop table is read whole, and at most "
                             f"{MAX_STOP_BYTES >> 20} MiB is (one network's stops, each with a short name)")
    if file_format(path) == "parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise InputDataError(f"{what}: not a readable Parquet file (truncated or corrupt?)") from None
    else:
        with open(path, "rb") as fh:
            rows = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b"")) - 1
    if rows > MAX_STOP_ROWS:
        raise InputDataError(f"{what}: {rows:,} rows; at most {MAX_STOP_ROWS:,} are read (one network's stops: a "
                             "stop table is the public universe, checked whole before anything starts)")


def check_stop_table(stops: str | Path):
    """The whole stop table against its contract (it is small: the public universe, at most
    :data:`MAX_STOP_ROWS` rows): a name that is the unknown location's mark, hides characters or looks like another
    is refused before Prefect starts. Returns the validated table."""
    from schemas import Stops, validate
    from transit_release.inputs.tables import read_stops

    check_stop_table_size(stops)
    return validate(Stops, read_stops(stops), f"stops file {Path(stops).name}")
