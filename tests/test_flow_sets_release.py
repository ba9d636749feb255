"""The set_release flow (DiffPart over passengers' station sets) end to end, through the command."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from tests.open_data_checks import check_open_data
from transit_release.accounting.ledger import Ledger
from transit_release.cli import main
from transit_release.mechanisms.diffpart import DEFAULT_PHANTOMS_PER_LEAF_SPLIT, DEFAULT_PHANTOMS_PER_SPLIT, \
    c_for_phantoms

pytestmark = pytest.mark.flow

PERIOD = ["--period-start", "2026-01-01", "--period-end", "2026-01-31"]
RID = "sets-diffpart-20260101-20260131"


@pytest.fixture(scope="module")
def metro(tmp_path_factory):
    """The synthetic metro's passengers: ``sequences.txt`` read as sets (order and repeats are ignored)."""
    data = tmp_path_factory.mktemp("metro")
    assert main(["synth-metro", "--out", str(data), "--passengers", "20000", "--seed", "3"]) == 0
    return data


def _args(metro, home, *extra):
    return ["sets", "--input", str(metro / "sequences.txt"), "--locations", str(metro / "locations.txt"),
            "--home", str(home), "--queries", "500", *PERIOD, *extra]


def test_sets_command_publishes_charges_once_and_passes_the_audit(prefect_harness, metro, tmp_path, capsys,
                                                                  test_seed):
    home = tmp_path / "home"
    args = _args(metro, home, "--epsilon", "1", "--fanout", "6")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"Release {RID}: published" in out
    assert "(ε=1, δ=" in out and "per passenger-set (add or remove one passenger's whole set" in out
    rel = home / "private" / "test-releases" / RID  # made with the test seed: never under releases/
    assert not (home / "releases" / RID).exists()

    # sets.txt: one set a line, items distinct and sorted, all from the public universe; sets.csv counts them
    universe = [x for x in (metro / "locations.txt").read_text().splitlines() if x and not x.startswith("#")]
    lines = [x for x in (rel / "sets.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(x.split() == sorted(set(x.split())) and set(x.split()) <= set(universe) for x in lines)
    table = pd.read_csv(rel / "sets.csv", dtype={"set": str})
    assert list(table.columns) == ["set", "count"] and table["set"].is_unique
    assert dict(zip(table["set"], table["count"])) == dict(Counter(lines))

    manifest = json.loads((rel / "manifest.json").read_text())
    p = manifest["privacy"]
    assert manifest["kind"] == "sets" and manifest["scope"] == "2026-01-01..2026-01-31"
    assert manifest["noise_source"] == "test-seed" and manifest["universe"]["locations"] == 68
    assert p["unit_of_privacy"] == "passenger-set" and p["mechanism_id"] == "diffpart" and p["epsilon"] == 1.0
    assert p["fanout"] == 6 and p["taxonomy_height"] == 3  # 68 → 12 → 2 → 1
    assert p["fanout_rule"] == "given (--fanout)"
    assert p["c1"] == float(c_for_phantoms(6, DEFAULT_PHANTOMS_PER_LEAF_SPLIT))
    assert p["c2"] == float(c_for_phantoms(6, DEFAULT_PHANTOMS_PER_SPLIT))
    assert 0 < p["delta"] < 1e-12
    assert p["cumulative_at_publication"] == {"epsilon": 1.0, "delta": p["delta"], "releases": 1}
    assert set(manifest["files"]) == {"sets.txt", "sets.csv", "sets.parquet", "DATACARD.md", "uncertainty.csv",
                                      "datapackage.json", "index.html"}
    check_open_data(rel, home)  # a valid Data Package, listed in the manifest; nothing internal on its page
    assert not (rel.parent / "catalog.jsonld").exists()  # a test-seed release is never catalogued

    card = (rel / "DATACARD.md").read_text()
    for words in ("one set per line", "Rare sets are missing", "noisy counts",
                  "passenger's whole set of stations over the\nperiod", "Counting every release about population `default`",
                  "location ids of the public locations file", "never the stations found in the data"):
        assert words in card, words
    report = (home / "release_reports" / RID / "report.html").read_text()
    assert "count queries of up to 3 stations: error" in report and "frequent station sets found (of 10)" in report
    assert "count_query.relative_error" not in report and "In five figures" in report
    assert (home / "release_reports" / "index.html").exists()  # (test-seed releases are not listed in it)

    spends = Ledger(home / "ledger.sqlite").spends()
    assert len(spends) == 1 and spends[0].event().kind == "diffpart"
    assert spends[0].event().fanout == 6 and spends[0].event().universe_size == 68

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("transit-release").experiment_id],
                                filter_string=f"tags.release_id = '{RID}'")
    assert {k: run.data.tags[k] for k in ("kind", "mechanism", "unit_of_privacy", "period", "published")} == {
        "kind": "sets", "mechanism": "diffpart", "unit_of_privacy": "passenger-set",
        "period": "2026-01-01..2026-01-31", "published": "true"}
    for name in ("privacy.epsilon", "rows.released", "count_query.relative_error.max_q3", "itemsets.top10.tp",
                 "itemsets.top100.loss"):
        assert name in run.data.metrics, name

    # publishing the same release again draws and spends nothing
    assert main(args) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1
    assert main(["audit", "--home", str(home), "--json"]) == 0
    audit_out = capsys.readouterr().out
    result = json.loads(audit_out[audit_out.index("{"):])
    assert result["ok"] and result["loss"]["passenger-set"]["basic"]["epsilon"] == 1.0


def test_a_dry_run_writes_nothing_and_charges_nothing(prefect_harness, metro, tmp_path, capsys):
    home = tmp_path / "home"
    assert main(_args(metro, home, "--epsilon", "1", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert f"Release {RID}: dry run: nothing charged, drawn or written" in out
    assert "passenger-set 2026-01-01..2026-01-31: ε=1" in out and "budget policy: allows it" in out
    # atk39 #7: a dry run in a directory that is no home yet leaves no home behind (no ledger, key, .prefect/)
    assert not home.exists()
    home.mkdir()
    (home / "notes.txt").write_text("the custodian's own file\n")
    assert main(_args(metro, home, "--epsilon", "1", "--dry-run")) == 0
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


def test_the_default_cap_refuses_a_too_large_epsilon_and_releases_of_one_period_add_up(prefect_harness, metro,
                                                                                     tmp_path, capsys):
    home = tmp_path / "home"
    assert main(_args(metro, home, "--epsilon", "3", "--queries", "0")) == 3
    assert "Cannot release '2026-01-01..2026-01-31' without exceeding the budget. Requested: ε=3.000; " \
           "remaining: ε=2.000" in capsys.readouterr().err
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").spends() == []
    assert main(_args(metro, home, "--epsilon", "1.5", "--release-id", "jan-a")) == 0
    assert main(_args(metro, home, "--epsilon", "1", "--release-id", "jan-b")) == 3
    assert "remaining: ε=0.500" in capsys.readouterr().err
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1


def test_refusals_before_prefect_starts(metro, tmp_path, capsys, monkeypatch):
    """A missing universe, a wrong pairing of flags, an ε the samplers cannot honour: exit 2 from the command's
    checks (which run while its Prefect server starts, and stop it): no flow runs, nothing is left."""
    import flows.sets_release

    def no_flow(*a, **k):
        raise AssertionError("the flow ran")

    monkeypatch.setattr(flows.sets_release, "set_release", no_flow)
    home = tmp_path / "home"
    sets = ["sets", "--input", str(metro / "sequences.txt"), "--home", str(home), *PERIOD]
    assert main([*sets, "--epsilon", "1"]) == 2
    assert "give the public location universe: --locations FILE (one location id per line); the universe is " \
           "never read off the data" in capsys.readouterr().err
    assert main([*sets, "--epsilon", "1", "--locations", str(metro / "locations.txt"), "--mode", "train"]) == 2
    assert "--stops and --mode go with --trips" in capsys.readouterr().err
    assert main([*sets, "--epsilon", "1e-6", "--locations", str(metro / "locations.txt")]) == 2
    err = capsys.readouterr().err  # without --fanout: the rule's f = 6 for 68 stations, 15 internal nodes
    assert "DiffPart (fan-out 6, 68 items, the root's tests (scale 2·n(root)/ε)): ε = 1e-06 gives noise scale " \
           "3e+07, above the largest supported scale" in err
    assert main([*sets, "--epsilon", "1", "--locations", str(metro / "locations.txt"), "--fanout", "17"]) == 2
    assert "fan-out must be between 2 and 16. Found 17." in capsys.readouterr().err
    assert main(["sets", "--trips", str(metro / "sequences.txt"), "--epsilon", "1", "--home", str(home),
                 *PERIOD]) == 2
    assert "with --trips give --stops" in capsys.readouterr().err
    assert not home.exists()


def test_sets_from_tap_data_have_the_stop_tables_locations_as_universe(prefect_harness, small_week, tmp_path, capsys,
                                                                       test_seed):
    """One set per card over the declared week through the validation gate; the universe is every location of the
    stop table (all modes, mode:location, bus stops as postcodes), built before the trips are read."""
    from schemas import Stops, validate
    from transit_release.inputs.universe import from_stop_locations

    home = tmp_path / "home"
    rc = main(["sets", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--epsilon", "1",
               "--home", str(home), "--queries", "200", "--period-start", "2016-08-08", "--period-end",
               "2016-08-14", "--release-id", "taps"])
    assert rc == 0, capsys.readouterr().err
    rel = home / "private" / "test-releases" / "taps"
    manifest = json.loads((rel / "manifest.json").read_text())
    universe = from_stop_locations(validate(Stops, pd.read_csv(small_week["stops"]), "stops"))
    assert manifest["universe"]["locations"] == len(universe) and manifest["universe"]["sha256"] == universe.sha256
    assert manifest["universe"]["source"] == "stops file stops.csv (bus, ferry, lightrail, train locations, as " \
                                             "mode:location)"
    assert manifest["records"].startswith("one set per smart card")
    assert "mode-qualified locations mode:location of the stop table for every mode" in manifest["items"]
    assert "a bus stop counts as its postcode" in " ".join((rel / "DATACARD.md").read_text().split())
    lines = [x for x in (rel / "sets.txt").read_text().splitlines() if not x.startswith("#")]
    assert all(set(x.split()) <= set(universe.ids) for x in lines)
    spends = Ledger(home / "ledger.sqlite").spends()
    assert len(spends) == 1 and spends[0].event().period == (pd.Timestamp("2016-08-08").date(),
                                                             pd.Timestamp("2016-08-14").date())
    # atk40 m2: the same files and ε read for one mode are another release, never "already published"
    rc = main(["sets", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--epsilon", "1",
               "--home", str(home), "--queries", "200", "--period-start", "2016-08-08", "--period-end",
               "2016-08-14", "--release-id", "taps", "--mode", "bus", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert ("release 'taps' is already published from the same input files but over another universe (stops file "
            "stops.csv (bus, ferry, lightrail, train locations, as mode:location); this run's: stops file stops.csv "
            "(bus locations, as mode:location)); it is never overwritten: give this release its own --release-id; "
            "nothing was drawn or spent") in err
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1


def test_the_monthly_scheduled_flow_publishes_the_month_of_its_input(prefect_harness, metro, tmp_path, test_seed):
    """What the `monthly-sets` deployment runs: the month's file found by its pattern, the month as the period."""
    import shutil

    from flows.scheduled import monthly_set_release

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(metro / "sequences.txt", inbox / "sets-2026-01.txt")
    home = tmp_path / "home"
    result = monthly_set_release(input_pattern=str(inbox / "sets-{year}-{month}.txt"), epsilon=1.0,
                                 locations=str(metro / "locations.txt"), fanout=6, home=str(home),
                                 month_of="2026-01-20")
    assert result["status"] == "published" and result["release_id"] == RID
    assert result["period"] == "2026-01-01 .. 2026-01-31"
    with pytest.raises(Exception, match="sets-2026-02.txt"):
        monthly_set_release(input_pattern=str(inbox / "sets-{year}-{month}.txt"), epsilon=1.0,
                            locations=str(metro / "locations.txt"), home=str(home), month_of="2026-02-03")
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1


def test_a_run_refused_at_its_charge_leaves_another_runs_report_alone(prefect_harness, metro, tmp_path, capsys,
                                                                      monkeypatch):
    """Two runs of one id: the one that charged first owns the id and writes its report; the other, refused at
    its charge, removes nothing of it (it removed release_reports/<id> as a folder of its own). The other run
    charges between this one's precheck and its charge (simulated: no precheck)."""
    import flows.tail as flow_module
    from transit_release.accounting.events import StabilityHistogramEvent
    from transit_release.files.home import Home

    monkeypatch.setattr(flow_module, "precheck_budget", lambda *a, **k: None)

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge([StabilityHistogramEvent(  # the other run's charge, not yet published
        release_id=RID, mode="bus", date="20260101", marginal="tap_on_time", epsilon=1.0, delta=1e-7,
        threshold=34, noise_scale="2", sensitivity=1, unit_of_privacy="trip", neighbouring="replace-one",
        input_fingerprint="blake2b:" + "0" * 64, code_version="0")])
    theirs = home.reports / RID / "report.html"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("the other run's report")
    # holding the release's lock, the run knows the run that charged is not alive: refused before it reads
    assert main(_args(metro, home.root, "--epsilon", "1")) != 0
    assert f"release '{RID}' was charged by a run that ended without publishing it" in capsys.readouterr().err
    assert theirs.read_text() == "the other run's report"
    # a run that holds no lock (another machine's, an older version's) charging meanwhile: refused at the charge
    monkeypatch.setattr(flow_module, "refuse_a_dead_runs_charge", lambda *a, **k: None)
    assert main(_args(metro, home.root, "--epsilon", "1")) != 0
    assert "was already charged by another run" in capsys.readouterr().err
    assert theirs.read_text() == "the other run's report"


@pytest.fixture(scope="module")
def small_universe(tmp_path_factory):
    """20,000 heavy-tailed sets over 17 stations (a universe the rule gives the set histogram) and its list."""
    from transit_release.synth.sets import heavy_tailed_sets

    data = tmp_path_factory.mktemp("small-universe")
    ids = [f"c{i:02d}" for i in range(17)]
    (data / "locations.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    sets = heavy_tailed_sets(20_000, seed=7)
    (data / "sets.txt").write_text("".join(" ".join(ids[i] for i in s) + "\n" for s in sets.to_lists()),
                                   encoding="utf-8")
    return data


def test_the_set_histogram_is_the_default_on_a_small_universe_and_the_former_default_stays_published(
        prefect_harness, small_universe, tmp_path, capsys, test_seed):
    """DiffPart by name (the former default's release, id and all); the same command without --mechanism finds it
    already published; a new month gets the set histogram, whose public files say how it was made."""
    home = tmp_path / "home"
    base = ["sets", "--input", str(small_universe / "sets.txt"), "--locations", str(small_universe / "locations.txt"),
            "--home", str(home), "--queries", "300", "--epsilon", "1"]
    assert main([*base, *PERIOD, "--mechanism", "diffpart"]) == 0
    assert f"Release {RID}: published" in capsys.readouterr().out
    assert main([*base, *PERIOD]) == 0
    out = capsys.readouterr().out
    assert f"Release {RID}: already published: nothing drawn or spent" in out
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1
    rid = "sets-histogram-20260201-20260228"
    # February's own file (January's, released for February, is refused: its records carry no dates, atk39 #5)
    january = (small_universe / "sets.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, x in enumerate(january) if x.strip() and not x.startswith("#"))
    february = tmp_path / "february.txt"
    february.write_text("".join(january[:first] + january[first + 1:]), encoding="utf-8")
    feb = [*base, "--period-start", "2026-02-01", "--period-end", "2026-02-28"]
    assert main(feb) == 3
    assert (f"release '{rid}' for 2026-02-01..2026-02-28 reads the same sets file content as release '{RID}' read "
            "for 2026-01-01..2026-01-31") in capsys.readouterr().err
    feb[feb.index(str(small_universe / "sets.txt"))] = str(february)
    assert main(feb) == 0
    assert f"Release {rid}: published" in capsys.readouterr().out
    rel = home / "private" / "test-releases" / rid
    p = json.loads((rel / "manifest.json").read_text())["privacy"]
    assert p["mechanism_id"] == "set-histogram" and (p["cells"], p["head_threshold"], p["rake_order"]) == \
        (131_071, 12, 3)
    assert p["mechanism_rule"].startswith("the set histogram where 2^|I| ≤ 2^20·ε²")
    assert "fanout" not in p and "c1" not in p
    (spend,) = [s for s in Ledger(home / "ledger.sqlite").spends() if s.release_id == rid]
    assert spend.event().kind == "set_histogram" and spend.event().unit_of_privacy == "passenger-set"
    card = " ".join((rel / "DATACARD.md").read_text().split())
    assert "Every possible set of stations of the public list (all 131,071 of them" in card
    uncertainty = pd.read_csv(rel / "uncertainty.csv")
    assert list(uncertainty["threshold"]) == [12] and "no stated coverage" in uncertainty["interval"][0]
    lines = [x for x in (rel / "sets.txt").read_text().splitlines() if not x.startswith("#")]
    assert abs(len(lines) - 20_000) < 2_000
    check_open_data(rel, home)


def _small_sets(tmp_path):
    """200 passengers over 8 stations (the histogram's universe): a cheap release."""
    locations = tmp_path / "loc8.txt"
    locations.write_text("".join(f"S{i}\n" for i in range(8)))
    lines = [" ".join(f"S{j}" for j in range(8) if (i * 7 + j * 3) % (j + 2) == 0) or "S0" for i in range(200)]
    sets_file = tmp_path / "sets8.txt"
    sets_file.write_text("\n".join(lines) + "\n")
    return sets_file, locations


@pytest.mark.parametrize("how", ["fails", "runs out of time"])
def test_a_failed_or_timed_out_evaluation_never_withholds_a_charged_release(prefect_harness, tmp_path, capsys,
                                                                           caplog, monkeypatch, test_seed, how):
    """atk40 C1: the utility evaluation runs after the charge on the raw records; its failure (a MemoryError on one
    passenger's large set) or its timeout publishes the release with the evaluation marked as not computed, said
    in the summary, the report and MLflow, and never the error's message."""
    import time

    from transit_release.releases import sets as set_release_module

    def broken(*args, **kwargs):
        raise MemoryError("S3 S5 S7 held by card 10004858")  # a message that quotes the data

    def endless(*args, **kwargs):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise AssertionError("the evaluation was not stopped")

    monkeypatch.setattr(set_release_module, "evaluate", broken if how == "fails" else endless)
    monkeypatch.setenv("TRANSIT_RELEASE_EVALUATION_TIMEOUT", "2")
    sets_file, locations = _small_sets(tmp_path)
    home = tmp_path / "home"
    rid = "sets-eval-" + how.split()[0]
    assert main(["sets", "--input", str(sets_file), "--locations", str(locations), "--home", str(home),
                 "--epsilon", "1", "--release-id", rid, *PERIOD]) == 0
    out = capsys.readouterr().out
    reason = ("it failed (MemoryError)" if how == "fails"
              else "it did not finish within 2 s (TRANSIT_RELEASE_EVALUATION_TIMEOUT)")
    assert f"Release {rid}: published" in out
    assert f"utility evaluation not computed: {reason}; the release is published" in out
    assert "10004858" not in out and "S3 S5 S7" not in out
    assert "10004858" not in caplog.text and "S3 S5 S7" not in caplog.text  # Prefect's states and logs
    assert (home / "private" / "test-releases" / rid / "sets.csv").exists()
    report = (home / "release_reports" / rid / "report.html").read_text()
    assert f"Utility evaluation not computed</b>: {reason}." in report and "10004858" not in report
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
    (run,) = [r for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
              if r.data.tags.get("utility_evaluation")]
    assert run.data.tags["utility_evaluation"] == f"not computed: {reason}"
