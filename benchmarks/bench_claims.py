"""What the overlap check between populations costs on a full week (not a test).

    python benchmarks/bench_claims.py --trips full/trips.csv [--stops full/stops.csv] [--weeks 3] [--work DIR]

(``transit-release synth --out full --scale 1`` writes the full-scale synthetic week: 13.5 million trips.) Times,
on the tap file's clean rows split by (mode, day) as the Opal release's partition steps see them:

1. the partition steps' added work: each partition's content digests (its rows with stops as public locations
   and as location ids), distinct card ids and its rows' tap-on and tap-off tokens for the per-card sets, saved under a work
   directory (``transit_release.inputs.content.save_partition``), summed over the partitions;
2. gathering them (``gather_partitions``: every partition's digest added, the card ids merged, each mode's
   rows digested per card: ``ons:<mode>``, ``places:bus``, ``stations:<mode>``);
3. keying them (``claim_of``: HMAC of the digest, SipHash of every distinct card id, sorted);
4. recording the claim of the first release of a population, then of ``--weeks`` − 1 more releases of the same
   population (the same riders, 5% of the cards new each week: each stores only its new cards), with the store's
   size after each;
5. the check of a release of another population against them: the same cards (refused at the first release)
   and other people's cards (passed, every recorded card compared);

and prints one line per step (seconds, and the store's size in MB).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trips", required=True)
    ap.add_argument("--stops", help="the stop table (default: stops.csv beside the trips)")
    ap.add_argument("--weeks", type=int, default=3)
    ap.add_argument("--work", help="working directory (default: a temporary one)")
    args = ap.parse_args()

    from transit_release.accounting import claims
    from transit_release.accounting.claims import ClaimStore, claim_of
    from transit_release.inputs import content
    from transit_release.inputs.tables import read_stops
    from transit_release.preprocessing import build_location_index

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-claims-"))
    t = time.perf_counter()
    table = pacsv.read_csv(args.trips, convert_options=pacsv.ConvertOptions(
        include_columns=["card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]))
    card = table["card_id"].to_numpy().astype(np.int64)
    mode = np.asarray(table["mode"].to_numpy(zero_copy_only=False)).astype(str)
    def ns(column: str) -> np.ndarray:  # a missing time as the int64 minimum (NaT), as the screen gives it
        times = table[column].cast(pa.timestamp("ns")).to_numpy(zero_copy_only=False)
        return np.asarray(times, dtype="datetime64[ns]").view(np.int64)

    on, off = ns("tap_on_time"), ns("tap_off_time")
    on_stop = table["tap_on_stop"].to_numpy().astype(np.int64)
    off_stop = table["tap_off_stop"].fill_null(-1).to_numpy().astype(np.int64)
    print(f"read {len(card):,} trips in {time.perf_counter() - t:.1f} s (not part of the check)")

    day = (on // 86_400_000_000_000)
    key = np.array([content.mode_code(m) for m in ("bus", "ferry", "lightrail", "train")])
    codes = {m: i for i, m in enumerate(("bus", "ferry", "lightrail", "train"))}
    mcode = np.vectorize(codes.get)(mode)
    order = np.lexsort((day, mcode))
    bounds = np.flatnonzero(np.r_[True, (mcode[order][1:] != mcode[order][:-1]) | (day[order][1:] != day[order][:-1]),
                                  True])
    folder = work / "content"
    modes = ("bus", "ferry", "lightrail", "train")
    index = build_location_index(read_stops(args.stops or Path(args.trips).with_name("stops.csv")), modes)
    from transit_release.preprocessing import _lookup

    def index_codes(stop: np.ndarray, m: int) -> np.ndarray:
        return _lookup(index, stop, stop >= 0, np.full(stop.size, m, dtype=np.int8))

    t, c = time.perf_counter(), time.process_time()
    for a, b in zip(bounds[:-1], bounds[1:]):
        sel = order[a:b]
        m = int(mcode[sel[0]])
        # (the stop ids stand for the location keys here: the same work per row)
        digest = content.trip_rows(key[m], on[sel], on_stop[sel], off[sel], off_stop[sel])
        named = content.trip_rows(key[m], on[sel], on_stop[sel], off[sel], off_stop[sel])
        date = str(np.datetime64(int(day[sel[0]]), "D"))
        content.save_partition(folder, modes[m], date, digest, card[sel], named=named,
                               taps=(content.tap_on_tokens(index, on_stop[sel], m),
                                     *(content.place_tokens(index, m, content_codes) for content_codes in
                                       (index_codes(on_stop[sel], m), index_codes(off_stop[sel], m)))), shards=7)
    print(f"1. partition steps' added work ({len(bounds) - 1} partitions): {time.perf_counter() - t:.2f} s "
          f"({time.process_time() - c:.2f} s CPU)")
    t, c = time.perf_counter(), time.process_time()
    gathered = content.gather_partitions(folder)
    print(f"2. gather: {time.perf_counter() - t:.2f} s ({time.process_time() - c:.2f} s CPU; {gathered.n_cards:,} "
          f"cards; {len(gathered.digests)} digests; the work files {_tree_mb(folder):.0f} MB)")
    key_bytes = bytes(range(32))
    t = time.perf_counter()
    claim = claim_of(key_bytes, gathered)
    print(f"3. key (HMAC, SipHash of {claim.n_cards:,} cards, sort): {time.perf_counter() - t:.2f} s")

    store = ClaimStore(work / "claims.sqlite", key_bytes)
    rng = np.random.default_rng(0)
    released: dict[str, str] = {}
    cards = gathered.cards
    for w in range(args.weeks):
        if w:  # the same riders: 5% new cards each week
            new = cards.max() + 1 + np.arange(cards.size // 20)
            cards = np.sort(np.concatenate([rng.choice(cards, cards.size - new.size, replace=False), new]))
        week = claim_of(key_bytes, content.InputContent(
            (content.ContentDigest("trips", gathered.digests[0].records + w, gathered.digests[0].lanes),), cards))
        t = time.perf_counter()
        claims.refuse_overlap(store, week, [], [_Event(f"week{w}", "default")])
        store.record(f"week{w}", week, list(released))
        released[f"week{w}"] = "default"
        print(f"4. week {w + 1}: check and record {week.n_cards:,} cards: {time.perf_counter() - t:.2f} s; store "
              f"{store.path.stat().st_size / 1e6:.1f} MB")
    spends = [_Event(rid, p) for rid, p in released.items()]
    t = time.perf_counter()
    try:
        claims.refuse_overlap(store, claim, spends, [_Event("other", "riders-d")])
        verdict = "passed (unexpected)"
    except Exception as exc:  # noqa: BLE001
        verdict = f"refused ({type(exc).__name__})"
    print(f"5. another population, the same cards: {verdict} in {time.perf_counter() - t:.2f} s")
    others = claim_of(key_bytes, content.InputContent((content.ContentDigest("trips", 1, (1, 2)),),
                                                      np.arange(10**12, 10**12 + gathered.n_cards)))
    t = time.perf_counter()
    claims.refuse_overlap(store, others, spends, [_Event("other", "riders-d")])
    print(f"5. another population, other people's {others.n_cards:,} cards: passed in {time.perf_counter() - t:.2f} s")


def _tree_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 1e6


class _Event:
    """The two fields of a spend the check reads."""

    entry_type = "spend"

    def __init__(self, release_id: str, population: str):
        self.release_id, self.population = release_id, population


if __name__ == "__main__":
    main()
