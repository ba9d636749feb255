"""The transit-release command: demo, release failures, synth."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from transit_release.cli import main


@pytest.mark.flow
def test_demo_publishes_with_thresholds_respected(prefect_harness, tmp_path, capsys):
    rc = main(["demo", "--home", str(tmp_path), "--scale", "0.02"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Release opal-card-20160808-20160814: published" in out  # the card is the default unit
    assert "a passenger of population 'default' at publication: ε=8, δ=6e-09; PLD ε=" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path}" in out.replace("\n", "")
    d = tmp_path / "releases" / "opal-card-20160808-20160814"
    for name, threshold in (("location", 405), ("time", 405), ("time-loc", 211)):  # the card-level thresholds
        counts = pd.read_csv(d / f"{name}.csv")["count"]
        assert counts.empty or counts.min() >= threshold
    # raw demo input lives under private/, never under releases/
    assert (tmp_path / "private" / "demo-input" / "trips.csv").exists()
    # a second demo run re-uses the published release: nothing drawn, nothing spent
    assert main(["demo", "--home", str(tmp_path), "--scale", "0.02"]) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out


@pytest.mark.flow
def test_missing_input_fails_with_the_reason_on_stderr(prefect_harness, tmp_path, capsys):
    rc = main(["release", "--trips", str(tmp_path / "nope.csv"), "--stops", str(tmp_path / "stops.csv"),
               "--home", str(tmp_path / "home")])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"transit-release: error: trips file {tmp_path / 'nope.csv'}: not found" in err.splitlines()
    assert not (tmp_path / "home" / "releases").exists()


def test_console_script_synth(tmp_path):
    exe = Path(sys.executable).parent / "transit-release"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "transit_release.cli"]
    res = subprocess.run(cmd + ["synth", "--out", str(tmp_path), "--scale", "0.002", "--seed", "1", "--quiet"],
                         capture_output=True, text=True, timeout=300, env={**os.environ})
    assert res.returncode == 0, res.stderr
    trips = pd.read_csv(tmp_path / "trips.csv")
    assert list(trips.columns) == ["card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]
    assert list(pd.read_csv(tmp_path / "stops.csv").columns) == ["stop_id", "mode", "name", "postcode"]


def test_bad_epsilons_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["release", "--trips", "a", "--stops", "b", "--epsilons", "1,x"])
    assert info.value.code == 2
    assert "expected comma-separated numbers" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value", [("--epsilon", "\uff11"), ("--epsilon", "1_0"), ("--epsilon", "\u0661"),
                                        ("--queries", "1_000"), ("--epsilons", "1,1,1,1,2,\uff12")])
def test_numbers_are_read_in_ascii_digits_only(flag, value, capsys):
    """atk39 #13: Python's float() read `--epsilon １` (a full-width digit) as 1 and `--epsilon 1_0` as 10."""
    from transit_release.cli.options import integer, number

    args = ["sets", "--input", "a", "--locations", "b", "--epsilon", "1", "--period-start", "2026-01-01",
            "--period-end", "2026-01-31"] if flag != "--epsilons" else ["release", "--trips", "a", "--stops", "b"]
    with pytest.raises(SystemExit) as info:
        main([*args, flag, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    expected = ("expected comma-separated numbers, e.g. 1,1,1,1,2,2" if flag == "--epsilons" else
                "expected a whole number in ASCII digits, e.g. 12" if flag == "--queries" else
                "expected a number in ASCII digits, e.g. 0.5 or 1e-3")
    assert f"argument {flag}: {expected}; got {value!r}" in err
    assert [number(x) for x in ("0.5", "1e-3", "-2", ".5", "3.", "1E+2")] == [0.5, 1e-3, -2.0, 0.5, 3.0, 100.0]
    assert str(number("nan")) == "nan" and number("inf") == float("inf")  # refused later, with their own reason
    assert integer("12") == 12 and integer("-1") == -1


def test_workers_and_dask_address_are_exclusive(capsys):
    with pytest.raises(SystemExit) as info:
        main(["release", "--trips", "a", "--stops", "b", "--workers", "2", "--dask-address", "tcp://h:8786"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.flow
def test_negative_workers_are_refused_before_reading_anything(prefect_harness, tmp_path, capsys):
    rc = main(["release", "--trips", str(tmp_path / "nope.csv"), "--stops", str(tmp_path / "stops.csv"),
               "--home", str(tmp_path / "home"), "--workers", "-1"])
    assert rc == 2
    assert "the number of local Dask workers must be at least 0 (0: no cluster, the partitions are prepared and " \
           "sanitized in the flow's own process; got -1)" in capsys.readouterr().err


def test_version_and_every_command_has_a_description_an_example_and_help_for_every_option(capsys):
    from transit_release.cli.parser import EXAMPLES, build_parser
    from transit_release.version import code_version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"transit-release {code_version()}\n"
    parser = build_parser()
    assert "``" not in parser.description  # plain words, no reStructuredText
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert set(sub.choices) == set(EXAMPLES)
    for name, command in sub.choices.items():
        assert command.description and command.epilog == f"example: {EXAMPLES[name]}", name
        assert EXAMPLES[name].startswith(f"transit-release {name} "), name
        undocumented = [a.option_strings for a in command._actions if a.option_strings and not a.help]
        assert undocumented == [], (name, undocumented)


def test_a_mistyped_option_gets_the_commands_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["budget", "--home", ".", "--polcy", "x.yaml"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.splitlines()[-1] == "transit-release budget: error: unrecognized arguments: --polcy x.yaml"
    assert err.startswith("usage: transit-release budget ")


def test_verbose_shows_the_traceback_and_keeps_the_exit_code(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("policy: [", encoding="utf-8")
    argv = ["budget", "--home", str(tmp_path / "home"), "--policy", str(policy)]
    quiet = main(argv)
    quiet_err = capsys.readouterr().err
    loud = main(["--verbose", *argv])
    loud_err = capsys.readouterr().err
    assert quiet == loud == 2
    assert quiet_err.startswith("transit-release: error: ") and "Traceback" not in quiet_err
    assert "Traceback (most recent call last)" in loud_err and loud_err.endswith(quiet_err)


def test_a_budget_refusal_comes_before_the_input_is_read_and_says_what_would_fit(tiny_week, tmp_path, trip_policy):
    """The spends follow from public parameters: a release the policy refuses is refused before its records are read
    and before Prefect starts, with the same exit code with --verbose, naming the flag that would make it fit."""
    import time

    from transit_release.accounting.ledger import Ledger
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.config import load_release_config
    from transit_release.inputs.screening import parse_period
    from transit_release.releases import opal
    from tests.conftest import WEEK_FLAGS

    home = tmp_path / "home"
    home.mkdir()
    period, cfg = parse_period("2016-08-08", "2016-08-14"), load_release_config(None, "trip")
    events = opal.plan_spends(period, cfg, "first", "f" * 64, "0")  # a published week's trip-level spends
    Ledger(home / "ledger.sqlite").charge(events, check=load_budget_policy(trip_policy).check)
    trips = tmp_path / "trips.csv"  # its records cannot be read: only the header is ever looked at
    trips.write_text(Path(tiny_week["trips"]).read_text().splitlines()[0] + "\n" + "not,a,record\n" * 3)
    argv = ["release", "--trips", str(trips), "--stops", str(tiny_week["stops"]), *WEEK_FLAGS, "--unit", "trip",
            "--workers", "0", "--policy", trip_policy, "--home", str(home), "--release-id", "second"]
    for verbose in ([], ["--verbose"]):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "transit_release.cli", *verbose, *argv], capture_output=True,
                              text=True, timeout=300)
        elapsed = time.monotonic() - start
        assert done.returncode == 3, done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("transit-release: error: Cannot release '") and "without exceeding the budget" in line
        assert line.endswith("Nothing remains of this cap in its window: release another period, or later")
        assert ("Traceback" in done.stderr) == bool(verbose)
        assert not (home / ".prefect").exists() and not (home / "mlflow.db").exists()
        print(f"refused in {elapsed:.2f} s{' with --verbose' if verbose else ''}")
    assert len(Ledger(home / "ledger.sqlite").entries()) == len(events)


def test_a_cap_refusal_names_the_flag_and_the_amount_that_would_fit():
    from transit_release.cli.command import _what_would_fit
    from transit_release.errors import BudgetExceededError

    short_on_delta = BudgetExceededError("train 20160808", 8.0, 9.5, 7.5e-7, 2.5e-7)
    assert _what_would_fit("release", short_on_delta) == (
        ". It would fit asking δ ≤ 2.5e-07 of 'train 20160808': set --epsilons (their sum is a partition's ε) or "
        "--delta (each marginal's δ; 6 per partition)")
    assert _what_would_fit("sets", BudgetExceededError("2016-08-08..2016-08-14", 1.0, 0.5)) == (
        ". It would fit asking ε ≤ 0.500 of '2016-08-08..2016-08-14': set --epsilon (δ follows from ε and the "
        "mechanism's parameters)")
    assert _what_would_fit("audit", short_on_delta) == ""


def test_a_dry_runs_input_figures_are_plain_words():
    from transit_release.cli.printing import input_line

    assert input_line({"rows": 27312, "quarantined": 3, "quarantined_share": 3 / 27312,
                       "by_reason": {"unknown_stop": 2, "impossible_time": 1}}) == (
        "27,312 rows read; 3 set aside (0.01%): 1 impossible_time, 2 unknown_stop")
    assert input_line({"rows": 10, "quarantined": 0, "quarantined_share": 0.0, "by_reason": {}}) == \
        "10 rows read; none set aside"
    assert input_line({"empty_record": 4, "unknown_location": 0}) == "set aside: 4 empty_record"
    assert input_line({}) == "none set aside"
