"""The trajectory_release flow end to end (``transit-release trajectories``), under Prefect's test harness."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.open_data_checks import check_open_data
from transit_release.accounting.ledger import Ledger
from transit_release.cli import main

pytestmark = pytest.mark.flow

WEEK = ["--period-start", "2026-01-05", "--period-end", "2026-01-11"]  # Monday to Sunday
RID = "trajectories-markov-20260105-20260111"  # the default mechanism's
SAFEPATH_RID = "trajectories-safepath-20260105-20260111"


@pytest.fixture(scope="module")
def metro(tmp_path_factory):
    """20,000 synthetic metro trajectories of one week, the metro's taxonomy (station, group, line) and station list."""
    from transit_release.inputs.trajectories import write_trajectory_file
    from transit_release.synth.metro import build_metro
    from transit_release.synth.trajectories import metro_location_table, synthesize_metro_trajectories

    data = tmp_path_factory.mktemp("metro-week")
    trajs, _ = synthesize_metro_trajectories(20_000, seed=3)
    ids = tuple(str(i) for i in range(trajs.n_locations))
    write_trajectory_file(data / "trajectories.txt", [(t, 1) for t in trajs.to_lists()], ids,
                          header="synthetic metro week: station@hour of the week")
    metro_location_table(build_metro()).to_csv(data / "taxonomy.csv", index=False)
    (data / "locations.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    return data


def _args(metro, home, *extra):
    return ["trajectories", "--input", str(metro / "trajectories.txt"), "--location-taxonomy",
            str(metro / "taxonomy.csv"), "--epsilon", "1", "--height", "6", "--home", str(home), "--queries", "600",
            *WEEK, *extra]


def test_trajectories_command_publishes_charges_once_and_passes_the_audit(prefect_harness, metro, tmp_path, capsys,
                                                                          test_seed):
    """SafePath, the former default, by name; the same command without --mechanism (as it was written when SafePath
    was the default) finds that release already published under its former default id."""
    RID = SAFEPATH_RID  # noqa: N806
    home = tmp_path / "home"
    assert main(_args(metro, home, "--mechanism", "safepath")) == 0
    out = capsys.readouterr().out
    assert f"Release {RID}: published" in out
    assert "thresholds: location=" in out and "count_query.relative_error" not in out  # raw keys stay in MLflow
    for label in ("trajectories in: ", "trajectories released: ", "passengers whose exact trajectory is released: ",
                  "error of the 100 most frequent queries: points ", "privacy: ε = 1 per passenger's trajectory"):
        assert label in out, label
    rel = home / "private" / "test-releases" / RID  # made with the test seed: never under releases/
    assert not (home / "releases" / RID).exists()
    lines = [x for x in (rel / "trajectories.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(1 <= len(x.split()) <= 6 for x in lines)
    for line in lines:
        pairs = [tok.split("@") for tok in line.split()]
        hours = [int(h) for _, h in pairs]
        assert all(0 <= int(s) < 68 for s, _ in pairs) and hours == sorted(hours) and max(hours) < 168
    table = pd.read_csv(rel / "trajectories.csv", dtype={"trajectory": str})
    assert table["count"].sum() == len(lines) and table["trajectory"].is_unique
    assert list(table["trajectory"]) == sorted(table["trajectory"])
    manifest = json.loads((rel / "manifest.json").read_text())
    p = manifest["privacy"]
    assert manifest["kind"] == "trajectories" and manifest["scope"] == "2026-01-05..2026-01-11"
    assert manifest["universe"]["locations"] == 68 and manifest["universe"]["lines"] == 4
    assert manifest["hour_universe"]["hours"] == 168 and "Monday to Sunday" in manifest["period_rule"]
    assert p["mechanism_id"] == "safepath" and p["unit_of_privacy"] == "passenger-trajectory"
    assert p["epsilon"] == 1.0 and p["height"] == 6 and p["threshold_rule"] == "paper"
    assert p["location_taxonomy"]["height"] == 2 and p["location_taxonomy"]["source"] == "taxonomy file (groups, lines)"
    assert p["time_taxonomy"] | {"epsilon_per_step": None} == {
        "source": "fan-out 2", "height": 6, "fanout": 2, "nodes_per_depth": [3, 6, 11, 21, 42, 84],
        "epsilon_per_step": None, "thresholds": [34] * 6 + [17]}
    assert (p["time_rule"], p["release_form"]) == ("monotone", "terminating")
    assert p["cumulative_at_publication"] == {"epsilon": 1.0, "delta": p["delta"], "releases": 1}
    check_open_data(rel, home)  # a valid Data Package, listed in the manifest; nothing internal on its page
    card = (rel / "DATACARD.md").read_text()
    assert "hour of the week, 0 to 167 counted from Monday 00:00" in card
    assert "1-differential privacy for one **passenger's whole trajectory over the week**" in card
    report = (home / "release_reports" / RID / "report.html").read_text()
    assert "count queries of up to 1 point: error" in report and "frequent patterns found (of 100)" in report
    assert "count_query.relative_error" not in report and "In five figures" in report
    assert report.index("up to 1 point: error") < report.index("up to 2 points: error")
    for image in ("released_vs_true.png", "lengths.png", "error_by_query_size.png"):
        assert (home / "release_reports" / RID / image).exists(), image
    (spend,) = Ledger(home / "ledger.sqlite").spends()
    event = spend.event()
    assert event.kind == "safepath" and event.period == (pd.Timestamp("2026-01-05").date(),
                                                         pd.Timestamp("2026-01-11").date())
    assert (event.locations, event.hours, event.location_taxonomy_height, event.time_taxonomy_height) == (68, 168, 2, 6)
    assert event.delta == p["delta"] < 1e-12
    # publishing the same release again draws and spends nothing, and so does the former default's command
    assert main(_args(metro, home, "--mechanism", "safepath")) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out
    assert main(_args(metro, home)) == 0
    out = capsys.readouterr().out
    assert "already published: nothing drawn or spent" in out and f"Release {RID}:" in out
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1
    assert main(["audit", "--home", str(home), "--json"]) == 0
    audit_out = capsys.readouterr().out
    result = json.loads(audit_out[audit_out.index("{"):])
    assert result["ok"] and result["loss"]["passenger-trajectory"]["basic"]["epsilon"] == 1.0


def test_the_markov_mechanism_publishes_its_own_release_and_event(prefect_harness, metro, tmp_path, capsys,
                                                                    test_seed):
    home = tmp_path / "home"
    assert main(_args(metro, home, "--mechanism", "markov", "--queries", "300")) == 0
    out = capsys.readouterr().out
    rid = "trajectories-markov-20260105-20260111"
    assert f"Release {rid}: published" in out and "thresholds: day_threshold=" in out
    assert "error of the 100 most frequent queries: points " in out
    rel = home / "private" / "test-releases" / rid
    lines = [x for x in (rel / "trajectories.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(1 <= len(x.split()) <= 6 for x in lines)
    p = json.loads((rel / "manifest.json").read_text())["privacy"]
    assert p["mechanism_id"] == "trajectory-markov" and p["epsilon_days"] == 0.1 and p["max_gram"] == 3
    assert "drawn from the models" in (rel / "DATACARD.md").read_text()
    (spend,) = Ledger(home / "ledger.sqlite").spends()
    assert spend.event().kind == "trajectory_markov_parts" and spend.event().epsilon == 1.0
    assert spend.event().sensitivity == "days 1; stations 7; hours 7"  # each part's (#40)
    assert main([*_args(metro, home, "--mechanism", "markov", "--nmax", "3", "--queries", "300")]) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out
    assert main(_args(metro, home, "--mechanism", "markov", "--thresholds", "node")) == 2
    assert "--thresholds go(es) with SafePath's paper budget" in capsys.readouterr().err


def test_dry_run_cap_and_the_release_index(prefect_harness, metro, tmp_path, capsys):
    """A dry run writes and charges nothing; the default cap (ε ≤ 2 per week) refuses with exit 3; a published
    release (OS noise: under releases/) is listed in release_reports/index.html with its utility."""
    home = tmp_path / "home"
    assert main(_args(metro, home, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing charged, drawn or written" in out and "budget policy: allows it" in out
    assert "passenger-trajectory 2026-01-05..2026-01-11: ε=1" in out
    assert not (home / "releases").exists() or not any((home / "releases").iterdir())
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").spends() == []
    assert main([*_args(metro, home), "--epsilon", "3"]) == 3  # the later --epsilon wins
    assert "Cannot release '2026-01-05..2026-01-11' without exceeding the budget. Requested: ε=3.000; " \
           "remaining: ε=2.000" in capsys.readouterr().err
    assert main([*_args(metro, home), "--epsilon", "1.5", "--queries", "0"]) == 0
    index = (home / "release_reports" / "index.html").read_text()
    # the dashboard's row: the kind in words, the mechanism's name under it
    assert f'data-release-id="{RID}"' in index
    assert "<td>Passenger trajectories<br><span class=note>factored Markov model</span></td>" in index
    assert (home / "releases" / RID / "trajectories.txt").exists()
    assert main([*_args(metro, home), "--epsilon", "1", "--release-id", "again"]) == 3
    assert "remaining: ε=0.500" in capsys.readouterr().err


def test_refusals_before_prefect_name_what_is_wrong(prefect_harness, metro, tmp_path, capsys):
    """A missing universe, a week that is not Monday–Sunday and a taxonomy too tall for its universe (the ε_ng
    guard) are refused with exit 2 before anything starts: no home is created."""
    home = tmp_path / "h"
    traj = ["trajectories", "--input", str(metro / "trajectories.txt"), "--epsilon", "1", "--height", "6",
            "--home", str(home)]
    assert main([*traj, *WEEK]) == 2
    assert "give the public location universe: --locations FILE (one location id per line) or --location-taxonomy " \
           "FILE" in capsys.readouterr().err
    loc = ["--locations", str(metro / "locations.txt")]
    assert main([*traj, *loc, "--period-start", "2026-01-06", "--period-end", "2026-01-12"]) == 2
    assert "a trajectory release covers one calendar week, Monday to Sunday" in capsys.readouterr().err
    assert main([*traj, *loc, *WEEK, "--location-fanout", "2", "--location-taxonomy-height", "8"]) == 2
    err = capsys.readouterr().err
    assert "SafePath over locations file locations.txt (68 locations, location taxonomy of height 8)" in err
    assert "the location universe (|U| = 68) cannot carry a taxonomy of height H = 8" in err
    assert "Use a location taxonomy of height at most 7." in err
    assert main([*traj, *loc, *WEEK, "--time-taxonomy-height", "13"]) == 2
    assert "the time universe (|U| = 168) cannot carry a taxonomy of height H = 13" in capsys.readouterr().err
    assert not home.exists()


def test_trajectories_from_tap_data_have_the_stop_table_as_universe(prefect_harness, small_week, tmp_path, capsys,
                                                                    test_seed):
    """One trajectory per card over the declared week (hours of the week), the train stations as the universe."""
    home = tmp_path / "home"
    rc = main(["trajectories", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--mode",
               "train", "--epsilon", "2", "--height", "3", "--location-fanout", "2", "--location-taxonomy-height",
               "4", "--home", str(home), "--queries", "300", "--period-start", "2016-08-08", "--period-end",
               "2016-08-14", "--release-id", "taps"])
    assert rc == 0, capsys.readouterr().err
    rel = home / "private" / "test-releases" / "taps"
    manifest = json.loads((rel / "manifest.json").read_text())
    stops = pd.read_csv(small_week["stops"])
    names = set(stops.loc[stops["mode"] == "train", "name"].str.replace(r"\s+", "_", regex=True))
    assert manifest["universe"]["locations"] == len(names)
    assert manifest["universe"]["source"].startswith("stops file")
    lines = [x for x in (rel / "trajectories.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines, "the week's train taps released nothing"
    assert {tok.rpartition("@")[0] for x in lines for tok in x.split()} <= names
    assert all(0 <= int(tok.rpartition("@")[2]) < 168 for x in lines for tok in x.split())
    (spend,) = Ledger(home / "ledger.sqlite").spends()
    assert spend.event().kind == "safepath" and spend.event().period_start == "2016-08-08"


def test_the_weekly_scheduled_flow_publishes_the_week_of_its_input(prefect_harness, metro, tmp_path, test_seed):
    """The deployment's flow: the week holding ``week_of``, its file from the pattern, the public taxonomy."""
    import shutil

    from flows.scheduled import weekly_trajectory_release

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(metro / "trajectories.txt", inbox / "trajectories-2026-01-05.txt")
    home = tmp_path / "home"
    summary = weekly_trajectory_release(input_pattern=str(inbox / "trajectories-{start}.txt"), epsilon=1.0, height=4,
                                        location_taxonomy=str(metro / "taxonomy.csv"), home=str(home),
                                        week_of="2026-01-08")
    assert summary["status"] == "published" and summary["period"] == "2026-01-05 .. 2026-01-11"
    assert (home / "private" / "test-releases" / RID / "trajectories.txt").exists()
