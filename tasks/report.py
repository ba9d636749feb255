"""Internal reports of releases, and the release index."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd

from tasks import data_task
from transit_release import opendata
from transit_release.files.home import Home
from transit_release.releases import opal
from transit_release.reports import release_index, report_process


def _links(home: Home, manifest: dict, out: Path) -> dict[str, str]:
    """The release's public pages, from its report: the data card rendered on the landing page, and the
    manifest."""
    release_dir = home.release_root(manifest["noise_source"]) / manifest["release_id"]
    return {"Public data card (on the release's landing page)":
            os.path.relpath(release_dir / opendata.LANDING, out) + "#data-card",
            "Manifest (manifest.json)": os.path.relpath(release_dir / "manifest.json", out)}


def _keep_validation(work: str | None, out: Path) -> dict[str, str]:
    """Copy the run's validation results and Data Docs into the report folder; links to them."""
    src = Path(work) / "validation" if work else None
    if not src or not src.is_dir():
        return {}
    shutil.copytree(src, out, dirs_exist_ok=True)
    return {f"Data Docs: {label} (Great Expectations)": f"data_docs/{sub}/index.html"
            for label, sub in (("raw-data quality", "raw"), ("release checks", "release"))
            if (out / "data_docs" / sub / "index.html").exists()}


def _write_summary(out: Path, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / release_index.SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True), encoding="utf-8")


@data_task(name="draw-report-figures")
def draw_report_figures(home: Home, manifest: dict, utility: pd.DataFrame,
                        outcomes: list[opal.PartitionOutcome]) -> str:
    """The Opal release's report figures (true next to released counts), drawn in a process of their own
    (:mod:`transit_release.reports.report_process`) while the flow goes on; the report's folder."""
    out = home.reports / manifest["release_id"]
    out.mkdir(parents=True, exist_ok=True)
    report_process.draw(out, manifest["privacy"], utility, opal.released_vs_true(outcomes))
    return str(out)


@data_task(name="write-report")
def write_report(home: Home, work: str, manifest: dict, utility: pd.DataFrame, quarantine: dict,
                 figures: str) -> str:
    """The Opal release's internal report around its figures (drawn in ``figures``, the report's folder), and
    its index summary."""
    out = Path(figures)
    links = {**_links(home, manifest, out), **_keep_validation(work, out)}
    from transit_release.reports import report

    report.write_report(out, manifest, utility, links=links, quarantine=quarantine, figures_drawn=True)
    _write_summary(out, {"trip_coverage": float(utility["trip_coverage"].mean())})
    return str(out)


@data_task(name="write-sequence-report")
def write_sequence_report(home: Home, manifest: dict, metrics: dict, quarantine: dict,
                          figures: dict | None = None) -> str:
    """The internal report of a passenger-level release (utility against the raw records, ``figures`` the arrays it
    plots) and its index summary."""
    out = home.reports / manifest["release_id"]
    out.mkdir(parents=True, exist_ok=True)
    from transit_release.reports import report  # matplotlib: imported when a report is drawn
    report.write_sequence_report(out, manifest, metrics, quarantine, _links(home, manifest, out), figures)
    _write_summary(out, metrics)
    return str(out)


@data_task(name="update-release-index")
def update_index(home: Home, policy=None, after_publication: bool = False) -> str | None:
    """Regenerate ``release_reports/index.html`` from the published manifests, the latest audit and the budget
    ``policy`` (default: the built-in one) whose caps it draws; its path. ``after_publication``: the release is
    published already, so an index that cannot be rewritten (a full disk) is a warning, returned (None when it was
    written), never a failure of the run."""
    try:
        written = str(release_index.write_index(home.releases, home.reports, policy))
        return None if after_publication else written
    except OSError as exc:
        if not after_publication:
            raise
        return (f"release_reports/{release_index.INDEX} could not be rewritten ({exc.strerror or type(exc).__name__}):"
                " the next release or `transit-release audit` rewrites it")
