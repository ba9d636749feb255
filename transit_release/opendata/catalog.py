"""``releases/catalog.jsonld``: a DCAT catalogue of every release, for open-data portals to harvest.

One URL finds every release: a ``dcat:Catalog`` (JSON-LD, conforming to DCAT-AP 2.1.1: the shapes of
``tests/shapes/``) with one ``dcat:Dataset`` per release directory holding a manifest, and one
``dcat:Distribution`` per file of it: ``dcat:downloadURL`` and ``dcat:accessURL`` (the release's landing page),
``dct:description``, ``dcat:mediaType`` (IANA, a ``dct:MediaType``), ``dct:format`` (the EU file-type authority
where it has the format, else the IANA type), ``dcat:byteSize`` (``xsd:decimal``), an ``spdx:checksum``
(SHA-256, an ``spdx:ChecksumAlgorithm``) and ``dcatap:availability``. Each dataset has its ``dct:identifier``,
title, description, ``dct:issued``, ``dct:temporal`` (a ``dct:PeriodOfTime`` with
``dcat:startDate``/``dcat:endDate``), ``dct:license``, ``dct:publisher`` (a ``foaf:Agent``), ``dcat:keyword``,
``dcat:landingPage`` (a ``foaf:Document``), ``dcat:theme`` (the EU data theme "Transport"),
``dcat:contactPoint`` (the publisher of the open-data settings, as a vCard organisation) and, when the settings
give the area, ``dct:spatial``.

Download URLs are relative to the catalogue (``<id>/<file>``: a JSON-LD reader
resolves them against the URL it fetched the catalogue from) unless the home's
open-data settings give a ``base_url`` (:mod:`transit_release.opendata.settings`).

Built from the published manifests alone (public), sorted by release id, and
regenerated after each public publication (and by ``transit-release repair``
when it completes one; releases made with the test-only seed, kept under
``private/``, are never catalogued): written aside and renamed over the old one, under a lock in
``private/`` so two publications never lose each other's entry.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
from contextlib import contextmanager
from pathlib import Path

from transit_release.opendata import settings as open_data_settings
from transit_release.opendata.datapackage import MEDIA_TYPES, keywords
from transit_release.opendata.titles import release_title

#: The catalogue's file name, directly under ``releases/`` (releases made with the test-only seed are never catalogued).
CATALOG = "catalog.jsonld"
MANIFEST = "manifest.json"
LANDING = "index.html"
CONTEXT = {
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "spdx": "http://spdx.org/rdf/terms#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "dcatap": "http://data.europa.eu/r5r/",
}
IANA = "https://www.iana.org/assignments/media-types/"
EU_FILE_TYPE = "http://publications.europa.eu/resource/authority/file-type/"
_EU_TYPES = {"csv": "CSV", "parquet": "PARQUET", "txt": "TXT", "json": "JSON", "html": "HTML"}
_LOCK = ".catalog.lock"


def _iri(base_url: str, *parts: str) -> str:
    return base_url + "/".join(parts)


def _typed(value, datatype: str) -> dict:
    return {"@value": str(value), "@type": f"xsd:{datatype}"}


def _sha256(path: Path) -> str:
    from transit_release.files.publish import sha256_file

    return sha256_file(path)


#: The EU's data theme of every release (the Publications Office's authority table, used by DCAT-AP's dcat:theme):
#: public-transport data is "Transport", whatever the kind of release.
DATA_THEME_SCHEME = "http://publications.europa.eu/resource/authority/data-theme"
TRANSPORT_THEME = {"@id": f"{DATA_THEME_SCHEME}/TRAN", "@type": "skos:Concept", "skos:prefLabel": "Transport",
                   "skos:inScheme": {"@id": DATA_THEME_SCHEME}}
THEME_SCHEME = {"@id": DATA_THEME_SCHEME, "@type": "skos:ConceptScheme", "dct:title": "Data theme"}
#: Every release stays where it was published (DCAT-AP's planned availability, its authority table).
STABLE = {"@id": "http://data.europa.eu/r5r/availability/stable", "@type": "skos:Concept",
          "skos:prefLabel": "stable"}
ENGLISH = {"@id": "http://publications.europa.eu/resource/authority/language/ENG", "@type": "dct:LinguisticSystem"}
SHA256 = {"@id": "spdx:checksumAlgorithm_sha256", "@type": "spdx:ChecksumAlgorithm"}

#: What each kind of file is, in one sentence (a distribution's dct:description), by its name's stem.
_FILE_WORDS = {
    "time": "Noisy tap counts per {bin}-minute window, per mode, day and tap (on or off)",
    "location": "Noisy tap counts per location (postcode for buses, stop, station or wharf otherwise), per mode, "
                "day and tap",
    "time-loc": "Noisy tap counts per location and {bin}-minute window, per mode, day and tap",
    "sequences": "The released passenger sequences (stations in travel order) with their noisy counts",
    "ngrams": "The noisy counts of runs of consecutive stations (n-grams)",
    "trajectories": "The released passenger trajectories (station and hour of the week) with their noisy counts",
    "sets": "The released sets of stations passengers used, with their noisy counts",
    "uncertainty": "The 95% margin of error of every published count, per file and rows",
    "datapackage": "The release as a Frictionless Data Package: its files, their schemas and licence",
    "DATACARD": "The data card: what the files are, what the privacy guarantee means, margins of error",
    "manifest": "The manifest: every file's SHA-256, the parameters and the privacy statement",
    "index": "The release's landing page",
}
_FORMAT_WORDS = {"csv": "CSV", "parquet": "Parquet", "txt": "text, one record per line", "json": "JSON",
                 "md": "Markdown", "html": "HTML"}


def file_description(name: str, manifest: dict) -> str:
    """One sentence on a published file, from its name and the manifest's public parameters."""
    stem, _, ext = name.rpartition(".")
    words = _FILE_WORDS.get(stem, "A file of the release")
    bin_minutes = (manifest.get("parameters") or {}).get("bin_minutes", 15)
    return f"{words.format(bin=bin_minutes)} ({_FORMAT_WORDS.get(ext, ext)})."


def _distribution(base_url: str, rid: str, name: str, meta: dict, licence: dict, manifest: dict) -> dict:
    ext = name.rpartition(".")[2]
    dist = {"@id": _iri(base_url, rid, name), "@type": "dcat:Distribution", "dct:title": name,
            "dct:description": file_description(name, manifest),
            "dcat:downloadURL": {"@id": _iri(base_url, rid, name)},
            "dcat:accessURL": {"@id": _iri(base_url, rid, LANDING)},
            "dcat:mediaType": {"@id": IANA + MEDIA_TYPES.get(ext, "application/octet-stream"),
                               "@type": "dct:MediaType"},
            "dcat:byteSize": _typed(int(meta["bytes"]), "decimal"),
            "spdx:checksum": {"@type": "spdx:Checksum", "spdx:algorithm": SHA256,
                              "spdx:checksumValue": _typed(meta["sha256"], "hexBinary")},
            "dct:license": {"@id": licence["path"]},
            "dcatap:availability": STABLE}
    # the EU file-type authority where it has the format, else the IANA media type (a dct:MediaType is a
    # dct:MediaTypeOrExtent)
    dist["dct:format"] = ({"@id": EU_FILE_TYPE + _EU_TYPES[ext], "@type": "dct:MediaTypeOrExtent"}
                          if ext in _EU_TYPES else {"@id": dist["dcat:mediaType"]["@id"]})
    return dist


def _licence(manifest: dict, fallback: dict) -> dict:
    return (manifest.get("publication") or {}).get("licence") or fallback


def _publisher_node(publisher: dict) -> dict:
    node = {"@id": publisher.get("url") or "_:publisher", "@type": "foaf:Agent", "foaf:name": publisher["name"]}
    if publisher.get("email"):
        node["foaf:mbox"] = {"@id": f"mailto:{publisher['email']}"}
    return node


def _contact_point(publisher: dict) -> dict:
    """The datasets' dcat:contactPoint: the publisher of the home's open-data settings as a vCard organisation
    (its name, and its e-mail address and web page when the settings give them)."""
    node = {"@id": "_:contact", "@type": "vcard:Organization", "vcard:fn": publisher["name"]}
    if publisher.get("email"):
        node["vcard:hasEmail"] = {"@id": f"mailto:{publisher['email']}"}
    if publisher.get("url"):
        node["vcard:hasURL"] = {"@id": publisher["url"]}
    return node


def _spatial(settings) -> dict | None:
    """The area the releases cover (``spatial`` of the open-data settings), as a dct:Location; None when unset."""
    spatial = getattr(settings, "spatial", None)
    if not spatial:
        return None
    node = {"@id": spatial["uri"], "@type": "dct:Location"}
    if spatial.get("name"):
        node["skos:prefLabel"] = spatial["name"]
    return node


def _dataset(base_url: str, directory: Path, manifest: dict, settings) -> tuple[dict, dict]:
    """(dataset node, its publisher)."""
    rid = manifest["release_id"]
    licence = _licence(manifest, settings.licence)
    publisher = (manifest.get("publication") or {}).get("publisher") or settings.publisher
    p = manifest.get("privacy") or {}
    privacy = (f" Released under ({p['epsilon']:g}, {p['delta']:.3g})-differential privacy for one "
               f"{p.get('unit_of_privacy', 'record')}." if "epsilon" in p else "")
    files = dict(manifest.get("files", {}))
    manifest_path = directory / MANIFEST
    files[MANIFEST] = {"bytes": manifest_path.stat().st_size, "sha256": _sha256(manifest_path)}
    node = {
        "@id": _iri(base_url, rid, ""),
        "@type": "dcat:Dataset",
        "dct:identifier": rid,
        "dct:title": release_title(manifest),
        "dct:description": f"{manifest.get('product', 'A release')}.{privacy} See the data card on the landing page.",
        "dct:license": {"@id": licence["path"], "@type": "dct:LicenseDocument", "dct:title": licence["title"]},
        "dct:publisher": {"@id": _publisher_node(publisher)["@id"]},
        "dcat:keyword": keywords({**manifest, "publication": {"keywords": list(settings.keywords)}}),
        "dcat:distribution": [_distribution(base_url, rid, name, meta, licence, manifest)
                              for name, meta in sorted(files.items())],
        "dcat:theme": {"@id": TRANSPORT_THEME["@id"]},
        "dcat:contactPoint": {"@id": "_:contact"},
    }
    spatial = _spatial(settings)
    if spatial:
        node["dct:spatial"] = {"@id": spatial["@id"]}
    if (directory / LANDING).is_file():
        node["dcat:landingPage"] = {"@id": _iri(base_url, rid, LANDING), "@type": "foaf:Document"}
    if manifest.get("created_at"):
        node["dct:issued"] = _typed(manifest["created_at"], "dateTime")
    if manifest.get("period"):
        node["dct:temporal"] = {"@type": "dct:PeriodOfTime",
                                "dcat:startDate": _typed(manifest["period"]["start"], "date"),
                                "dcat:endDate": _typed(manifest["period"]["end"], "date")}
    return node, publisher



def build_catalog(root: Path, settings) -> dict:
    """The catalogue of every release directory under ``root`` (one holding a readable manifest)."""
    base_url = settings.base_url
    datasets, publishers = [], {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")) \
            if root.is_dir() else []:
        try:
            manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(manifest, dict) or manifest.get("release_id") != d.name:
            continue
        node, publisher = _dataset(base_url, d, manifest, settings)
        datasets.append(node)
        pub = _publisher_node(publisher)
        publishers[pub["@id"]] = pub
    main = _publisher_node(settings.publisher)
    publishers.setdefault(main["@id"], main)
    issued = sorted(str(d["dct:issued"]["@value"]) for d in datasets if "dct:issued" in d)
    spatial = _spatial(settings)
    catalog = {"@id": _iri(base_url, CATALOG), "@type": "dcat:Catalog",
               "dct:title": f"Differentially private public-transport open data of {settings.publisher['name']}",
               "dct:description": ("Every release published by transit-release: public-transport smart-card data "
                                   "released under differential privacy, each with a data card, a Frictionless Data "
                                   "Package and the margins of error of its counts."),
               "dct:publisher": {"@id": main["@id"]},
               "dct:license": {"@id": settings.licence["path"], "@type": "dct:LicenseDocument",
                               "dct:title": settings.licence["title"]},
               "dct:language": {"@id": ENGLISH["@id"]},
               "dcat:themeTaxonomy": {"@id": THEME_SCHEME["@id"]},
               "dcat:dataset": [{"@id": ds["@id"]} for ds in datasets]}
    if issued:  # the first and the latest publication
        catalog["dct:issued"] = _typed(issued[0], "dateTime")
        catalog["dct:modified"] = _typed(issued[-1], "dateTime")
    if spatial:
        catalog["dct:spatial"] = {"@id": spatial["@id"]}
    shared = [THEME_SCHEME, TRANSPORT_THEME, STABLE, ENGLISH, SHA256, _contact_point(settings.publisher),
              *([spatial] if spatial else [])]
    return {"@context": CONTEXT, "@graph": [catalog, *datasets, *(publishers[k] for k in sorted(publishers)),
                                            *shared]}


@contextmanager
def _locked(lock_dir: Path):
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / _LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


#: A rewrite of the catalogue in progress (written aside, then renamed over it): ``.catalog.jsonld.<8 hex>.part``.
PART_PATTERN = re.compile(r"\.catalog\.jsonld\.[0-9a-f]{8}\.part")


def _write(root: Path, catalog: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = root / CATALOG
    tmp = root / f".{CATALOG}.{secrets.token_hex(4)}.part"
    try:
        tmp.write_text(json.dumps(catalog, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def write_catalog(home_root: Path, root: Path, lock_dir: Path | None = None) -> Path:
    """Regenerate ``<root>/catalog.jsonld`` from the releases under ``root`` with the home's open-data settings
    (world-readable, like the releases); ``lock_dir`` (default ``<home>/private``) holds the lock."""
    settings = open_data_settings.load(home_root)
    with _locked(lock_dir or Path(home_root) / "private"):
        for p in dead_rewrites(root):  # under the lock, every other rewrite is a dead run's
            p.unlink(missing_ok=True)
        return _write(root, build_catalog(root, settings))


def dead_rewrites(root: Path) -> list[Path]:
    """Rewrites of the catalogue under ``root`` (:data:`PART_PATTERN`); dead unless a writer holds the lock."""
    return sorted(p for p in root.glob(f".{CATALOG}.*.part") if PART_PATTERN.fullmatch(p.name)) \
        if root.is_dir() else []


def repair_catalog(home_root: Path, root: Path, lock_dir: Path | None = None) -> tuple[list[str], bool]:
    """Under the catalogue's lock (no writer is between its write and its rename): remove the rewrites a killed run
    left (:func:`dead_rewrites`) and rewrite ``<root>/catalog.jsonld`` if it does not hold what the releases under
    ``root`` give (missing, stale: a run killed before its catalogue was written). Returns the removed names and
    whether the catalogue was rewritten."""
    settings = open_data_settings.load(home_root)
    with _locked(lock_dir or Path(home_root) / "private"):
        removed = []
        for p in dead_rewrites(root):
            p.unlink(missing_ok=True)
            removed.append(p.name)
        catalog = build_catalog(root, settings)
        target = root / CATALOG
        try:
            current = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else None
        except (OSError, ValueError):
            current = None
        if current == catalog or (current is None and not catalog.get("@graph", [None])[0].get("dcat:dataset")):
            return removed, False
        _write(root, catalog)
        return removed, True
