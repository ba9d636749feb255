"""The open-data files of neighbouring inputs differ only through the noise (library level, no Prefect).

The manifests of D and D′ are built as the flows build them (``test_manifest_audit``'s cases); each is staged with
its own published tables (other noise: other counts and rows) through the open-data hook, and the Data Package,
the margins of error and the landing page must then be the same apart from sizes, rows, hashes and the time. The
same comparison on two real releases is in ``test_neighbours_end_to_end.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.open_data_checks import datapackage_view, page_view
from tests.privacy.test_manifest_audit import (library_opal_manifest, library_sequence_manifest,
                                               neighbouring_sequence_files, neighbouring_trips)
from tests.test_opendata import stage

pytestmark = pytest.mark.privacy


def views(home, kind: str, seed: int, manifest: dict) -> dict:
    staged = stage(home, kind, seed=seed, manifest=manifest)
    assert {"datapackage.json", "index.html", "uncertainty.csv"} <= set(staged.manifest["files"])
    d = staged.staging_dir
    return {"datapackage": datapackage_view(json.loads((d / "datapackage.json").read_text())),
            "uncertainty": (d / "uncertainty.csv").read_bytes(),
            "page": page_view((d / "index.html").read_text()),
            "raw_page": (d / "index.html").read_text()}


def test_open_data_files_of_neighbouring_inputs_differ_only_through_the_noise(tmp_path):
    d, d2 = neighbouring_trips()
    seq, seq2 = neighbouring_sequence_files(tmp_path)
    cases = {"opal-card": [library_opal_manifest(t, "2016-08-08", "2016-08-14") for t in (d, d2)],
             "prefix-tree": [library_sequence_manifest(p, 1.0, 3, "hybrid", None, 4) for p in (seq, seq2)]}
    for kind, manifests in cases.items():
        first, second = (views(tmp_path / f"{kind}-{i}", kind, i, m) for i, m in enumerate(manifests))
        assert first["raw_page"] != second["raw_page"]  # the files differ (other noise) ...
        for part in ("datapackage", "uncertainty", "page"):  # ... and nothing else does
            assert first[part] == second[part], f"{kind}: {part} depends on the data"
