"""Lazy validation with failure reports that never echo a value."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

from transit_release.errors import SchemaViolationError

MAX_ROWS_NAMED = 5


def validate(model: type[pa.DataFrameModel], df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Validate ``df`` against ``model``; on failure raise :class:`SchemaViolationError`.

    The message names ``where`` (e.g. the file), each failing column and check,
    how many rows fail it and the first row numbers (1 = first data row).
    """
    try:
        return model.validate(df, lazy=True)
    except pa.errors.SchemaErrors as exc:
        fc = exc.failure_cases
        summary: dict[tuple[str, str], int] = {}
        lines = []
        for (column, check), group in fc.groupby([fc["column"].fillna("<frame>").astype(str),
                                                  fc["check"].astype(str)], sort=True, dropna=False):
            check = _describe_check(check)
            rows = pd.to_numeric(group["index"], errors="coerce").dropna().astype("int64")
            n = int(rows.nunique()) if len(rows) else int(len(group))
            summary[(column, check)] = n
            if len(rows):
                first = ", ".join(str(r + 1) for r in sorted(rows.unique())[:MAX_ROWS_NAMED])
                lines.append(f"column '{column}': {check}: {n} row(s), first at row(s) {first}")
            else:
                lines.append(f"column '{column}': {check}")
        raise SchemaViolationError(f"{where}: {len(summary)} problem(s): " + "; ".join(lines), summary) from None


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
