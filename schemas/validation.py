"""Lazy validation with failure reports that never echo a value."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pandera.pandas as pa

from transit_release.errors import SchemaViolationError  # noqa: F401  (re-exported)
from transit_release.inputs.problems import MAX_ROWS_NAMED, ProblemTally

#: An unexpected header is named only if it looks like a column name and the header holds at least
#: one expected name; a file without a header row would otherwise put its first data row into the message.
_SAFE_HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]{0,39}$")
HIDDEN_HEADER = "<name not shown: it does not look like a column name; is the header row missing?>"


def validate(model: type[pa.DataFrameModel], df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Validate ``df`` against ``model``; on failure raise :class:`SchemaViolationError`.

    The message names ``where`` (e.g. the file), each failing column and check,
    how many rows fail it and the first row numbers (1 = first data row).
    """
    validated, problems = check(model, df)
    if problems:
        tally = ProblemTally(where)
        tally.add(problems)
        tally.raise_if_any()
    return validated


def check(model: type[pa.DataFrameModel], df: pd.DataFrame,
          row_offset: int = 0) -> tuple[pd.DataFrame | None, dict[tuple[str, str], np.ndarray]]:
    """(the validated frame or None, problems): each failing (column, check) with the sorted positions of its
    rows in the file (``row_offset`` + position in ``df``; empty for a column-level problem)."""
    try:
        return model.validate(df, lazy=True), {}
    except pa.errors.SchemaErrors as exc:
        fc = exc.failure_cases
        # without any expected name in the header, the "header" is probably the first data row
        header_present = bool(set(model.to_schema().columns) & set(map(str, df.columns)))
        problems: dict[tuple[str, str], set[int]] = {}
        for column, chk, index, case in zip(fc["column"], fc["check"], fc["index"], fc["failure_case"]):
            chk = _describe_check(str(chk))
            if chk == "missing column":
                column = case  # one of the model's own column names
            elif chk == "unexpected column":
                column = case if header_present and _SAFE_HEADER.match(str(case)) else HIDDEN_HEADER
            key = (str(column) if column is not None and column == column else "<frame>", chk)
            rows = problems.setdefault(key, set())
            if index is not None and index == index:
                rows.add(int(index) + row_offset)
        return None, {k: np.array(sorted(v), dtype=np.int64) for k, v in problems.items()}


def _describe_check(check: str) -> str:
    """pandera's check names without any value embedded in them."""
    if check.startswith("column_in_dataframe"):
        return "missing column"
    if check.startswith("column_in_schema"):
        return "unexpected column"
    if check.startswith("coerce_dtype") or check.startswith("dtype"):
        return "wrong type (" + check.split("(", 1)[-1].rstrip(")").strip("'") + ")" if "(" in check else "wrong type"
    if check.startswith("isin"):
        return "value not in the allowed set"
    if check.startswith("str_matches"):
        return "wrong format"
    if check == "not_nullable":
        return "missing value"
    return check
