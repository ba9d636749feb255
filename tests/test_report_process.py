"""The Opal report's figures, drawn in a process of their own (plain library; no Prefect)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from transit_release.config import MARGINALS
from transit_release.reports import report_process
from transit_release.reports.report import FIGURES
from transit_release.reports.report_process import ReportFiguresError

PARTS = ["bus/20160808", "bus/20160809", "train/20160808"]


def _job():
    utility = pd.DataFrame([{"partition": p, "marginal": m.name, "trip_coverage": 0.5, "epsilon": 0.1}
                            for p in PARTS for m in MARGINALS])
    points = {m.name: (np.array([1, 5, 30, 400]), np.array([2, 6, 28, 390])) for m in MARGINALS}
    return {"marginals": {m.name: {"threshold": 5} for m in MARGINALS}}, utility, points


def test_the_figures_are_drawn_by_a_child_process(tmp_path):
    privacy, utility, points = _job()
    report_process.draw(tmp_path, privacy, utility, points)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FIGURES)
    assert all((tmp_path / f).read_bytes().startswith(b"\x89PNG") for f in FIGURES)


def test_a_failure_names_its_type_never_its_message(tmp_path):
    """A plotting library's message may quote a value, and the figures' values are true counts."""
    privacy, utility, points = _job()
    points["tap_on_time"] = (np.array(["secret-4711"], dtype=object), np.array([1]))  # float('secret-4711') fails
    with pytest.raises(ReportFiguresError) as info:
        report_process.draw(tmp_path, privacy, utility, points)
    assert str(info.value) == "the release report's figures could not be drawn: ValueError in the drawing process"


def test_a_missing_folder_is_not_created(tmp_path):
    """The child writes into the folder it is given and never makes it: a folder a failed run has removed
    meanwhile stays removed."""
    privacy, utility, points = _job()
    with pytest.raises(ReportFiguresError, match="FileNotFoundError"):
        report_process.draw(tmp_path / "gone", privacy, utility, points)
    assert not (tmp_path / "gone").exists()


def test_the_child_does_not_import_from_the_working_directory(tmp_path, monkeypatch):
    """It is given true counts: a module planted where the command is run (often the data's folder) is not
    imported in its place."""
    planted = tmp_path / "cwd"
    planted.mkdir()
    (planted / "pandas.py").write_text("raise SystemExit('planted module imported')\n")
    monkeypatch.chdir(planted)
    out = tmp_path / "out"
    out.mkdir()
    privacy, utility, points = _job()
    report_process.draw(out, privacy, utility, points)
    assert sorted(p.name for p in out.iterdir()) == sorted(FIGURES)
