"""The internal report of a release."""

from __future__ import annotations

import json
import os

import pandas as pd

from tasks import data_task
from transit_release import opal, release_index, report
from transit_release.home import Home


@data_task(name="write-report")
def write_report(home: Home, manifest: dict, utility: pd.DataFrame, outcomes: list[opal.PartitionOutcome],
                 quarantine: dict) -> str:
    out = home.reports / manifest["release_id"]
    release_dir = home.releases / manifest["release_id"]
    links = {"Public data card (DATACARD.md)": os.path.relpath(release_dir / "DATACARD.md", out),
             "Manifest (manifest.json)": os.path.relpath(release_dir / "manifest.json", out),
             "Data Docs: raw-data quality (Great Expectations)": "data_docs/raw/index.html",
             "Data Docs: release checks (Great Expectations)": "data_docs/release/index.html"}
    path = report.write_report(out, manifest, utility, opal.released_vs_true(outcomes), links,
                               quarantine)
    _write_summary(out, {"trip_coverage": float(utility["trip_coverage"].mean())})
    return str(path)


def _write_summary(out, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / release_index.SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True), encoding="utf-8")


@data_task(name="write-release-summary")
def write_summary(home: Home, release_id: str, summary: dict) -> None:
    """The few utility figures the release index shows (internal, next to the reports)."""
    _write_summary(home.reports / release_id, summary)


@data_task(name="update-release-index")
def update_index(home: Home) -> str:
    """Regenerate ``release_reports/index.html`` from the published manifests and the latest audit."""
    return str(release_index.write_index(home.releases, home.reports))
