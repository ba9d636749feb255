"""Open data that portals and analysts can use: what every release publishes beside its files.

* :mod:`~transit_release.opendata.uncertainty`: ``uncertainty.csv`` (the margins of error of the counts) and
  the data card's "Margins of error" section, from the public noise distribution
  (:mod:`transit_release.analysis`);
* :mod:`~transit_release.opendata.datapackage`: ``datapackage.json``, the release as a Frictionless Data Package;
* :mod:`~transit_release.opendata.landing`: ``index.html``, the release's public landing page;
* :mod:`~transit_release.opendata.catalog`: ``releases/catalog.jsonld``, the DCAT catalogue of every release;
* :mod:`~transit_release.opendata.settings`: licence, publisher and base URL (``<home>/open-data.yaml``).

The first three are written into a release's staging directory before its
manifest is written (:func:`describe_release`), so the manifest lists and hashes
them and the audit checks them like every other file. All of them are computed
from the manifest, the data card and the published files: public parameters and
the noisy output only.
"""

from __future__ import annotations

import json
from pathlib import Path

from transit_release.opendata.datapackage import DATAPACKAGE, build_datapackage
from transit_release.opendata.landing import LANDING, render_landing
from transit_release.opendata.settings import OpenDataSettings
from transit_release.opendata.uncertainty import UNCERTAINTY, card_section, uncertainty_table

__all__ = ["DATAPACKAGE", "LANDING", "UNCERTAINTY", "describe_release", "with_publication", "card_section"]

DATACARD = "DATACARD.md"


def with_publication(manifest: dict, settings: OpenDataSettings) -> dict:
    """The manifest with the terms it is published under: ``licence`` (its title, as manifests always said) and
    ``publication`` (licence, publisher and extra keywords, from the home's open-data settings)."""
    return {**manifest, "licence": settings.licence["title"], "publication": settings.manifest_view()}


def _entry(path: Path) -> dict:
    from transit_release.files.publish import sha256_file

    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def describe_release(staging: Path, manifest: dict) -> dict[str, dict]:
    """Write ``uncertainty.csv`` (when the release has counts with a stated noise), ``datapackage.json`` and
    ``index.html`` into ``staging``, where ``manifest["files"]`` are already written; their file entries (for
    the manifest). Companion files carry no ``rows``: they are not released rows."""
    added: dict[str, dict] = {}
    files = dict(manifest["files"])
    table = uncertainty_table(manifest)
    if table is not None:
        table.to_csv(staging / UNCERTAINTY, index=False, lineterminator="\n")
        added[UNCERTAINTY] = files[UNCERTAINTY] = _entry(staging / UNCERTAINTY)
    described = {**manifest, "files": dict(sorted(files.items()))}
    package = build_datapackage(described, staging)
    (staging / DATAPACKAGE).write_text(json.dumps(package, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    added[DATAPACKAGE] = files[DATAPACKAGE] = _entry(staging / DATAPACKAGE)
    card = (staging / DATACARD).read_text(encoding="utf-8") if (staging / DATACARD).is_file() else ""
    page = render_landing({**manifest, "files": dict(sorted(files.items()))}, card, package)
    (staging / LANDING).write_text(page, encoding="utf-8")
    added[LANDING] = _entry(staging / LANDING)
    return added
