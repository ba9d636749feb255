"""The internal report of a release."""

from __future__ import annotations

import os

import pandas as pd

from tasks import data_task
from transit_release import opal, report
from transit_release.home import Home


@data_task(name="write-report")
def write_report(home: Home, manifest: dict, utility: pd.DataFrame, partitions: list, sanitized: list,
                 quarantine: dict) -> str:
    out = home.reports / manifest["release_id"]
    release_dir = home.releases / manifest["release_id"]
    links = {"Public data card (DATACARD.md)": os.path.relpath(release_dir / "DATACARD.md", out),
             "Manifest (manifest.json)": os.path.relpath(release_dir / "manifest.json", out),
             "Data Docs: raw-data quality (Great Expectations)": "data_docs/raw/index.html",
             "Data Docs: release checks (Great Expectations)": "data_docs/release/index.html"}
    path = report.write_report(out, manifest, utility, opal.released_vs_true(partitions, sanitized), links,
                               quarantine)
    return str(path)
