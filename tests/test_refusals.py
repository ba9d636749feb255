"""The registry of data-dependent refusals (``transit_release.inputs.refusals``) against the code and the threat model.

Four ways it could drift, four checks: the threat model's table is the registry's (generated); every raise in a
refusing function goes through :func:`~transit_release.inputs.refusals.refusal` with a key registered for that
function, and every registered site has one (a scan of the source); the gate's error classes are raised nowhere
else; the raw-data quality suite checks exactly the registered columns. Then each refusal is triggered once and
carries its key.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transit_release.errors import InputDataError
from transit_release.inputs import refusals
from transit_release.inputs.refusals import REFUSALS, SUITE, markdown_table

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("transit_release", "tasks", "flows", "schemas")
#: The gate's own error classes: raised only as registered refusals.
GATE_ERRORS = {"QuarantineLimitError", "StopTableCoverageError", "PeriodMismatchError"}
BEGIN, END = "<!-- refusals:begin (python -m transit_release.inputs.refusals) -->", "<!-- refusals:end -->"


def test_the_threat_model_lists_exactly_the_registered_refusals():
    text = (ROOT / "docs" / "threat-model.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert table == markdown_table(), ("docs/threat-model.md's refusal table is not the registry's: paste the "
                                       "output of `python -m transit_release.inputs.refusals` between the markers")


# ---- the source ------------------------------------------------------------------------------------------------

def _module_file(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _refusal_key(call: ast.AST) -> str | None:
    """The key of a ``refusal("key", …)`` / ``refusals.refusal("key", …)`` call, else None."""
    if not isinstance(call, ast.Call):
        return None
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name != "refusal":
        return None
    assert call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str), \
        f"refusal(...) at line {call.lineno} must name its key as a string literal"
    return call.args[0].value


def _sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _site(path: Path, function: str) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts) + "." + function


def test_every_raise_of_a_refusing_function_goes_through_the_registry():
    sites = {s for r in REFUSALS.values() for s in r.sites if s != SUITE}
    for site in sorted(sites):
        module, function = site.rsplit(".", 1)
        tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
        (fn,) = [f for f in _functions(tree) if f.name == function]
        keys = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise):
                key = _refusal_key(node.exc)
                assert key is not None, f"{site}, line {node.lineno}: a raise that is not refusal(<key>, ...)"
                keys.add(key)
        expected = {k for k, r in REFUSALS.items() if site in r.sites}
        assert keys == expected, f"{site} raises {sorted(keys)}, the registry lists {sorted(expected)} there"


def test_refusals_are_raised_only_where_registered_and_gate_errors_only_as_refusals():
    found = set()
    for path, tree in _sources():
        for fn in _functions(tree):
            for node in ast.walk(fn):
                key = _refusal_key(node)
                if key is not None:
                    assert key in REFUSALS, f"{path.relative_to(ROOT)}:{node.lineno}: unregistered refusal {key!r}"
                    site = _site(path, fn.name)
                    assert site in REFUSALS[key].sites, f"{site} refuses {key!r}; the registry does not list it there"
                    found.add(key)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and _refusal_key(node.exc) is None:
                f = node.exc.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                assert name not in GATE_ERRORS, (f"{path.relative_to(ROOT)}:{node.lineno}: {name} raised outside "
                                                 "refusal(<key>, ...)")
    assert found == {k for k, r in REFUSALS.items() if set(r.sites) - {SUITE}}


def test_the_raw_quality_suite_checks_exactly_the_registered_columns():
    from schemas import expectations
    from transit_release.config import QualityPolicy

    expectations._context(None)  # Great Expectations builds expectations only inside an active data context
    suite = expectations.totals_suite(QualityPolicy())
    columns = {e.column for e in suite.expectations}
    assert columns == {r.suite_column for r in REFUSALS.values() if r.suite_column}
    assert all(SUITE in r.sites for r in REFUSALS.values() if r.suite_column)
    assert expectations.MIN_TAP_OFF_PRESENT is refusals.MIN_TAP_OFF_PRESENT


# ---- each refusal, triggered -----------------------------------------------------------------------------------

def _figures(**over):
    from transit_release.inputs.screening import GateFigures, Period
    from datetime import date

    period = Period(date(2016, 8, 8), date(2016, 8, 9))
    base = dict(total_rows=1000, counts={}, unknown_stop_rows=0, unknown_stop_first=(), unknown_stop_ids=0,
                outside_rows=0, outside_first=(), clean_per_day=np.array([500, 500]), period=period)
    return GateFigures(**{**base, **over})


@pytest.mark.parametrize("key,figures", [
    ("row-count", dict(total_rows=0, clean_per_day=np.array([0, 0]))),
    ("unknown-stops", dict(counts={"unknown_stop": 20}, unknown_stop_rows=20, unknown_stop_first=(1,),
                           unknown_stop_ids=1)),
    ("outside-period", dict(counts={"outside_period": 20}, outside_rows=20, outside_first=(1,))),
    ("quarantine-share", dict(counts={"absurd_duration": 20})),
    ("empty-day", dict(clean_per_day=np.array([1000, 0]))),
])
def test_each_gate_refusal_carries_its_key(key, figures):
    from transit_release.config import QualityPolicy
    from transit_release.inputs.screening import check_gate

    with pytest.raises(InputDataError) as info:
        check_gate(_figures(**figures), QualityPolicy())
    assert info.value.refusal == key


def test_the_passenger_kinds_refusals_carry_their_keys(tmp_path):
    from tasks.inputs import check_quarantine
    from transit_release.inputs.sequences import read_sequence_file
    from transit_release.inputs.sets import read_set_file
    from transit_release.inputs.trajectories import read_trajectory_file
    from transit_release.inputs.universe import LocationUniverse

    with pytest.raises(InputDataError, match="would be quarantined") as info:
        check_quarantine("sequence file", "s.txt", {"too_long": 2}, 10, 0.01)
    assert info.value.refusal == "record-quarantine-share"
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n", encoding="utf-8")
    universe = LocationUniverse(("A", "B"), "public list")
    for read in (read_sequence_file, read_trajectory_file, read_set_file):
        with pytest.raises(InputDataError, match="only comments or nothing") as info:
            read(empty, universe)
        assert info.value.refusal == "empty-record-file"


def test_a_trips_file_of_only_a_header_is_refused_by_row_count(tmp_path):
    from functools import partial

    from schemas import TripsFile
    from schemas.validation import check
    from tasks.screen import validate_trips_file
    from transit_release.config import load_release_config
    from transit_release.inputs import streaming
    from transit_release.inputs.screening import parse_period

    header = tmp_path / "trips.csv"
    header.write_text("card_id,mode,tap_on_time,tap_on_stop,tap_off_time,tap_off_stop\n", encoding="utf-8")
    cfg = load_release_config()
    stops = pd.DataFrame({"stop_id": [1], "mode": ["train"], "name": ["A"], "postcode": pd.array([None], "Int64")})
    with pytest.raises(InputDataError, match="no data rows") as info:
        streaming.stream_trips(header, stops, parse_period("2016-08-08", "2016-08-08"), cfg.quality, cfg.modes,
                               tmp_path / "spill", tmp_path / "q", partial(check, TripsFile))
    assert info.value.refusal == "row-count"
    with pytest.raises(InputDataError, match="no data rows") as info:
        validate_trips_file.fn(pd.read_csv(header), str(header))
    assert info.value.refusal == "row-count"


def test_an_unregistered_key_cannot_be_raised():
    with pytest.raises(KeyError, match="not a registered data-dependent refusal"):
        refusals.refusal("made-up", InputDataError("x"))
