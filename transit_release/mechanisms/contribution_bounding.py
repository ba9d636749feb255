"""Contribution bounding: at most ``k`` trips per card per partition, at most ``P`` partitions per card.

This is what PipelineDP calls ``max_contributions_per_partition`` /
``max_partitions_contributed`` and Tumult Analytics ``MaxRowsPerID`` /
``MaxGroupsPerID``: bound each person's contribution *first*, while the card id
is still there, so that every mechanism afterwards sees data whose sensitivity
to one card is known. Here a partition is one (mode, date) of the Opal release.

For every card:

1. in each partition where it has more than ``k`` trips, ``k`` of them are kept,
   chosen uniformly at random;
2. if it has trips in more than ``P`` partitions, ``P`` of those partitions are
   kept, chosen uniformly at random (uniform over partitions, not weighted by
   trips, as PipelineDP samples a user's partitions), and its trips elsewhere
   are dropped.

The two steps commute (one chooses rows inside a (card, partition) pair, the
other chooses pairs), so their order does not matter.

**Why this is a stable transformation.** Which of a card's rows survive depends
only on that card's own rows and on random priorities that are independent
across cards (a keyed hash of the card id and the row's content, the key drawn
from the noise source; see below). So the bounded data set is the union over
cards of independent per-card choices. Adding or removing one card adds or
removes exactly that card's bounded rows — at most ``k`` in each of at most
``P`` partitions — and leaves every other card's choice, in distribution and
even for the same key, unchanged. A mechanism that is (ε, δ)-DP for "add or
remove at most ``k`` rows in each of at most ``P`` partitions" is therefore
(ε, δ)-DP for "add or remove one card" when run on the bounded data (average its
guarantee over the other cards' independent choices). The number of rows
dropped depends on the data, so it is an internal figure (report, MLflow),
never public.

**Randomness, and independence of row order.** A row's priority is a keyed
64-bit hash of (card id, the columns that make rows distinct), and inside a
group the rows with the smallest priorities are kept; a pair's priority is the
keyed hash of (card id, partition). The keys are 64-bit words drawn from
ChaCha20 streams of :class:`~transit_release.noise.NoiseSource`, one stream per
partition for the rows (``("contribution-bounding", "rows", <partition>)``) and
one for the pairs (``("contribution-bounding", "partitions")``), so a later,
streamed implementation that bounds one partition at a time draws exactly the
same keys and keeps exactly the same rows. Because a priority is a function of
a row's content and not of its position, shuffling the input rows changes
nothing (rows with identical content in one group are interchangeable; ties of
the hash, about 2⁻⁶⁴ per pair of rows, are broken by the content, canonically).
The hash (MurmurHash3's 64-bit finaliser, chained over the columns) is not a
cryptographic PRF: privacy does not need one (any choice that depends only on
the card's own rows keeps the transformation stable), only the uniformity of
the choice does, and the finaliser's full avalanche gives that statistically
(tested). The alternative the brief suggests — a canonical sort of all rows by
content, then random words in that order — costs a full lexicographic sort of
13.5 million rows (tens of seconds here); hashing costs a few passes over only
the rows that need a choice.

**Cost.** One stable radix sort of the partition codes, then per partition one
sort of its card ids; the priorities are computed and sorted only for the rows
of groups that exceed ``k`` and for the pairs of cards that exceed ``P``. Memory
is a few arrays of the input's length; :func:`choose_rows` works on one
partition and :func:`choose_partitions` on the (card, partition) pairs table
alone, so a streamed implementation needs one partition's rows at a time plus
the pairs table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transit_release.noise import NoiseSource

STREAM = "contribution-bounding"

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


@dataclass(frozen=True)
class ContributionBounds:
    """Public parameters: at most ``max_rows_per_partition`` (k) trips per card per partition and at most
    ``max_partitions`` (P) partitions per card."""

    max_rows_per_partition: int
    max_partitions: int

    def __post_init__(self):
        for name in ("max_rows_per_partition", "max_partitions"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"contribution bounds: {name} must be a positive integer. Found {v!r}.")


@dataclass(frozen=True)
class BoundingResult:
    """The kept rows (a mask over the input, in input order) and internal counts (never public)."""

    kept: np.ndarray  # bool, one per input row
    rows_in: int
    rows_kept: int
    rows_dropped_per_partition_cap: int  # rows beyond k in their (card, partition)
    rows_dropped_partitions_cap: int  # rows (within the k cap) of the partitions dropped by the P cap
    cards: int
    cards_truncated: int  # cards that lost at least one row
    cards_over_rows_cap: int  # cards with more than k rows in some partition
    cards_over_partitions_cap: int  # cards with rows in more than P partitions
    pairs: int  # (card, partition) pairs before bounding
    pairs_dropped: int

    @property
    def rows_dropped(self) -> int:
        return self.rows_in - self.rows_kept

    def counts(self) -> dict[str, int]:
        """The internal figures as a flat mapping (for the report and MLflow)."""
        return {"rows_in": self.rows_in, "rows_kept": self.rows_kept, "rows_dropped": self.rows_dropped,
                "rows_dropped_per_partition_cap": self.rows_dropped_per_partition_cap,
                "rows_dropped_partitions_cap": self.rows_dropped_partitions_cap,
                "cards": self.cards, "cards_truncated": self.cards_truncated,
                "cards_over_rows_cap": self.cards_over_rows_cap,
                "cards_over_partitions_cap": self.cards_over_partitions_cap,
                "pairs": self.pairs, "pairs_dropped": self.pairs_dropped}


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place on a uint64 array (a bijection with full avalanche)."""
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


def _as_u64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise TypeError(f"contribution bounding: columns must be integer arrays. Found dtype {x.dtype}.")
    return x.astype(np.int64, copy=False).view(np.uint64)


def keyed_priority(keys: np.ndarray, columns: Sequence[np.ndarray]) -> np.ndarray:
    """A keyed 64-bit hash of each row of ``columns`` (``len(keys) == len(columns) + 1`` uint64 words)."""
    keys = np.asarray(keys, dtype=np.uint64)
    if keys.size != len(columns) + 1:
        raise ValueError(f"keyed_priority needs {len(columns) + 1} key words. Found {keys.size}.")
    with np.errstate(over="ignore"):
        h = _fmix64(_as_u64(columns[0]) ^ keys[0])
        for key, col in zip(keys[1:-1], columns[1:]):
            h ^= _as_u64(col) + key
            h = _fmix64(h)
        h ^= keys[-1]
        return _fmix64(h)


def _draw_keys(noise: NoiseSource, n: int, *name: str) -> np.ndarray:
    return np.asarray(noise.stream(STREAM, *name).bit_generator.random_raw(n), dtype=np.uint64)


def _smallest_per_group(group: np.ndarray, priority: np.ndarray, tiebreak: Sequence[np.ndarray],
                        limit: int) -> np.ndarray:
    """Mask of the ``limit`` rows of smallest priority in each group (``group`` sorted ascending, int64).

    Rows are ordered by (group, priority); equal (group, priority) runs — hash ties — are ordered by the
    ``tiebreak`` columns, so the result never depends on the rows' order (equal rows are interchangeable).
    """
    n = group.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(priority, kind="stable")
    order = order[np.argsort(group[order], kind="stable")]
    g, p = group[order], priority[order]
    same = (g[1:] == g[:-1]) & (p[1:] == p[:-1])
    if same.any():  # about 2^-64 per pair of distinct rows: fix the rare runs canonically
        starts = np.flatnonzero(np.r_[True, ~same])
        ends = np.r_[starts[1:], n]
        for s, e in zip(starts, ends):
            if e - s > 1:
                run = order[s:e]
                sub = np.lexsort(tuple(np.asarray(c)[run] for c in reversed(tiebreak)))
                order[s:e] = run[sub]
    first = np.r_[True, g[1:] != g[:-1]]
    start_of = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    rank = np.arange(n) - start_of
    kept = np.zeros(n, dtype=bool)
    kept[order] = rank < limit
    return kept


def choose_rows(card: np.ndarray, columns: Sequence[np.ndarray], max_rows: int,
                noise: NoiseSource, partition_label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Within one partition, keep at most ``max_rows`` rows per card, uniformly at random.

    Returns (kept mask over the rows, the partition's distinct cards ascending, each row's index into them).
    """
    return _choose_rows(np.asarray(card, dtype=np.int64), lambda idx: [np.asarray(c)[idx] for c in columns],
                        max_rows, noise, partition_label)


def _choose_rows(card, columns_at, max_rows, noise, partition_label):
    """:func:`choose_rows` with ``columns_at(positions)`` giving the columns of some rows only (those of
    groups above ``max_rows``), so the other rows' columns are never gathered."""
    n = card.size
    order = np.argsort(card, kind="stable")
    cs = card[order]
    first = np.empty(n, dtype=bool)
    first[:1] = True
    np.not_equal(cs[1:], cs[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    cards = cs[starts]
    sizes = np.diff(np.append(starts, n))
    gid_sorted = np.repeat(np.arange(starts.size, dtype=np.int64), sizes)
    card_index = np.empty(n, dtype=np.int64)
    card_index[order] = gid_sorted
    kept = np.ones(n, dtype=bool)
    over_groups = sizes > max_rows
    if over_groups.any():
        over = np.repeat(over_groups, sizes)
        rows = order[over]
        cols = [card[rows], *columns_at(rows)]
        keys = _draw_keys(noise, len(cols) + 1, "rows", partition_label)
        prio = keyed_priority(keys, cols)
        kept[rows] = _smallest_per_group(gid_sorted[over], prio, cols, max_rows)
    return kept, cards, card_index


def choose_partitions(pair_card: np.ndarray, pair_partition: np.ndarray, max_partitions: int,
                      noise: NoiseSource) -> np.ndarray:
    """On the (card, partition) pairs table (each pair once), keep at most ``max_partitions`` pairs per card,
    uniformly at random. Returns the kept mask over the pairs; independent of the pairs' order."""
    return _choose_partitions(pair_card, pair_partition, max_partitions, noise)[0]


def _choose_partitions(pair_card, pair_partition, max_partitions, noise):
    """(kept mask over pairs, each pair's dense card index, number of pairs per dense card)."""
    pair_card = np.asarray(pair_card, dtype=np.int64)
    pair_partition = np.asarray(pair_partition, dtype=np.int64)
    kept = np.ones(pair_card.size, dtype=bool)
    if pair_card.size == 0:
        return kept, np.zeros(0, np.int64), np.zeros(0, np.int64)
    n = pair_card.size
    order = np.argsort(pair_card, kind="stable")  # timsort: pairs usually come as sorted runs per partition
    cs = pair_card[order]
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(cs[1:], cs[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    per_card = np.diff(np.append(starts, n))
    gid = np.repeat(np.arange(starts.size, dtype=np.int64), per_card)
    over = np.repeat(per_card > max_partitions, per_card)
    if over.any():
        rows = order[over]
        cols = [pair_card[rows], pair_partition[rows]]
        prio = keyed_priority(_draw_keys(noise, 3, "partitions"), cols)
        kept[rows] = _smallest_per_group(gid[over], prio, cols, max_partitions)
    card_of_pair = np.empty(pair_card.size, dtype=np.int64)
    card_of_pair[order] = gid
    return kept, card_of_pair, per_card


def bound_contributions(card: np.ndarray, partition: np.ndarray, columns: Sequence[np.ndarray],
                        bounds: ContributionBounds, noise: NoiseSource,
                        partition_labels: Sequence[str] | None = None) -> BoundingResult:
    """Bound every card's contribution: ≤ k rows per (card, partition), ≤ P partitions per card.

    ``card``: the card id of each row (int64); ``partition``: the row's partition code (small non-negative
    ints, e.g. the encoded ``part``); ``columns``: the integer columns that make a card's rows in one
    partition distinct (e.g. the encoded time bins and locations, or the raw minutes and stops);
    ``partition_labels[code]`` names the partition's noise stream (default: the code). Returns the mask
    of kept rows in input order and the internal counts.
    """
    card = np.asarray(card, dtype=np.int64)
    partition = np.asarray(partition)
    n = card.size
    if partition.shape != (n,) or any(np.shape(c) != (n,) for c in columns):
        raise ValueError("contribution bounding: card, partition and every column must have one value per row")
    if n and partition.min() < 0:
        raise ValueError("contribution bounding: partition codes must be non-negative")
    n_parts = int(partition.max()) + 1 if n else 0
    labels = list(partition_labels) if partition_labels is not None else [str(p) for p in range(n_parts)]
    if len(labels) < n_parts:
        raise ValueError(f"contribution bounding: {n_parts} partition codes but {len(labels)} labels")
    k, cap = bounds.max_rows_per_partition, bounds.max_partitions

    by_part = np.argsort(partition.astype(np.int16 if n_parts < 2**15 else np.int64), kind="stable")
    edges = np.searchsorted(partition[by_part], np.arange(n_parts + 1))
    row_kept = np.empty(n, dtype=bool)
    row_pair = np.empty(n, dtype=np.int64)  # global pair index of each row
    pair_cards, pair_parts = [], []
    offset = 0
    for p in range(n_parts):
        rows = by_part[edges[p]:edges[p + 1]]
        if rows.size == 0:
            continue
        kept_p, cards_p, idx_p = _choose_rows(card[rows], lambda idx, rows=rows: [np.asarray(c)[rows[idx]]
                                                                                  for c in columns],
                                              k, noise, labels[p])
        row_kept[rows] = kept_p
        row_pair[rows] = idx_p + offset
        pair_cards.append(cards_p)
        pair_parts.append(np.full(cards_p.size, p, dtype=np.int64))
        offset += cards_p.size
    pair_card = np.concatenate(pair_cards) if pair_cards else np.zeros(0, np.int64)
    pair_part = np.concatenate(pair_parts) if pair_parts else np.zeros(0, np.int64)
    pair_kept, card_of_pair, parts_per_card = _choose_partitions(pair_card, pair_part, cap, noise)
    kept = row_kept & pair_kept[row_pair]

    # internal counts
    n_cards = parts_per_card.size
    lost = np.bincount(card_of_pair[row_pair[~kept]], minlength=n_cards) > 0
    over_rows_pairs = np.bincount(row_pair[~row_kept], minlength=pair_card.size) > 0
    over_rows = np.bincount(card_of_pair[over_rows_pairs], minlength=n_cards) > 0
    return BoundingResult(
        kept=kept, rows_in=n, rows_kept=int(kept.sum()),
        rows_dropped_per_partition_cap=int((~row_kept).sum()),
        rows_dropped_partitions_cap=int((row_kept & ~pair_kept[row_pair]).sum()),
        cards=int(n_cards), cards_truncated=int(lost.sum()),
        cards_over_rows_cap=int(over_rows.sum()), cards_over_partitions_cap=int((parts_per_card > cap).sum()),
        pairs=int(pair_card.size), pairs_dropped=int((~pair_kept).sum()))


__all__ = ["ContributionBounds", "BoundingResult", "bound_contributions", "choose_rows", "choose_partitions",
           "keyed_priority", "STREAM"]
