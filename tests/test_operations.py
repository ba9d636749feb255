"""Operations a custodian relies on: refusals before Prefect, the budget view, dry runs, no debris, progress,
data cards that state the cumulative loss, the audit's chart."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import WEEK_FLAGS
from transit_release.accounting.ledger import Ledger
from transit_release.cli import main
from transit_release.config import load_release_config
from transit_release.files.home import Home

CHECK_WITHOUT_PREFECT = ("import sys; from transit_release.cli import main; rc = main(sys.argv[1:]); "
                         "print('PREFECT-IMPORTED' if 'prefect' in sys.modules else 'NO-PREFECT'); sys.exit(rc)")


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK_WITHOUT_PREFECT, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_a_bad_header_is_refused_before_prefect_with_the_flows_own_message(small_week, tmp_path):
    bad = tmp_path / "trips.csv"
    pd.read_csv(small_week["trips"], nrows=50).rename(columns={"tap_off_stop": "tap_off_stp"}).to_csv(bad, index=False)
    res = run_cli("release", "--trips", str(bad), "--stops", str(small_week["stops"]), "--home",
                  str(tmp_path / "home"), *WEEK_FLAGS)
    assert res.returncode == 2 and "NO-PREFECT" in res.stdout
    assert res.stderr.strip() == ("transit-release: error: trips file trips.csv: 2 problem(s): column 'tap_off_stop': "
                                  "missing column; column 'tap_off_stp': unexpected column")
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "home").exists()  # a refused command creates nothing


@pytest.mark.parametrize("args,message", [
    (["--release-id", "index.html"], "release id 'index.html' is reserved"),
    (["--release-id", "audit-2026"], "release id 'audit-2026' is reserved"),
    (["--epsilons", "1e-5,1,1,1,2,2"], "ε = 1e-05 gives noise scale 200000, above the largest supported scale"),
    (["--epsilons", "1e308,1,1,1,2,2"], "below the smallest supported scale 1/16"),
    (["--period-start", "2016-08-14", "--period-end", "2016-08-08"], "release period ends (2016-08-08) before it "
                                                                       "starts (2016-08-14)"),
])
def test_bad_invocations_are_refused_at_once(small_week, tmp_path, args, message):
    flags = WEEK_FLAGS if "--period-start" not in args else []
    res = run_cli("release", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--home",
                  str(tmp_path / "home"), *flags, *args)
    assert res.returncode == 2 and "NO-PREFECT" in res.stdout, res.stderr
    assert message in res.stderr and res.stderr.count("\n") == 1


def test_a_missing_period_a_line_less_file_and_an_unusable_home_are_refused_at_once(small_week, tmp_path):
    res = run_cli("release", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--home",
                  str(tmp_path / "home"))
    assert res.returncode == 2 and "declare the release period with --period-start and --period-end" in res.stderr
    blob = tmp_path / "trips.csv"
    blob.write_bytes(b"x" * (1 << 20))  # a large file named correctly, without a single line break
    res = run_cli("release", "--trips", str(blob), "--stops", str(small_week["stops"]), "--home",
                  str(tmp_path / "home"), *WEEK_FLAGS)
    assert res.returncode == 2 and "no line break in the first 64 KiB" in res.stderr
    (tmp_path / "afile").write_text("x")
    res = run_cli("budget", "--home", str(tmp_path / "afile"))
    assert res.returncode == 2 and "is a file, not a directory" in res.stderr
    assert "NO-PREFECT" in res.stdout


def test_a_refused_invocation_leaves_an_existing_home_as_it_was(small_week, tmp_path):
    """The command's temporary Prefect server starts while the invocation is checked; a refusal stops it and
    removes what it made, also in a home whose ledger holds spends (where nothing else may be removed)."""
    from tests.test_accounting import partition_events

    home = tmp_path / "home"
    Ledger(home / "ledger.sqlite").charge(partition_events("r1", mode="ferry"))
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    res = subprocess.run([sys.executable, "-c", CHECK_WITHOUT_PREFECT, "release", "--trips",
                          str(tmp_path / "missing.csv"), "--stops", str(small_week["stops"]), "--home", str(home),
                          *WEEK_FLAGS], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "NO-PREFECT" in res.stdout, res.stderr
    assert res.stderr.strip().startswith("transit-release: error: trips file") and "not found" in res.stderr
    after = [p.relative_to(home) for p in home.rglob("*") if not p.name.endswith(("-wal", "-shm"))]
    assert sorted(after) == before  # (SQLite's own side files of the ledger, which the refusal read, aside)


def test_budget_shows_spent_and_remaining_per_cap_without_prefect(tmp_path):
    from tests.test_accounting import partition_events

    home = tmp_path / "home"
    Ledger(home / "ledger.sqlite").charge(partition_events("r1", mode="ferry"))
    res = run_cli("budget", "--home", str(home))
    assert res.returncode == 0 and "NO-PREFECT" in res.stdout, res.stderr
    out = res.stdout
    assert "cap 'trip-partition': trip, ε ≤ 8, δ ≤ 1e-06 per partition, all time" in out
    assert "  ferry/20160808: used ε=8, δ=7.5e-07; remaining ε=0, δ=2.5e-07" in out
    assert "most spent" not in out  # one scope: its own line says it
    assert "cap 'sequence-period': passenger-sequence, ε ≤ 2, δ ≤ 1e-09 per period, all time" in out
    assert "  nothing spent: the whole cap remains" in out
    assert ("  population default: used ε=0 by privacy-loss distributions at δ=1e-06 (basic composition, for "
            "reference: ε=0, δ=0); remaining ε=80 (unbounded: trip-level release(s) r1)") in out
    assert "  next release like r1: the policy REFUSES it: " in out  # its partitions are spent
    js = json.loads(run_cli("budget", "--home", str(home), "--json").stdout.rsplit("\n", 2)[0])
    spent = [row for row in js if row["scope"] is not None]  # every cap is listed: those with nothing spent too
    assert [row["cap"] for row in js if row["scope"] is None] == ["card-year", "sequence-period",
                                                                  "trajectory-period", "set-period"]
    assert {"cap": "sequence-period", "unit_of_privacy": "passenger-sequence", "per": "period", "period": "all-time",
            "measure": "basic", "scope": None, "used_epsilon": 0.0, "used_delta": 0.0, "remaining_epsilon": 2.0,
            "remaining_delta": 1e-09} in js
    for row in spent:  # the policy's verdict on the next release like r1 (its partition is spent)
        assert row.pop("next_release")["allowed"] is False
    assert spent == [{"cap": "person-year", "unit_of_privacy": "person", "per": "person", "period": "calendar-year",
                   "measure": "pld", "scope": "population default", "used_epsilon": 0.0, "used_delta": 0.0,
                   "remaining_epsilon": 80.0, "remaining_delta": 1e-06, "basic_epsilon": 0.0, "basic_delta": 0.0,
                   "note": "unbounded: trip-level release(s) r1"},
                  {"cap": "trip-partition", "unit_of_privacy": "trip", "per": "partition", "period": "all-time",
                   "measure": "basic", "scope": "ferry/20160808", "used_epsilon": 8.0, "used_delta": 7.5e-07,
                   "remaining_epsilon": 0.0, "remaining_delta": 2.5e-07}]


def test_budget_names_the_most_spent_scope_and_mode_among_several(tmp_path):
    from tests.test_accounting import partition_events

    home = tmp_path / "home"
    ledger = Ledger(home / "ledger.sqlite")
    ledger.charge(partition_events("r1", mode="ferry"))
    ledger.charge(partition_events("r2", mode="bus"))
    res = run_cli("budget", "--home", str(home))
    assert res.returncode == 0, res.stderr
    assert "  most spent: ferry/20160808: used ε=8, δ=7.5e-07; remaining ε=0, δ=2.5e-07" in res.stdout
    assert "  mode ferry: 1 partition(s), most spent ε=8 (remaining ε=0)" in res.stdout
    assert "  mode bus: 1 partition(s), most spent ε=8 (remaining ε=0)" in res.stdout


@pytest.mark.flow
def test_a_dry_run_validates_everything_and_writes_nothing(prefect_harness, tiny_week, tmp_path, capsys):
    home = tmp_path / "home"
    rc = main(["release", "--trips", str(tiny_week["trips"]), "--stops", str(tiny_week["stops"]), "--home",
               str(home), "--dry-run", "--workers", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Release opal-card-20160808-20160814: dry run: nothing charged, drawn or written" in out
    assert "period: 2016-08-08 .. 2016-08-14  (suggested by the tap-on dates: declare it to publish)" in out
    assert "spends: 168 event(s)" in out
    assert "    card 2016-08-08..2016-08-14 (opal-card-20160808-20160814): ε=8, δ=6e-09" in out
    assert "budget policy: allows it" in out
    assert not Ledger(home / "ledger.sqlite").entries() if (home / "ledger.sqlite").exists() else True
    # a dry run in a new directory leaves no home behind: at most the quarantine of refused rows (atk39 #7)
    assert not home.exists() or {p.name for p in home.iterdir()} == {"private"}
    assert not (home / "private").exists() or {p.name for p in (home / "private").iterdir()} == {"quarantine"}
    # what to expect, before the verdict: the thresholds, noise bounds and margins the release would publish
    assert out.index("What opal-card-20160808-20160814 can be expected to publish (before the charge):") \
        < out.index("Release opal-card-20160808-20160814: dry run")
    _assert_public_rules_said(out, load_release_config(unit="card"))
    assert "  internal figures, from the true counts (this terminal only: never published, logged or recorded):" \
        in out
    for f in ("time.csv", "location.csv", "time-loc.csv"):  # ~27,000 trips: no cell near the card-level thresholds
        assert re.search(rf"^    {re.escape(f)}: 0 of [1-9][\d,]* cells at or over T \(0 at or over T \+ A\); "
                         r"about 0 rows expected$", out, re.M), out


def _assert_public_rules_said(out: str, config) -> None:
    """The dry run's lines of thresholds, bounds and margins are the manifest's and uncertainty.csv's figures."""
    from transit_release.opendata.uncertainty import uncertainty_rows
    from transit_release.releases.opal import privacy_statement

    p = privacy_statement(config)
    said = {}
    for line in re.findall(r"^  (.+) \(j = ([\d–, ]+)\): T = (\d+)(?:, A = (\d+))?; a true count of T is published "
                           r"\d+% of the time; margin of error ± (\d+) \(95%\)$", out, re.M):
        files, js, t, a, h = line
        first, _, last = js.partition("–")
        for j in (range(int(first), int(last) + 1) if last else map(int, js.split(", "))):
            said[j] = (int(t), int(a) if a else None, int(h))
    rows = {r["count_of"]: r for r in uncertainty_rows({"privacy": p})}
    assert said == {m["j"]: (m["threshold"], m.get("noise_bound"), rows[f"{name} (j = {m['j']})"]["half_width_95"])
                    for name, m in p["marginals"].items()}, out


@pytest.mark.flow
def test_the_dry_runs_internal_figures_are_those_of_the_true_counts(prefect_harness, tiny_week, tmp_path, capsys):
    """Trip level (no contribution bounding): the cells the dry run counts over the thresholds are those of the
    histograms the plain library computes in memory from the same files."""
    from schemas import Stops, validate
    from transit_release.inputs.tables import read_stops, read_trips
    from transit_release.preprocessing import build_location_index, encode_trips, partition_histograms
    from transit_release.releases.opal_expectation import count_cells

    assert main(["release", "--trips", str(tiny_week["trips"]), "--stops", str(tiny_week["stops"]), "--home",
                 str(tmp_path / "home"), "--unit", "trip", "--dry-run", "--workers", "0", *WEEK_FLAGS]) == 3
    out = capsys.readouterr().out  # the default policy refuses a trip-level release (exit 3) after saying what to expect
    config = load_release_config(unit="trip")
    _assert_public_rules_said(out, config)
    stops = validate(Stops, read_stops(tiny_week["stops"]), "stops")
    enc = encode_trips(read_trips(tiny_week["trips"]), build_location_index(stops, config.modes), config.bin_minutes)
    cells = count_cells(partition_histograms(enc), config)
    assert sum(c.at_threshold for c in cells) > 0  # T = 34 and 18: some cells of this small week reach them
    for c in cells:
        assert (f"    {c.file}: {c.at_threshold:,} of {c.cells:,} cells at or over T; about {c.expected:,.0f} rows "
                "expected") in out.splitlines()


@pytest.mark.flow
def test_a_refused_run_leaves_nothing_behind(prefect_harness, tiny_week, tmp_path, capsys):
    """The finding: a run refused by the budget left its encoded trips and an empty report folder."""
    home = tmp_path / "home"
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(__file__).parent.joinpath("..", "transit_release", "defaults", "budget_policy.yaml")
                      .read_text().replace("      epsilon: 70.0\n", "      epsilon: 4.0\n", 1))  # card-year
    args = ["release", "--trips", str(tiny_week["trips"]), "--stops", str(tiny_week["stops"]), "--home",
            str(home), "--policy", str(policy), *WEEK_FLAGS]  # the default: refused with its local cluster alive
    assert main(args) == 3 and "Cannot release 'card' without exceeding the budget" in capsys.readouterr().err
    assert not home.exists()  # a new home that was refused is not left behind, nor Prefect's database in it
    Home.at(home).prepare()
    (home / "notes.txt").write_text("the custodian's")
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    assert main(args) == 3
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before  # an existing home: as it was
    assert main(["audit", "--home", str(home), "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert result["leftovers"] == [] and result["staging_leftovers"] == []


def _said_before_the_charge_and_nowhere_else(home: Home, name: str, out: str, told: list[int]) -> None:
    """What to expect was said on the custodian's terminal, once, before the first spend of ``name`` was on the
    ledger; its internal figures are in no file of the home, no MLflow field and none of Prefect's logs of the run."""
    from mlflow.tracking import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, LogFilter, LogFilterFlowRunId

    assert told == [0]  # once, with nothing of this release on the ledger yet
    assert out.index(f"What {name} can be expected to publish (before the charge):") \
        < out.index(f"Release {name}: published")
    internal = [line for line in out.splitlines() if " cells at or over T" in line]
    assert len(internal) == 3 and any(not line.split(": ", 1)[1].startswith("0 of") for line in internal), out
    phrases = ("cells at or over", "internal figures", "can be expected to publish", "rows expected")
    for path in home.root.rglob("*"):  # the releases, the reports, MLflow's store
        if path.is_file():
            data = path.read_bytes()
            assert not any(p.encode() in data for p in phrases), path
    client = MlflowClient(tracking_uri=home.mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("transit-release").experiment_id],
                              f"tags.release_id = '{name}'")
    assert runs and not any(k for r in runs for k in {**r.data.params, **r.data.metrics}
                            if any(w in k for w in ("expect", "at_threshold", "over_threshold", "certain")))
    with get_client(sync_client=True) as prefect:  # the session's server (the harness's)
        (flow_run,) = [r for r in prefect.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
            any_=["opal-release"]))) if r.parameters.get("release_id") == name]
        logs = prefect.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])))
    assert logs and not any(p in log.message for log in logs for p in phrases)


@pytest.mark.flow
def test_data_cards_state_the_cumulative_loss_of_their_unit(prefect_harness, tiny_week, tmp_path, capsys,
                                                            monkeypatch):
    """The finding: a second release of a week said "(2, ...)-DP" while the week stood at ε = 8 + 2. At the trip level
    a passenger's loss is unbounded, and the data card says so before the trip's own figure.

    The first release (trip level: thresholds 34 and 18, which this week reaches) also says what to expect before
    its charge and nowhere else, with Prefect's log_prints on (which turns a flow's print into logs)."""
    from prefect.settings import PREFECT_LOGGING_LOG_PRINTS, temporary_settings

    from transit_release.cli import opal as opal_command

    home = tmp_path / "home"
    told: list[int] = []
    said = opal_command.print_expectation

    def listener(expectation):
        ledger = Home.at(home).ledger
        told.append(len(Ledger(ledger, read_only=True).spends(expectation.release_id)) if ledger.exists() else 0)
        said(expectation)
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(__file__).parent.joinpath("..", "transit_release", "defaults", "budget_policy.yaml")
                      .read_text().replace("      epsilon: 8.0\n      delta: 1.0e-6\n",
                                           "      epsilon: 10.0\n      delta: 1.0e-5\n", 1)
                      .replace("allow_unbounded_person_loss: false", "allow_unbounded_person_loss: true"))
    base = ["release", "--trips", str(tiny_week["trips"]), "--stops", str(tiny_week["stops"]), "--home", str(home),
            "--policy", str(policy), "--workers", "0", "--unit", "trip", *WEEK_FLAGS]
    monkeypatch.setattr(opal_command, "print_expectation", listener)
    with temporary_settings(updates={PREFECT_LOGGING_LOG_PRINTS: True}):
        assert main([*base, "--release-id", "first"]) == 0
    _said_before_the_charge_and_nowhere_else(Home.at(home), "first", capsys.readouterr().out, told)
    monkeypatch.undo()
    assert main([*base, "--release-id", "second", "--epsilons", "0.25,0.25,0.25,0.25,0.5,0.5"]) == 0
    out = capsys.readouterr().out
    assert "per trip at publication: ε=10, δ=1.5e-06 over 2 release(s)" in out
    assert "a passenger of population 'default' at publication: UNBOUNDED (trip-level release(s) first, second)" in out
    card = (home / "releases" / "second" / "DATACARD.md").read_text()
    assert "The release is (2, 7.5e-07)-differentially private" in card
    assert "## Where a passenger stands: unbounded" in card and "`first` (2016-08-08..2016-08-14)" in card
    assert ("For its own unit of privacy (one trip, in the most-spent (mode, day) partition of this period), every "
            "release of that unit recorded so far (this one included) adds up to ε = 10, δ = 1.5e-06 by basic "
            "composition (2 release(s))") in " ".join(card.split())
    manifest = json.loads((home / "releases" / "second" / "manifest.json").read_text())
    assert manifest["privacy"]["cumulative_at_publication"] == {"epsilon": 10.0, "delta": 1.5e-06, "releases": 2}
    assert manifest["ledger_head"]["seq"] == 168 + 1 + 168  # first release's spends, its commit, the second's spends


def test_progress_shows_on_a_terminal_and_stays_quiet_otherwise():
    import io

    from rich.console import Console

    from transit_release.runtime import progress

    buf = io.StringIO()
    reporter = progress.RichReporter(Console(file=buf, force_terminal=True, width=100))
    progress.install(reporter)
    try:
        with progress.stage("sanitizing 3 partitions", total=3) as bar:
            for _ in range(3):
                bar.advance()
    finally:
        progress.install(progress.Reporter())
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # without the terminal's colour codes
    assert "sanitizing 3 partitions ━" in text and "✓ sanitizing 3 partitions (" in text
    quiet = io.StringIO()
    with progress.stage("nothing shown") as bar:  # the default reporter draws nothing
        bar.advance()
    assert quiet.getvalue() == ""


def test_the_audit_chart_draws_every_mode_and_the_cap(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from transit_release.reports import report

    panels = {}
    real = plt.subplots

    def spy(*a, **k):
        fig, axes = real(*a, **k)
        panels["axes"] = axes
        return fig, axes

    monkeypatch.setattr(plt, "subplots", spy)  # the pyplot the report draws with (imported when it draws)
    tl = pd.DataFrame({"recorded_at": pd.to_datetime(["2026-01-01"] * 4), "mode": ["bus", "ferry", "lightrail", "train"],
                       "partition": ["b", "f", "l", "t"], "cumulative_epsilon": [8.0] * 4})
    report._cumulative_chart(tl, "trip", 8.0, tmp_path / "c.png")
    axes = panels["axes"][0]
    assert [ax.get_title() for ax in axes] == ["bus", "ferry", "lightrail", "train"]  # no line hides another
    assert all(any(line.get_linestyle() == "--" and line.get_ydata()[0] == 8.0 for line in ax.get_lines())
               for ax in axes)  # the cap in every panel
    assert (tmp_path / "c.png").stat().st_size > 5_000
