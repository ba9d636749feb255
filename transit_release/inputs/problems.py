"""Problems of an input file gathered over the batches it is read in, reported as a whole-file check would.

A message names the file, each failing column and check, how many rows fail it and the first row numbers
(1 = first data row), never a value.
"""

from __future__ import annotations

import numpy as np

from transit_release.errors import SchemaViolationError

MAX_ROWS_NAMED = 5


class ProblemTally:
    """Schema problems gathered over a file read in batches: per (column, check) the number of rows and the
    first row numbers, so that the message is the one a whole-file validation gives."""

    def __init__(self, where: str, sort_keys: bool = True):
        self.where = where
        self.sort_keys = sort_keys  # pandera's problems by (column, check); others in the order first found
        self.rows: dict[tuple[str, str], int] = {}
        self.first: dict[tuple[str, str], list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self.rows)

    def add(self, problems: dict[tuple[str, str], np.ndarray]) -> None:
        """Add one batch's problems (positions already offset to the file)."""
        for key, positions in problems.items():
            self.rows[key] = self.rows.get(key, 0) + int(positions.size)
            first = self.first.setdefault(key, [])
            if len(first) < MAX_ROWS_NAMED:
                first.extend(int(r) for r in positions[:MAX_ROWS_NAMED - len(first)])

    @property
    def column_level(self) -> bool:
        """A problem of the columns themselves (missing, unexpected): every further batch repeats it."""
        return any(n == 0 for n in self.rows.values())

    def raise_if_any(self) -> None:
        if not self.rows:
            return
        keys = sorted(self.rows) if self.sort_keys else list(self.rows)
        lines = []
        for key in keys:
            column, chk = key
            n = self.rows[key]
            if n:
                first = ", ".join(str(r + 1) for r in sorted(self.first[key])[:MAX_ROWS_NAMED])
                lines.append(f"column '{column}': {chk}: {n} row(s), first at row(s) {first}")
            else:
                lines.append(f"column '{column}': {chk}")
        summary = {key: self.rows[key] for key in keys}
        raise SchemaViolationError(f"{self.where}: {len(summary)} problem(s): " + "; ".join(lines), summary) from None
