"""MLflow tasks: each one call of :mod:`transit_release.reports.tracking`, which holds MLflow's store code (one run per
release, the ledger's anchors, audits) and its docs."""

from __future__ import annotations

from tasks import data_task
from transit_release.files.home import Home
from transit_release.reports import tracking


@data_task(name="check-mlflow-store")
def check_store(home: Home) -> None:
    tracking.check_store(home)


@data_task(name="anchor-ledger-head")
def anchor_ledger(home: Home, release_id: str, event: str) -> dict:
    return tracking.anchor_ledger(home, release_id, event)


@data_task(name="track-in-mlflow")
def track_release(home: Home, manifest: dict, charged: list, record: dict, report_dir: str | None) -> str:
    return tracking.track_release(home, manifest, charged, record, report_dir)


@data_task(name="mark-published")
def mark_published(home: Home, run_id: str) -> None:
    tracking.mark_published(home, run_id)


@data_task(name="read-mlflow-mirror")
def read_mirror(home: Home) -> list:
    return tracking.read_mirror(home)


@data_task(name="read-ledger-anchors")
def read_anchors(home: Home) -> list[dict]:
    return tracking.read_anchors(home)


@data_task(name="read-mirrored-spends")
def read_mirrored_spends(home: Home, mirror: list, entries: list) -> dict[str, list[dict]]:
    return tracking.read_mirrored_spends(home, mirror, entries)


@data_task(name="tag-published-runs")
def tag_published_runs(home: Home, published: list[str]) -> list[str]:
    return tracking.tag_published_runs(home, published)


@data_task(name="track-audit-in-mlflow")
def track_audit(home: Home, result: dict, report_path: str) -> str:
    return tracking.track_audit(home, result, report_path)
