"""Checks every release's open-data files must pass (used by the flow tests of each kind and test_opendata.py).

* ``datapackage.json`` passes ``frictionless validate`` and its resources are exactly the manifest's files (the
  landing page, written after it, aside) with the manifest's hashes and sizes;
* ``index.html`` holds nothing internal;
* the neighbour views: what may differ between the open-data files of D and D′ (hashes, sizes, rows, times).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

#: Words that only internal documents use (reports, MLflow, the quarantine); a landing page never says them.
INTERNAL_WORDS = ("quarantin", "mlflow", "run_id", "utility", "mean_rel_error", "trip_coverage", "true count of",
                  "private/", "release_reports", "ledger.sqlite")


def validate_datapackage(release_dir: Path):
    """frictionless' report of the release's Data Package (validated as ``frictionless validate`` does)."""
    from frictionless import Package, system

    with system.use_context(trusted=True):
        package = Package(str(Path(release_dir) / "datapackage.json"))
        return package.validate()


def check_open_data(release_dir: Path, home: Path | None = None) -> dict:
    """Assert the release's open-data files are valid and consistent; return its Data Package descriptor."""
    release_dir = Path(release_dir)
    manifest = json.loads((release_dir / "manifest.json").read_text(encoding="utf-8"))
    report = validate_datapackage(release_dir)
    assert report.valid, report.to_summary()
    package = json.loads((release_dir / "datapackage.json").read_text(encoding="utf-8"))
    listed = {r["path"]: r for r in package["resources"]}
    assert set(listed) == set(manifest["files"]) - {"index.html", "datapackage.json"}
    for name, res in listed.items():
        assert res["hash"] == f"sha256:{manifest['files'][name]['sha256']}", name
        assert res.get("bytes", manifest["files"][name]["bytes"]) == manifest["files"][name]["bytes"], name
    assert {"datapackage.json", "index.html", "DATACARD.md"} <= set(manifest["files"])
    page = (release_dir / "index.html").read_text(encoding="utf-8")
    lowered = page.lower()
    for word in INTERNAL_WORDS:
        assert word not in lowered, f"the landing page says {word!r}"
    if home is not None:
        assert str(Path(home).resolve()) not in page and str(home) not in page, "the landing page names the home"
    return package


_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
_RUN_ELEMENTS = re.compile(r'(<td class="(?:rows|bytes)">|<code class="sha256">|<time class="created">)[^<]*')


def page_view(page: str) -> str:
    """A landing page without what identifies the run or follows from the noise: file sizes, rows, hashes (and the
    ledger head's hash in the data card), the creation time."""
    return _HEX64.sub("<hash>", _RUN_ELEMENTS.sub(r"\1…", page))


def datapackage_view(package: dict) -> dict:
    """A Data Package descriptor without hashes, sizes and the creation time."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("hash", "bytes", "created")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return _HEX64.sub("<hash>", x) if isinstance(x, str) else x
    return strip(package)


def catalog_view(catalog: dict) -> dict:
    """A catalogue without checksums, sizes and issue and modification times."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if k not in ("spdx:checksum", "dcat:byteSize", "dct:issued", "dct:modified")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(catalog)
