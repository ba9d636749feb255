"""``datapackage.json``: a release as a Frictionless Data Package (v2).

One resource per published file: every table in both formats (CSV and Parquet,
one Table Schema each: types, constraints, the unknown sentinel ``-1`` as a
missing value of the time and location columns, primary keys), the text files
and the data card as plain files. ``bytes`` and ``hash`` (``sha256:…``) are the
manifest's own, so a validator checks the same hashes the audit does (a Parquet
resource states its hash only: frictionless-py reads Parquet through pyarrow,
counts no bytes and so checks neither). Package
properties: ``licenses``, ``contributors`` (the publisher), ``sources``,
``keywords``, ``created``; and these custom properties (any Data Package reader
ignores what it does not know):

* ``temporalCoverage``: ``{"start": …, "end": …}``, the declared period (ISO dates);
* ``differentialPrivacy``: the release's privacy statement — mechanism, unit of
  privacy, neighbouring relation, ε and δ, population, and where one passenger
  of that population stood at publication (ε and δ by basic composition) —
  copied from the manifest;
* ``uncertainty``: the name of the resource with the margins of error
  (``uncertainty.csv``), when the release has one.

Everything comes from the manifest and the files' headers: public parameters and
the noisy output only.
"""

from __future__ import annotations

import csv
from pathlib import Path

from transit_release.opendata.titles import release_title
from transit_release.opendata.uncertainty import COLUMNS as UNCERTAINTY_COLUMNS, UNCERTAINTY

DATAPACKAGE = "datapackage.json"
PROFILE = "https://datapackage.org/profiles/2.0/datapackage.json"
#: The sentinel the Opal tables write for an unknown time window or location (a missing tap-off, an unmapped stop).
UNKNOWN = "-1"
MEDIA_TYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet", "txt": "text/plain",
               "md": "text/markdown", "json": "application/json", "html": "text/html", "jsonld": "application/ld+json"}
_RECORD_COLUMNS = {"sequence": "a released sequence: station ids in travel order, separated by spaces",
                   "trajectory": "a released trajectory: station@hour tokens (hour of the week, 0–167 from Monday "
                                 "00:00 local time) in time order, separated by spaces",
                   "set": "a released set of stations: station ids in the universe's order, separated by spaces",
                   "gram": "a run of consecutive stations separated by spaces, possibly ending with the end marker"}


def _opal_field(name: str, manifest: dict, minimum: int | None) -> dict:
    modes = list(manifest.get("modes") or [])
    bin_minutes = manifest.get("parameters", {}).get("bin_minutes", 15)
    fields = {
        "mode": {"type": "string", "description": "mode of transport",
                 "constraints": {"required": True, **({"enum": modes} if modes else {})}},
        "date": {"type": "date", "format": "%Y%m%d", "description": "day of the tap (YYYYMMDD, local time)",
                 "constraints": {"required": True}},
        "tap": {"type": "string", "description": "on: tap-on; off: tap-off",
                "constraints": {"required": True, "enum": ["on", "off"]}},
        "time": {"type": "string", "description": (f"start of the {bin_minutes}-minute window (HH:MM, local time); "
                                                    f"{UNKNOWN} = unknown"),
                 "missingValues": [UNKNOWN], "constraints": {"pattern": "([01][0-9]|2[0-3]):[0-5][0-9]"}},
        "loc": {"type": "string", "description": (f"location: a postcode for buses, a stop, station or wharf name "
                                                  f"otherwise; {UNKNOWN} = unknown (e.g. a missing tap-off)"),
                "missingValues": [UNKNOWN]},
        "count": {"type": "integer",
                  "description": "noisy number of taps (see uncertainty.csv for its margin of error)",
                  "constraints": {"required": True, **({"minimum": minimum} if minimum is not None else {})}},
    }
    return {"name": name, **fields.get(name, {"type": "string"})}


def _uncertainty_schema() -> dict:
    types = {"epsilon": "number", "threshold": "integer", "half_width_95": "integer", "coverage": "number",
             "sd": "number", "noise_bound": "integer"}
    descriptions = {
        "file": "the published file whose counts this row describes",
        "rows": "which of its rows",
        "count_of": "which counts of the mechanism got this noise",
        "epsilon": "privacy budget of each such count",
        "noise_scale": "scale of the discrete Laplace noise (an exact fraction)",
        "noise_bound": "the noise never exceeds this in absolute value (empty: unbounded)",
        "threshold": "noisy counts below this were not published (for DiffPart's sets: the threshold at the smallest "
                     "leaf budget, the largest of the leaf thresholds; leaves counted with more budget have lower "
                     "ones; for the set histogram: sets whose noisy count reached it kept it, rarer ones were "
                     "estimated from noisy sums)",
        "half_width_95": "the noise lies within ± this with probability at least 95%",
        "coverage": "that probability, exactly",
        "sd": "standard deviation of the noise",
        "interval": "what the half-width is an interval of",
    }
    return {"fields": [{"name": c, "type": types.get(c, "string"), "description": descriptions[c]}
                       for c in UNCERTAINTY_COLUMNS], "primaryKey": ["file", "rows", "count_of"]}


def _header(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        return next(csv.reader(fh), [])


def table_schema(manifest: dict, stem: str, columns: list[str]) -> dict:
    """The Table Schema of a published table ``stem`` (``time``, ``sequences``, …) with these columns."""
    if stem + ".csv" == UNCERTAINTY:
        return _uncertainty_schema()
    p = manifest.get("privacy") or {}
    if "marginals" in p:  # Opal
        thresholds = [m["threshold"] for m in p["marginals"].values() if m.get("file") == stem]
        fields = [_opal_field(c, manifest, min(thresholds) if thresholds else None) for c in columns]
        return {"fields": fields, "primaryKey": [c for c in columns if c != "count"]}
    fields = []
    for c in columns:
        if c in _RECORD_COLUMNS:
            fields.append({"name": c, "type": "string", "description": _RECORD_COLUMNS[c],
                           "constraints": {"required": True, "unique": True}})
        elif c == "count":
            ngram = stem == "ngrams"
            fields.append({"name": c, "type": "number" if ngram else "integer",
                           "description": ("noisy count made consistent, rounded to "
                                           f"{p.get('count_decimals', 2)} decimals" if ngram
                                           else "number of lines the record has in the text file (a noisy count)"),
                           "constraints": {"required": True, "minimum": 0 if ngram else 1}})
        else:
            fields.append({"name": c, "type": "string"})
    keys = [c for c in columns if c in _RECORD_COLUMNS]
    return {"fields": fields, **({"primaryKey": keys} if keys else {})}


def _resource(manifest: dict, staging: Path, name: str, meta: dict, schemas: dict[str, dict]) -> dict:
    stem, _, ext = name.rpartition(".")
    res = {"name": name.lower(), "path": name, "format": ext,
           "mediatype": MEDIA_TYPES.get(ext, "application/octet-stream"), "bytes": int(meta["bytes"]),
           "hash": f"sha256:{meta['sha256']}"}
    if ext == "parquet":  # frictionless-py reads Parquet through pyarrow and counts no bytes: its byte check would
        del res["bytes"]  # fail every Parquet file (it skips the hash check alone); the manifest has the size
    if ext in ("csv", "txt", "md", "json", "html"):
        res["encoding"] = "utf-8"
    if ext in ("csv", "parquet") and (stem + ".csv") in manifest["files"]:
        if stem not in schemas:
            schemas[stem] = table_schema(manifest, stem, _header(staging / f"{stem}.csv"))
        res.update({"type": "table", "schema": schemas[stem]})
    elif ext == "md":
        res["description"] = "the data card: what the files are, how they were made, the privacy guarantee"
    elif ext == "txt":
        res["description"] = "one record per line (lines starting with # are comments)"
    return res


def _sources(manifest: dict) -> list[dict]:
    period = manifest.get("period") or {}
    when = f", {period['start']} to {period['end']}" if period else ""
    if manifest.get("kind") == "opal" or "modes" in manifest:
        return [{"title": f"Smart-card tap-on/tap-off records of the publishing agency{when} (not published)"}]
    sources = [{"title": f"Passenger records of the publishing agency{when} (not published): "
                         f"{manifest.get('records', 'one record per passenger')}"}]
    u = manifest.get("universe")
    if u:
        sources.append({"title": f"Public list of {u['locations']} locations ({u['source']}; SHA-256 {u['sha256']})"})
    return sources


def differential_privacy(manifest: dict) -> dict:
    """The package's ``differentialPrivacy`` property: the manifest's privacy statement in a few keys."""
    p = manifest.get("privacy") or {}
    out = {k: p[k] for k in ("mechanism", "unit_of_privacy", "neighbouring_relation", "epsilon", "delta",
                             "population", "composition") if k in p}
    person = p.get("person_at_publication")
    if person:
        out["person_at_publication"] = {"bounded": person["bounded"], "releases": person["releases"],
                                        "epsilon": person["basic"]["epsilon"] if person["bounded"] else None,
                                        "delta": person["basic"]["delta"] if person["bounded"] else None,
                                        "ledger_entries": person.get("ledger_entries")}
    out["noise_source"] = manifest.get("noise_source")
    out["details"] = "manifest.json (privacy) and DATACARD.md"
    return out


def keywords(manifest: dict) -> list[str]:
    kind = manifest.get("kind") or ("opal" if "modes" in manifest else "sequences")
    specific = {"opal": ["tap counts", "smart card", "ridership"],
                "sequences": ["passenger journeys", "origin-destination"],
                "trajectories": ["passenger trajectories"], "sets": ["stations used"]}.get(kind, [])
    extra = (manifest.get("publication") or {}).get("keywords", [])
    return list(dict.fromkeys(["public transport", *specific, "differential privacy", *extra]))


def build_datapackage(manifest: dict, staging: Path) -> dict:
    """The descriptor of the release whose files (with their manifest entries) are ``manifest["files"]``."""
    publication = manifest.get("publication") or {}
    licence = publication.get("licence") or {"name": "CC-BY-4.0", "title": manifest.get("licence", "CC BY 4.0"),
                                             "path": "https://creativecommons.org/licenses/by/4.0/"}
    publisher = publication.get("publisher")
    schemas: dict[str, dict] = {}
    resources = [_resource(manifest, staging, name, meta, schemas) for name, meta in manifest["files"].items()]
    package = {
        "$schema": PROFILE,
        "name": manifest["release_id"].lower(),
        "id": manifest["release_id"],
        "title": release_title(manifest),
        "description": (f"{manifest.get('product', 'A release')}, released under differential privacy "
                        "by transit-release. See DATACARD.md (also rendered in index.html)."),
        "licenses": [licence],
        "keywords": keywords(manifest),
        "sources": _sources(manifest),
        "resources": resources,
        "differentialPrivacy": differential_privacy(manifest),
    }
    if manifest.get("created_at"):
        package["created"] = manifest["created_at"]
    if publisher:
        package["contributors"] = [{"title": publisher["name"], "roles": ["publisher"],
                                    **({"path": publisher["url"]} if publisher.get("url") else {}),
                                    **({"email": publisher["email"]} if publisher.get("email") else {})}]
    if manifest.get("period"):
        package["temporalCoverage"] = dict(manifest["period"])
    if UNCERTAINTY in manifest["files"]:
        package["uncertainty"] = UNCERTAINTY
    return package
