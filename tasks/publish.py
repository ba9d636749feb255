"""Publication: assemble the tables, stage the release, commit it as the last step."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pandas as pd

from tasks import data_task
from transit_release import opal, publish
from transit_release.accounting.ledger import Ledger
from transit_release.config import ReleaseConfig
from transit_release.home import Home
from transit_release.partition_store import PartitionDataset
from transit_release.screening import Period


@data_task(name="assemble-release-tables")
def assemble_tables(outcomes: list[opal.PartitionOutcome], dataset: PartitionDataset) -> dict[str, pd.DataFrame]:
    return opal.release_tables([o.sanitized for o in outcomes], dataset.key_space, dataset.vocab,
                               dataset.bin_minutes)


@data_task(name="stage-release")
def stage_release(home: Home, release_id: str, period: Period, tables: dict[str, pd.DataFrame],
                  config: ReleaseConfig, code_version: str, noise_kind: str) -> publish.StagedRelease:
    """Write every public file into a hidden staging directory."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = opal.build_manifest(release_id, period, config, noise_kind, code_version, created)
    return publish.stage_release(home.releases, release_id, tables, manifest, publish.render_datacard(manifest))


@data_task(name="commit-release")
def commit_release(home: Home, staged: publish.StagedRelease) -> str:
    """Rename the staged release into place, then record the publication on the ledger."""
    path = publish.commit_release(staged)
    Ledger(home.ledger).record_publication(path.name, staged.manifest_sha256)
    return str(path)


@data_task(name="load-published-manifest")
def load_manifest(home: Home, release_id: str) -> dict:
    return json.loads((home.releases / release_id / publish.MANIFEST).read_text(encoding="utf-8"))
