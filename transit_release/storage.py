"""The free space a release needs once it is charged, checked before the charge.

A full disk after the charge spends the budget for nothing: the spends stay on
the ledger (noise may have been drawn) and the same release id cannot be charged
again. So before the charge a release estimates what it will still write — its
public files (an Opal release: at most the public domain's keys; a passenger-level
release: a fixed allowance), its report with the Data Docs sites (their pages and the
web assets they load) and MLflow's copy of the report, and the records of
MLflow, Prefect and the ledger — and is refused (:class:`InsufficientSpaceError`)
when the home's filesystem has less than that free, with a margin. Whether a
release goes ahead is a public decision, so the estimate is computed from public
inputs alone (the domain, the installed libraries, constants), never from the
data: not from its rows, nor from its files' sizes.
"""

from __future__ import annotations

import importlib.util
import shutil
from functools import cache
from pathlib import Path

from transit_release.errors import InsufficientSpaceError

#: Bytes a released row takes at most, as CSV and as Parquet together (mode, date, tap, a time bin, a location
#: name, a count).
BYTES_PER_ROW = 128
#: What a run writes after its charge besides its files, report and Data Docs: MLflow's run and Prefect's task
#: runs and logs (their SQLite databases grow by pages), the ledger's entries, the release index.
RECORDS_BYTES = 6 << 20
#: The report's figures and pages.
REPORT_BYTES = 2 << 20
#: Rendered pages of one Data Docs site, beside its static files.
DOCS_PAGES_BYTES = 1 << 20
#: The estimated parts (public files, records) are multiplied by this.
MARGIN = 1.5
#: The public files of a passenger-level release (sequences, n-grams, trajectories, sets) are allowed this much:
#: their size follows the data (released records), which the check must not read. A larger release that fills the
#: disk after its charge ends in one line with its state and what `repair` does.
PASSENGER_FILES_BYTES = 64 << 20


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


@cache
def data_docs_site_bytes() -> int:
    """One Data Docs site: the offline copies of its web assets (``schemas/data_docs_assets``), Great
    Expectations' images its pages load (found without importing it) and its pages. (The two sites of a release
    share one copy of the assets: counted once per site, this errs on the safe side.)"""
    spec = importlib.util.find_spec("great_expectations")
    images = Path(spec.origin).parent / "render" / "view" / "static" / "images" if spec and spec.origin else None
    assets = Path(__file__).resolve().parent.parent / "schemas" / "data_docs_assets"
    loaded = sum((images / name).stat().st_size for name in ("logo-long.png", "favicon.ico")
                 if images and (images / name).is_file())
    return loaded + _tree_bytes(assets) + DOCS_PAGES_BYTES


def opal_public_rows(days: int, locations: dict[str, int], bins: int) -> int:
    """At most how many rows an Opal release publishes: each of the six marginals of each (mode, date) partition
    releases at most its public domain's keys (time bins, the mode's locations, both, and the unknown key)."""
    return days * sum(2 * (bins + 1) + 2 * (n + 1) + 2 * (bins + 1) * (n + 1) for n in locations.values())


def release_needs(public_rows: int, docs_sites: int = 0, docs_copies: int = 0) -> int:
    """Bytes a release writes after its charge: its report with ``docs_sites`` Data Docs sites still to build and
    MLflow's copy of the report with ``docs_copies`` sites (sizes known from the installed files), and, with the
    margin, its public files (``public_rows``) and the records."""
    known = (docs_sites + docs_copies) * data_docs_site_bytes() + 2 * REPORT_BYTES
    return int(known + MARGIN * (public_rows * BYTES_PER_ROW + RECORDS_BYTES))


def records_release_needs() -> int:
    """Bytes a passenger-level release (sequences, trajectories, sets) writes after its charge: the allowance for
    its public files (:data:`PASSENGER_FILES_BYTES`), its report, and the records; with the margin, no Data Docs."""
    return int(2 * REPORT_BYTES + MARGIN * (PASSENGER_FILES_BYTES + RECORDS_BYTES))


def check_free_space(home_root: Path, needed: int, release_id: str) -> int:
    """Refuse the release if the home's filesystem has less than ``needed`` bytes free; returns the free bytes."""
    free = shutil.disk_usage(home_root).free
    if free < needed:
        raise InsufficientSpaceError(
            f"release '{release_id}': the filesystem of {home_root} has {free / 2**20:.1f} MiB free; the release "
            f"needs about {needed / 2**20:.1f} MiB once charged (its public files, report, Data Docs and MLflow "
            f"copy, and records, with a margin): nothing was charged; free some space or use a home "
            "on a larger filesystem")
    return free
