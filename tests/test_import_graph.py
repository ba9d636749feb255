"""The house's import rule (docs/contributing.md): imports run down the rooms, never up and never in a loop; the
library never imports its orchestration (``flows/``, ``tasks/``) or the command. Read from the code's own imports,
function-level ones included (:mod:`tests.import_graph`)."""

from collections import defaultdict
from pathlib import Path

from tests.import_graph import edges, modules, room, sccs

ROOT = Path(__file__).resolve().parent.parent


def test_the_library_never_imports_its_orchestration_and_no_file_or_room_imports_in_a_loop():
    mods = modules(ROOT)
    found = edges(ROOT, mods)
    up = sorted((a, b) for a, b in found if a.startswith("transit_release") and not a.startswith("transit_release.cli")
                and (b.split(".")[0] in ("flows", "tasks") or b.startswith("transit_release.cli")))
    assert up == []
    succ, rsucc = defaultdict(set), defaultdict(set)
    for a, b in found:
        succ[a].add(b)
        if room(a) != room(b) and room(b) != "transit_release":  # the package's face is under everything
            rsucc[room(a)].add(room(b))
    assert sccs(sorted(mods), succ) == []
    assert sccs(sorted({room(m) for m in mods}), rsucc) == []


def test_mlflow_is_reached_only_through_the_reports_tracking_module():
    users = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "transit_release").rglob("*.py")
                   if "import mlflow" in p.read_text(encoding="utf-8")
                   or "from mlflow" in p.read_text(encoding="utf-8"))
    assert users == ["transit_release/reports/tracking.py"]
