"""The publishing tail every release flow shares, after its files are staged and its report written:
track in MLflow → commit (intent, rename, ledger) → anchor the ledger head → mark the run published → index →
DCAT catalogue."""

from __future__ import annotations

from tasks.publish import commit_release, update_catalog
from tasks.report import update_index
from tasks.track import anchor_ledger, mark_published, track_release
from transit_release.faults import crash_point
from transit_release.home import Home
from transit_release.publish import StagedRelease


def publish_staged(where: Home, staged: StagedRelease, charged: list, record: dict, report_dir: str) -> str:
    """Make a staged release public and recorded; returns the MLflow run id."""
    run_id = track_release(where, staged.manifest, charged, record, report_dir)
    crash_point("after-mlflow-run")
    commit_release(where, staged, run_id)  # the release becomes visible here, and only here
    anchor_ledger(where, staged.manifest["release_id"], "publication")
    mark_published(where, run_id)
    crash_point("after-published-tag")
    update_index(where)
    update_catalog(where, str(staged.final_dir))
    return run_id
