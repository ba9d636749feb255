"""A synthetic metro shaped like Montréal's (the STM data of the KDD 2012 paper).

68 stations on 4 lines (green 27, orange 31, yellow 3, blue 12 station slots;
Berri-UQAM is on three lines, Lionel-Groulx, Snowdon and Jean-Talon on two).
Each passenger has a home and a work station, drawn from Zipf weights over the
stations ranked by centrality (exponent 0.9 for homes, over a shuffled ranking;
1.3 for work places, the central stations first) and a number of taps over the period drawn from a
long-tailed distribution (mean ≈ 4.2, a few heavy users up to 90). Taps
alternate home → work → home; one trip in ten goes elsewhere; a trip whose
origin and destination lie on different lines taps again, with probability
0.3, at the interchange where the passenger changes line.

The taxonomy is each station's line (an interchange belongs to its first
line, so every station has exactly one parent). Randomness is NumPy's PCG64:
synthetic data is not a privacy mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences, Taxonomy

LINE_SIZES = {"green": 27, "orange": 31, "yellow": 3, "blue": 12}
# (line, position on the line) of the interchanges: the first one listed owns the station
INTERCHANGES = {
    "Berri-UQAM": [("green", 14), ("orange", 16), ("yellow", 0)],
    "Lionel-Groulx": [("green", 8), ("orange", 11)],
    "Snowdon": [("orange", 7), ("blue", 0)],
    "Jean-Talon": [("orange", 22), ("blue", 7)],
}
MAX_LENGTH = 90
TRANSFER_TAP = 0.3
ELSEWHERE = 0.1
HEAVY_USERS = 0.002
HOME_ZIPF = 0.9
WORK_ZIPF = 1.3


@dataclass(frozen=True)
class Metro:
    names: list[str]  # station id -> name
    line_of: np.ndarray  # station id -> line index (owning line)
    lines: list[str]
    slots: dict[str, list[int]]  # line -> station ids in order

    @property
    def n_stations(self) -> int:
        return len(self.names)

    @property
    def taxonomy(self) -> Taxonomy:
        return Taxonomy(self.line_of.astype(np.int64), len(self.lines))

    def interchange(self, a: int, b: int) -> int | None:
        """A station where one can change from ``a``'s line to ``b``'s line (None if the same line)."""
        la, lb = self.lines[self.line_of[a]], self.lines[self.line_of[b]]
        if la == lb:
            return None
        for name, spots in INTERCHANGES.items():
            on = {line for line, _ in spots}
            if la in on and lb in on:
                return self.names.index(name)
        return self.names.index("Berri-UQAM")


def build_metro() -> Metro:
    lines = list(LINE_SIZES)
    names: list[str] = []
    line_of: list[int] = []
    slots: dict[str, list[int]] = {line: [-1] * n for line, n in LINE_SIZES.items()}
    for name, spots in INTERCHANGES.items():
        sid = len(names)
        names.append(name)
        line_of.append(lines.index(spots[0][0]))
        for line, pos in spots:
            slots[line][pos] = sid
    for line in lines:
        for pos, sid in enumerate(slots[line]):
            if sid == -1:
                slots[line][pos] = len(names)
                names.append(f"{line.capitalize()} {pos + 1}")
                line_of.append(lines.index(line))
    return Metro(names, np.array(line_of), lines, slots)


def synthesize_metro(n_passengers: int = 850_000, seed: int = 0, *, elsewhere: float = ELSEWHERE,
                     transfer_tap: float = TRANSFER_TAP, work_zipf: float = WORK_ZIPF) -> tuple[Sequences, Metro]:
    """``n_passengers`` sequences of station ids (one per passenger).

    ``elsewhere`` (share of taps away from home and work) and ``transfer_tap`` (chance of tapping at
    the interchange when changing line) set how irregular the passengers are; ``work_zipf`` how
    concentrated the work places are.
    """
    metro = build_metro()
    rng = np.random.default_rng(seed)
    n = metro.n_stations
    # popularity: stations near the centre of each line are busier; demand is concentrated as in a
    # real metro (Zipf over stations ranked by centrality), work places more than homes
    centrality = np.zeros(n)
    for line, ids in metro.slots.items():
        pos = np.arange(len(ids))
        centrality[ids] += 1.0 / (1.0 + np.abs(pos - len(ids) / 2))
    centrality[[metro.names.index(k) for k in INTERCHANGES]] *= 3.0
    rank = np.empty(n)
    rank[np.argsort(-centrality, kind="stable")] = np.arange(1, n + 1)
    home_w = rng.permutation(1.0 / rank ** HOME_ZIPF)
    work_w = 1.0 / rank ** work_zipf
    weight = (home_w / home_w.sum() + work_w / work_w.sum()) / 2
    home = rng.choice(n, n_passengers, p=home_w / home_w.sum())
    work = rng.choice(n, n_passengers, p=work_w / work_w.sum())
    # taps per passenger: long tail (mean about 4.2 with the transfer taps), a few heavy users, at most 90
    lengths = 1 + rng.negative_binomial(1.0, 1.0 / (1.0 + 2.75), n_passengers)
    heavy = rng.random(n_passengers) < HEAVY_USERS
    lengths[heavy] = rng.integers(20, MAX_LENGTH + 1, int(heavy.sum()))
    lengths = np.minimum(lengths, MAX_LENGTH)
    offsets = np.zeros(n_passengers + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    who = np.repeat(np.arange(n_passengers), lengths)
    step = np.arange(total) - offsets[who]
    taps = np.where(step % 2 == 0, home[who], work[who])
    away = rng.random(total) < elsewhere
    taps[away] = rng.choice(n, int(away.sum()), p=weight)
    # transfer taps: between consecutive taps on different lines, sometimes tap at the interchange
    seqs = []
    transfer = {(a, b): metro.interchange(a, b) for a in range(n) for b in range(n)}
    coin = rng.random(total) < transfer_tap
    for p in range(n_passengers):
        a, b = offsets[p], offsets[p + 1]
        s = taps[a:b].tolist()
        out = [s[0]]
        for i in range(1, len(s)):
            x = transfer[(s[i - 1], s[i])]
            if x is not None and coin[a + i] and x not in (s[i - 1], s[i]) and len(out) < MAX_LENGTH - 1:
                out.append(x)
            out.append(s[i])
        seqs.append(out[:MAX_LENGTH])
    return Sequences.from_lists(seqs, n), metro
