"""The free space a release needs once it is charged, checked before the charge.

A full disk after the charge spends the budget for nothing: the spends stay on
the ledger (noise may have been drawn) and the same release id cannot be charged
again. So before the charge a release estimates what it will still write — its
public files (an Opal release: at most the public domain's keys; a passenger-level
release: a fixed allowance), its report with the Data Docs sites (their pages and the
web assets they load) and MLflow's copy of the report, and the records of
MLflow, Prefect and the ledger — and is refused (:class:`InsufficientSpaceError`)
when a filesystem it writes to has less than that free, with a margin. Each part
goes where it is written (:data:`PLACES`: the public files under ``releases/``,
which may be a web root mounted from another filesystem, the report under
``release_reports/``, MLflow's copy under ``mlartifacts/``, the records in the
home, the ledger where ``--ledger`` puts it, the work files under ``private/``), and
the parts are added up per filesystem (by device number: a bind mount of the
same filesystem shares its free space). Whether a release goes ahead is a public
decision, so the estimate is computed from public inputs alone (the domain, the
installed libraries, constants), never from the data: not from its rows, nor
from its files' sizes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from transit_release.errors import InsufficientSpaceError

if TYPE_CHECKING:
    from transit_release.files.home import Home

#: Bytes a released row takes at most, as CSV and as Parquet together (mode, date, tap, a time bin, a location
#: name, a count).
BYTES_PER_ROW = 128
#: What a run writes after its charge besides its files, report and Data Docs: MLflow's run and Prefect's task
#: runs and logs (their SQLite databases grow by pages), the ledger's entries, the release index.
RECORDS_BYTES = 6 << 20
#: Of :data:`RECORDS_BYTES`: what the ledger's entries take (its file may lie elsewhere: ``--ledger``), and what
#: a run writes under ``private/`` once charged (its claim, its run log, its work files' bookkeeping).
LEDGER_BYTES = 1 << 20
PRIVATE_BYTES = 1 << 20
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
    assets = Path(__file__).resolve().parent.parent.parent / "schemas" / "data_docs_assets"
    loaded = sum((images / name).stat().st_size for name in ("logo-long.png", "favicon.ico")
                 if images and (images / name).is_file())
    return loaded + _tree_bytes(assets) + DOCS_PAGES_BYTES


def opal_public_rows(days: int, locations: dict[str, int], bins: int) -> int:
    """At most how many rows an Opal release publishes: each of the six marginals of each (mode, date) partition
    releases at most its public domain's keys (time bins, the mode's locations, both, and the unknown key)."""
    return days * sum(2 * (bins + 1) + 2 * (n + 1) + 2 * (bins + 1) * (n + 1) for n in locations.values())


#: Where a release writes once charged, and what each place is called in a refusal.
PLACES = {"public": "its public files", "reports": "its report and Data Docs",
          "artifacts": "MLflow's copy of its report", "records": "the MLflow and Prefect records",
          "ledger": "the ledger's entries", "private": "its private work files"}


def release_needs_by_place(public_rows: int, docs_sites: int = 0, docs_copies: int = 0) -> dict[str, int]:
    """Bytes a release writes after its charge, per place (:data:`PLACES`): its public files (``public_rows``, with
    the margin), its report with ``docs_sites`` Data Docs sites still to build, MLflow's copy of the report with
    ``docs_copies`` sites (sizes known from the installed files), and the records (with the margin)."""
    site = data_docs_site_bytes()
    return {"public": int(MARGIN * public_rows * BYTES_PER_ROW),
            "reports": docs_sites * site + REPORT_BYTES,
            "artifacts": docs_copies * site + REPORT_BYTES,
            "records": int(MARGIN * (RECORDS_BYTES - LEDGER_BYTES - PRIVATE_BYTES)),
            "ledger": int(MARGIN * LEDGER_BYTES), "private": int(MARGIN * PRIVATE_BYTES)}


def release_needs(public_rows: int, docs_sites: int = 0, docs_copies: int = 0) -> int:
    """Bytes a release writes after its charge, in all (:func:`release_needs_by_place`)."""
    return sum(release_needs_by_place(public_rows, docs_sites, docs_copies).values())


def records_release_needs() -> dict[str, int]:
    """Bytes a passenger-level release (sequences, trajectories, sets) writes after its charge, per place: the
    allowance for its public files (:data:`PASSENGER_FILES_BYTES`), its report, and the records; with the margin,
    no Data Docs."""
    return {**release_needs_by_place(0), "public": int(MARGIN * PASSENGER_FILES_BYTES)}


def places(home: "Home", release_root: Path) -> dict[str, Path]:
    """The directory each place of :data:`PLACES` is written in: the public files under ``release_root`` (where
    they are staged too: :meth:`Home.staging_root` stages in ``private/`` only when one rename reaches it)."""
    return {"public": release_root, "reports": home.reports, "artifacts": home.mlflow_artifacts,
            "records": home.root, "ledger": home.ledger.parent, "private": home.private}


def _existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (where it would be created)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_free_space(home: "Home", needed: dict[str, int], release_id: str, release_root: Path | None = None) -> int:
    """Refuse the release if any filesystem it writes to (:func:`places`) has less free than the parts ``needed``
    there add up to; returns the least free space left over. Filesystems are told apart by device number: a bind
    mount of the home's own filesystem shares its free space, a web root mounted from another one does not."""
    where = places(home, home.releases if release_root is None else release_root)
    groups: dict[int, list[str]] = {}
    for place in PLACES:
        if needed.get(place):
            groups.setdefault(os.stat(_existing(where[place])).st_dev, []).append(place)
    spare = None
    for dev, names in groups.items():
        need = sum(needed[p] for p in names)
        shown = home.root if "records" in names else where[names[0]]
        free = shutil.disk_usage(_existing(where[names[0]])).free
        if free < need:
            what = ", ".join(PLACES[p] for p in names)
            raise InsufficientSpaceError(
                f"release '{release_id}': the filesystem of {shown} has {free / 2**20:.1f} MiB free; the release "
                f"needs about {need / 2**20:.1f} MiB there once charged ({what}, with a margin): nothing was "
                "charged; free some space there or use a larger filesystem")
        spare = free - need if spare is None else min(spare, free - need)
    return spare or 0
