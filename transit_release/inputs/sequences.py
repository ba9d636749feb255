"""Sequence inputs: the one-sequence-a-line format, and sequences built from tap data.

File format (as in the public sequence data sets): one sequence per line,
location ids separated by white space; lines starting with ``%`` or ``#`` are
comments. Location ids are mapped to ``0..L-1`` through the release's public
:class:`~transit_release.inputs.universe.LocationUniverse` (a locations file, a
taxonomy's leaves or the stop table), never through the tokens found in the
data: a token outside the universe is quarantined, not added to it.

Validation: a line that is not a sequence (empty after stripping) is
quarantined as ``empty``; a sequence longer than ``max_length`` as
``too_long``; a token outside a given vocabulary as ``unknown_location``. The
caller decides with the quarantine limit, as for trips. Messages give line
numbers and counts, never tokens.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import InputDataError
from transit_release.inputs.content import ContentDigest, RecordLines
from transit_release.inputs.refusals import refusal
from transit_release.inputs.universe import (LocationUniverse, from_stop_table, record_lines, require_public,
                                             stop_location_id)
from transit_release.mechanisms.ngram import END
from transit_release.mechanisms.prefix_tree import Sequences

DEFAULT_MAX_LENGTH = 1000
END_TOKEN = "&"  # the n-gram table's end marker
REASONS = ("empty", "too_long", "unknown_location")


@dataclass(frozen=True)
class SequenceInput:
    sequences: Sequences
    universe: LocationUniverse  # public: location index -> id
    quarantined: dict[str, list[int]]  # reason -> 1-based line numbers (private: not values)
    lines: int
    #: the file's kind-independent digest of every record line, before screening (a record file only; private)
    lines_digest: ContentDigest | None = None

    @property
    def quarantine_counts(self) -> dict[str, int]:
        return {r: len(v) for r, v in self.quarantined.items() if v}

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return self.universe.ids


def read_sequence_file(path: str | Path, universe: LocationUniverse,
                       max_length: int = DEFAULT_MAX_LENGTH) -> SequenceInput:
    """Read and screen a one-sequence-a-line file against the public ``universe``."""
    universe = require_public(universe, "read_sequence_file")
    path = Path(path)
    rows: list[list[str]] = []
    numbers: list[int] = []
    quarantined: dict[str, list[int]] = {r: [] for r in REASONS}
    n_lines = 0
    every = RecordLines()
    for number, tokens in record_lines(path, "sequence file"):
        n_lines += 1
        every.add(tokens)
        if not tokens:
            quarantined["empty"].append(number)
        elif len(tokens) > max_length:
            quarantined["too_long"].append(number)
        else:
            rows.append(tokens)
            numbers.append(number)
    if n_lines == 0:
        raise refusal("empty-record-file",
                      InputDataError(f"sequence file {path.name}: no sequences (only comments or nothing)"))
    index = universe.index()
    kept = []
    for number, tokens in zip(numbers, rows):
        ids = [index.get(t, -1) for t in tokens]
        if -1 in ids:
            quarantined["unknown_location"].append(number)
        else:
            kept.append(ids)
    return SequenceInput(Sequences.from_lists(kept, len(universe)), universe,
                         {r: v for r, v in quarantined.items() if v}, n_lines, every.digest())


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


def gram_text(gram: tuple[int, ...], vocabulary: tuple[str, ...]) -> str:
    """A gram as published: its location ids separated by spaces, the end marker as ``&``."""
    return " ".join(END_TOKEN if x == END else vocabulary[x] for x in gram)


def format_ngrams(table: list[tuple[tuple[int, ...], float]], vocabulary: tuple[str, ...]) -> str:
    """The n-gram sanitizer's published table as CSV ``gram,count``, in the table's sorted order.

    A gram's locations are separated by spaces, the end marker is ``&``; counts (consistent, so
    fractional) have two decimals.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["gram", "count"])
    for gram, count in table:
        writer.writerow([gram_text(gram, vocabulary), f"{count:.2f}"])
    return out.getvalue()


def sequences_from_trips(trips: pd.DataFrame, stops: pd.DataFrame, mode: str = "train") -> SequenceInput:
    """One sequence per card over the whole period: its tap-ons of ``mode``, in time order, as station ids.

    One record per card (never one per card-day), so that the release protects a passenger's whole
    sequence over the declared period, as its unit of privacy says. ``trips`` are clean trips of the
    period (screened); the card id groups the taps and is dropped here. The universe is the stop
    table's station names of ``mode`` (public), white space as ``_``.
    """
    universe = from_stop_table(stops, mode)
    index = universe.index()
    t = trips[trips["mode"] == mode]
    names = stops[stops["mode"] == mode].set_index("stop_id")["name"].dropna().map(stop_location_id)
    loc = t["tap_on_stop"].map(names).map(index)
    known = loc.notna().to_numpy()
    df = pd.DataFrame({"card": t["card_id"].to_numpy()[known],
                       "time": t["tap_on_time"].to_numpy()[known],
                       "loc": loc.to_numpy()[known].astype(np.int64)})
    # order by (card, time); ties broken by location so the order never depends on the rows' order
    df = df.sort_values(["card", "time", "loc"], kind="stable")
    card = df["card"].to_numpy()
    bounds = np.flatnonzero(card[1:] != card[:-1]) + 1
    offsets = np.concatenate([[0], bounds, [len(df)]]).astype(np.int64) if len(df) else np.zeros(1, np.int64)
    locs = df["loc"].to_numpy()
    # order the sequences themselves by content, not by card id
    seqs = sorted(tuple(locs[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:]) if b > a)
    unknown_rows = (np.flatnonzero(~known) + 1).tolist()  # 1-based, among this mode's taps
    return SequenceInput(Sequences.from_lists(seqs, len(universe)), universe,
                         {"unknown_location": unknown_rows} if unknown_rows else {}, len(t))
