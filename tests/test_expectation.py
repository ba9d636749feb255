"""What a release says to expect before its charge: the public rules agree with what the release will publish about
itself, the internal figures are exact, and they reach only the custodian's terminal."""

from __future__ import annotations

import builtins
import io
import sys

import numpy as np
import pytest

from transit_release import analysis
from transit_release.config import MARGINALS, load_release_config
from transit_release.opendata.uncertainty import uncertainty_rows
from transit_release.preprocessing import Histogram, PartitionHistograms
from transit_release.releases.opal import privacy_statement
from transit_release.releases.opal_expectation import Expectation, count_cells, public_rules
from transit_release.runtime import custodian


@pytest.mark.parametrize("unit,epsilons", [("card", None), ("trip", None), ("card", [0.2, 0.1, 0.3, 0.1, 0.5, 1])])
def test_the_public_rules_are_the_manifests_and_uncertainty_csvs_figures(unit, epsilons):
    config = load_release_config(unit=unit).with_overrides(epsilons=epsilons)
    p = privacy_statement(config)
    margins = {r["count_of"]: r for r in uncertainty_rows({"privacy": p})}
    rules = public_rules(config)
    assert [r.j for r in rules] == [1, 2, 3, 4, 5, 6]
    for r in rules:
        stated = p["marginals"][r.name]
        assert (r.threshold, r.noise_bound, r.noise_scale, r.epsilon, r.file) == (
            stated["threshold"], stated.get("noise_bound"), stated["noise_scale"], stated["epsilon"],
            f"{stated['file']}.csv")
        assert r.half_width == margins[f"{r.name} (j = {r.j})"]["half_width_95"]


def _partition(counts: dict[str, list[int]], mode: str = "bus", date: str = "20160808") -> PartitionHistograms:
    hist = {m.name: Histogram(np.arange(len(counts.get(m.name, []))), np.array(counts.get(m.name, []), np.int64))
            for m in MARGINALS}
    return PartitionHistograms(mode, date, 0, hist)


def test_the_cells_are_counted_per_file_against_each_marginals_threshold_and_bound():
    config = load_release_config(unit="card")  # T = 405, A = 402 for j = 1–4; T = 211, A = 208 for j = 5–6
    parts = [_partition({"tap_on_time": [1, 404, 405, 807], "tap_off_time": [900],
                         "tap_on_time_location": [210, 211, 419]}),
             _partition({"tap_on_location": [2, 1]}, date="20160809"), _partition({}, date="20160810")]
    cells = {c.file: c for c in count_cells(parts, config)}
    assert list(cells) == ["time.csv", "location.csv", "time-loc.csv"]
    assert (cells["time.csv"].cells, cells["time.csv"].at_threshold, cells["time.csv"].certain) == (5, 3, 2)
    assert (cells["location.csv"].cells, cells["location.csv"].at_threshold, cells["location.csv"].certain) == (2, 0, 0)
    assert (cells["time-loc.csv"].cells, cells["time-loc.csv"].at_threshold, cells["time-loc.csv"].certain) == (3, 2, 1)
    # the expected rows: P(c + Z ≥ T) per cell, by the analysis module's own exact computation
    rules = {r.name: r for r in public_rules(config)}

    def published(name: str, c: int) -> float:
        r = rules[name]
        law = analysis.NoiseLaw.of(r.noise_scale, r.noise_bound)
        return analysis.near_threshold(law, r.threshold, c, r.half_width).published

    assert cells["time.csv"].expected == pytest.approx(
        sum(published("tap_on_time", c) for c in (1, 404, 405, 807)) + published("tap_off_time", 900), abs=1e-9)
    assert cells["time-loc.csv"].expected == pytest.approx(
        sum(published("tap_on_time_location", c) for c in (210, 211, 419)), abs=1e-9)
    assert cells["location.csv"].expected == 0.0  # below T − A: never published


def test_at_the_trip_level_no_cell_is_certain():
    config = load_release_config(unit="trip")  # T = 34 and 18, unbounded noise
    cells = {c.file: c for c in count_cells([_partition({"tap_on_time": [34, 1000]})], config)}
    assert cells["time.csv"].certain is None and cells["time.csv"].at_threshold == 2
    law = analysis.NoiseLaw.of("2")
    assert cells["time.csv"].expected == pytest.approx(1 + analysis.near_threshold(law, 34, 34, 6).published)


def _expectation(config, cells=True) -> Expectation:
    parts = [_partition({"tap_on_time": [500, 10], "tap_on_location": [1000], "tap_on_time_location": [300]})]
    return Expectation("r1", public_rules(config), count_cells(parts, config) if cells else None)


def test_the_terminal_says_the_public_rules_then_the_internal_figures_labelled(monkeypatch, capsys):
    from transit_release.cli.printing import print_expectation

    def no_print(*a, **k):  # Prefect's log_prints replaces print in a flow run: the terminal lines never use it
        raise AssertionError("print() used")

    monkeypatch.setattr(builtins, "print", no_print)
    print_expectation(_expectation(load_release_config(unit="card")))
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "What r1 can be expected to publish (before the charge):",
        "  a cell (one mode and day's taps at one time, location or both) is published only if its noisy count "
        "reaches its threshold T",
        "  the noise never exceeds A either way: a true count of T + A or more is always published, one below T − A "
        "never",
        "  time.csv, location.csv (j = 1–4): T = 405, A = 402; a true count of T is published 51% of the time; "
        "margin of error ± 60 (95%)",
        "  time-loc.csv (j = 5–6): T = 211, A = 208; a true count of T is published 52% of the time; margin of "
        "error ± 30 (95%)",
        "  internal figures, from the true counts (this terminal only: never published, logged or recorded):",
        "    time.csv: 1 of 2 cells at or over T (0 at or over T + A); about 1 rows expected",
        "    location.csv: 1 of 1 cells at or over T (1 at or over T + A); about 1 rows expected",
        "    time-loc.csv: 1 of 1 cells at or over T (0 at or over T + A); about 1 rows expected",
    ]
    print_expectation(_expectation(load_release_config(unit="trip"), cells=False))
    out = capsys.readouterr().out
    assert "the noise is unbounded" in out and "internal" not in out
    assert ("  time.csv, location.csv (j = 1–4): T = 34; a true count of T is published 62% of the time; margin of "
            "error ± 6 (95%)") in out


def test_nobody_listening_means_nothing_is_computed_or_said():
    from flows.tail import ReleaseRun, _tell_expectation

    class Kind:
        asked = 0

        def expectation(self, run, records):
            Kind.asked += 1
            return "what to expect"

    heard = []
    custodian.install(None)
    _tell_expectation(Kind(), ReleaseRun(None, "r1", True), None)
    assert Kind.asked == 0 and not custodian.listening()
    custodian.install(heard.append)
    try:
        _tell_expectation(Kind(), ReleaseRun(None, "r1", True), None)
    finally:
        custodian.install(None)
    assert Kind.asked == 1 and heard == ["what to expect"]


def test_the_listener_writes_to_standard_output_only(monkeypatch):
    from transit_release.cli.printing import print_expectation

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    print_expectation(_expectation(load_release_config(unit="card")))
    assert "internal figures" in out.getvalue() and err.getvalue() == ""
