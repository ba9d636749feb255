"""What every passenger-level release kind (sequences, sets, ...) shares: counted tables, data card lines."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from transit_release.inputs.universe import LocationUniverse
from transit_release.releases.loss_statement import person_text, unit_text


#: How the spends of releases over declared periods compose (manifests and data cards).
PERIOD_COMPOSITION = ("one spend per release; releases of disjoint declared periods compose in parallel, releases "
                      "whose periods overlap add up on their common days")


def counted_table(release: list[tuple[tuple[int, ...], int]], universe: LocationUniverse, column: str) -> pd.DataFrame:
    """``<column>,count``: each distinct released record once (its location ids separated by spaces), sorted."""
    counts: Counter = Counter()
    for record, copies in release:
        if copies > 0:
            counts[" ".join(universe.ids[i] for i in record)] += int(copies)
    rows = sorted(counts.items())
    return pd.DataFrame({column: [r[0] for r in rows], "count": [r[1] for r in rows]}).astype(
        {column: str, "count": "int64"})


def cumulative_text(p: dict) -> str:
    """The data card's section on where a passenger of the population stood at publication, every kind of release
    counted, then the line on the release's own unit (a passenger's record of the period; empty before staging)."""
    unit = unit_text(p, "one passenger's record of a period; releases of disjoint periods count separately here")
    return person_text(p) + ("\n" + unit if unit else "")


def provenance_text(manifest: dict) -> str:
    """The data card's last lines: noise source, code version and the ledger head at publication."""
    head = manifest.get("ledger_head", {})
    return (f"Noise source: {manifest['noise_source']}. Code version: {manifest['code_version']}.\n"
            f"Ledger head at publication: entry {head.get('seq', '—')}, `{head.get('hash', '—')}`.\n")
