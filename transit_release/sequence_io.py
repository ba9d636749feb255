"""Sequence inputs: the one-sequence-a-line format, and sequences built from tap data.

File format (as in the public sequence data sets): one sequence per line,
location ids separated by white space; lines starting with ``%`` or ``#`` are
comments. Location ids may be any tokens; they are mapped to ``0..L-1`` by a
sorted vocabulary (the stop table's when built from taps), never by order of
appearance, so the mapping does not depend on the data's order.

Validation: a line that is not a sequence (empty after stripping) is
quarantined as ``empty``; a sequence longer than ``max_length`` as
``too_long``; a token outside a given vocabulary as ``unknown_location``. The
caller decides with the quarantine limit, as for trips. Messages give line
numbers and counts, never tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import InputDataError
from transit_release.mechanisms.prefix_tree import Sequences

DEFAULT_MAX_LENGTH = 1000
REASONS = ("empty", "too_long", "unknown_location")


@dataclass(frozen=True)
class SequenceInput:
    sequences: Sequences
    vocabulary: tuple[str, ...]  # location id -> token
    quarantined: dict[str, list[int]]  # reason -> 1-based line numbers (private: not values)
    lines: int

    @property
    def quarantine_counts(self) -> dict[str, int]:
        return {r: len(v) for r, v in self.quarantined.items() if v}


def read_sequence_file(path: str | Path, vocabulary: tuple[str, ...] | None = None,
                       max_length: int = DEFAULT_MAX_LENGTH) -> SequenceInput:
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"sequence file {path}: not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputDataError(f"sequence file {path.name}: the text is not valid UTF-8") from None
    rows: list[list[str]] = []
    numbers: list[int] = []
    quarantined: dict[str, list[int]] = {r: [] for r in REASONS}
    n_lines = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(("%", "#")):
            continue
        n_lines += 1
        tokens = stripped.split()
        if not tokens:
            quarantined["empty"].append(number)
        elif len(tokens) > max_length:
            quarantined["too_long"].append(number)
        else:
            rows.append(tokens)
            numbers.append(number)
    if n_lines == 0:
        raise InputDataError(f"sequence file {path.name}: no sequences (only comments or nothing)")
    vocab = tuple(vocabulary) if vocabulary is not None else tuple(sorted({t for r in rows for t in r}))
    index = {t: i for i, t in enumerate(vocab)}
    kept = []
    for number, tokens in zip(numbers, rows):
        ids = [index.get(t, -1) for t in tokens]
        if -1 in ids:
            quarantined["unknown_location"].append(number)
        else:
            kept.append(ids)
    return SequenceInput(Sequences.from_lists(kept, len(vocab)), vocab,
                         {r: v for r, v in quarantined.items() if v}, n_lines)


def format_sequences(release: list[tuple[tuple[int, ...], int]], vocabulary: tuple[str, ...],
                     header: str = "") -> str:
    """One line per released sequence (``copies`` lines for each prefix), in the release's sorted order."""
    parts = [f"# {line}\n" for line in header.splitlines()]
    for prefix, copies in release:
        parts.append((" ".join(vocabulary[i] for i in prefix) + "\n") * copies)
    return "".join(parts)


def write_sequence_file(path: str | Path, release: list[tuple[tuple[int, ...], int]],
                        vocabulary: tuple[str, ...], header: str = "") -> None:
    Path(path).write_text(format_sequences(release, vocabulary, header), encoding="utf-8", newline="\n")


def sequences_from_trips(trips: pd.DataFrame, stops: pd.DataFrame, mode: str = "train") -> SequenceInput:
    """A card's tap-ons of one day, in time order, as station names (one sequence per card-day).

    ``trips`` are clean trips (validated); the card id groups taps and is dropped here.
    """
    t = trips[trips["mode"] == mode]
    names = stops[stops["mode"] == mode].set_index("stop_id")["name"]
    vocab = tuple(sorted(names.dropna().unique()))
    index = {n: i for i, n in enumerate(vocab)}
    loc = t["tap_on_stop"].map(names).map(index)
    known = loc.notna().to_numpy()
    df = pd.DataFrame({"card": t["card_id"].to_numpy()[known],
                       "day": t["tap_on_time"].dt.normalize().to_numpy()[known],
                       "time": t["tap_on_time"].to_numpy()[known],
                       "loc": loc.to_numpy()[known].astype(np.int64)})
    # order by (card, day, time); ties broken by location so the order never depends on the rows' order
    df = df.sort_values(["card", "day", "time", "loc"], kind="stable")
    group = df.groupby(["card", "day"], sort=False).ngroup().to_numpy()
    bounds = np.flatnonzero(np.diff(group)) + 1
    offsets = np.concatenate([[0], bounds, [len(df)]]).astype(np.int64)
    # order the sequences themselves by content, not by card id
    seqs = sorted(tuple(df["loc"].to_numpy()[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:]))
    unknown_rows = (np.flatnonzero(~known) + 1).tolist()  # 1-based, among this mode's taps
    return SequenceInput(Sequences.from_lists(seqs, len(vocab)), vocab,
                         {"unknown_location": unknown_rows} if unknown_rows else {}, len(t))
