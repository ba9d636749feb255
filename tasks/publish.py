"""The publishing tail every release kind shares: stage, commit (intent, rename, ledger), load."""

from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd

from tasks import data_task
from transit_release.faults import crash_point
from transit_release import publish
from transit_release.accounting.accountant import cumulative_for
from transit_release.accounting.ledger import Ledger
from transit_release.home import Home


@data_task(name="stage-release")
def stage_release(home: Home, release_id: str, tables: dict[str, pd.DataFrame], texts: dict[str, str],
                  manifest: dict, render_datacard: Callable[[dict], str], charged: list) -> publish.StagedRelease:
    """Write every public file into a hidden staging directory.

    The manifest gets the ledger's head (a public commitment to the history so far) and where the
    release's unit of privacy stands at publication (every recorded spend of it, this release's
    included). Releases made with the test-only seed are staged under ``private/test-releases/``.
    """
    ledger = Ledger(home.ledger)
    these = [e.event() for e in charged]
    recorded = [e.event() for e in ledger.spends()]
    manifest = {**manifest, "ledger_head": ledger.head().to_dict(),
                "privacy": {**manifest["privacy"], "cumulative_at_publication": cumulative_for(recorded, these)}}
    staged = publish.stage_release(home.release_root(manifest["noise_source"]), release_id, tables, manifest,
                                   render_datacard(manifest), texts)
    crash_point("after-staging")
    return staged


@data_task(name="commit-release")
def commit_release(home: Home, staged: publish.StagedRelease, mlflow_run_id: str | None) -> str:
    """Intent on the ledger, rename into place, publication on the ledger (recoverable at every step)."""
    return str(publish.commit_release(staged, Ledger(home.ledger), mlflow_run_id))


@data_task(name="load-published-manifest")
def load_manifest(home: Home, release_id: str) -> dict:
    return json.loads((home.release_dir(release_id) / publish.MANIFEST).read_text(encoding="utf-8"))
