"""The sequence_release flow end to end, under Prefect's test harness."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.open_data_checks import check_open_data
from transit_release.accounting.ledger import Ledger
from transit_release.cli import main

pytestmark = pytest.mark.flow

PERIOD = ["--period-start", "2026-01-01", "--period-end", "2026-01-31"]


@pytest.fixture(scope="module")
def metro(tmp_path_factory):
    data = tmp_path_factory.mktemp("metro")
    assert main(["synth-metro", "--out", str(data), "--passengers", "30000", "--seed", "3"]) == 0
    return data


def assert_republished_without_a_spend_and_audited(args: list[str], home, capsys) -> None:
    """The same command again draws and spends nothing; the audit passes with the one spend of ε = 1."""
    assert main(args) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1
    assert main(["audit", "--home", str(home), "--json"]) == 0
    audit_out = capsys.readouterr().out
    result = json.loads(audit_out[audit_out.index("{"):])
    assert result["ok"] and result["loss"]["passenger-sequence"]["basic"]["epsilon"] == 1.0


def test_sequences_command_publishes_charges_once_and_passes_the_audit(prefect_harness, metro, tmp_path, capsys,
                                                                       test_seed):
    home = tmp_path / "home"
    args = ["sequences", "--input", str(metro / "sequences.txt"), "--epsilon", "1", "--height", "6",
            "--taxonomy", str(metro / "taxonomy.csv"), "--home", str(home), "--queries", "400", *PERIOD]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Release sequences-prefix-tree-20260101-20260131: published" in out
    # made with the test seed: kept privately, never under releases/
    rel = home / "private" / "test-releases" / "sequences-prefix-tree-20260101-20260131"
    assert not (home / "releases" / rel.name).exists()
    lines = [x for x in (rel / "sequences.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(1 <= len(x.split()) <= 6 for x in lines)
    table = pd.read_csv(rel / "sequences.csv", dtype={"sequence": str})
    assert table["count"].sum() == len(lines) and table["sequence"].is_unique
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["privacy"]["unit_of_privacy"] == "passenger-sequence"
    assert manifest["noise_source"] == "test-seed" and manifest["scope"] == "2026-01-01..2026-01-31"
    assert manifest["universe"]["locations"] == 68
    assert manifest["privacy"]["cumulative_at_publication"] == {"epsilon": 1.0, "delta": manifest["privacy"]["delta"],
                                                                "releases": 1}
    assert (home / "release_reports" / rel.name / "report.html").exists()
    check_open_data(rel, home)  # a valid Data Package, listed in the manifest; nothing internal on its page
    spends = Ledger(home / "ledger.sqlite").spends()
    assert len(spends) == 1 and spends[0].event().kind == "prefix_tree"
    assert_republished_without_a_spend_and_audited(args, home, capsys)


def test_sequence_releases_are_capped_and_compose_by_period(prefect_harness, metro, tmp_path, capsys, test_seed):
    """The finding: two ε = 50 releases of one file were both accepted. Now every unit has a cap (ε ≤ 2 per period
    by default) and releases of one period add up, while a disjoint period is a fresh budget."""
    home = tmp_path / "home"
    base = ["sequences", "--input", str(metro / "sequences.txt"), "--height", "3", "--taxonomy",
            str(metro / "taxonomy.csv"), "--home", str(home), "--queries", "0"]
    assert main([*base, "--epsilon", "50", *PERIOD]) == 3
    assert "Cannot release '2026-01-01..2026-01-31' without exceeding the budget. Requested: ε=50.000; " \
           "remaining: ε=2.000" in capsys.readouterr().err
    assert main([*base, "--epsilon", "1.5", *PERIOD, "--release-id", "jan-a"]) == 0
    assert main([*base, "--epsilon", "1", *PERIOD, "--release-id", "jan-b"]) == 3
    assert "remaining: ε=0.500" in capsys.readouterr().err
    # each period its own file: January's released for another period is refused (no dates in it, atk39 #5)
    january = [x for x in (metro / "sequences.txt").read_text(encoding="utf-8").splitlines(keepends=True)
               if not x.startswith("#")]

    def own_file(name: str, drop: int) -> list[str]:
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(january[drop:]), encoding="utf-8")  # other records: another period's export
        return [str(path) if x == str(metro / "sequences.txt") else x for x in base]

    assert main([*base, "--epsilon", "1.5", "--period-start", "2026-02-01", "--period-end", "2026-02-28",
                 "--release-id", "feb"]) == 3
    assert ("release 'feb' for 2026-02-01..2026-02-28 reads the same sequences file content as release 'jan-a' read "
            "for 2026-01-01..2026-01-31") in capsys.readouterr().err
    assert main([*own_file("feb", 1), "--epsilon", "1.5", "--period-start", "2026-02-01", "--period-end",
                 "2026-02-28", "--release-id", "feb"]) == 0
    assert main([*own_file("overlap", 2), "--epsilon", "0.5", "--period-start", "2026-01-20", "--period-end",
                 "2026-02-10", "--release-id", "overlap"]) == 0
    capsys.readouterr()
    assert main(["budget", "--home", str(home), "--json"]) == 0
    status = {s["scope"]: s for s in json.loads(capsys.readouterr().out) if s["unit_of_privacy"] ==
              "passenger-sequence"}
    assert status["2026-01-01..2026-01-31"]["used_epsilon"] == 2.0  # 1.5 + 0.5 on the overlapping days
    assert status["2026-02-01..2026-02-28"]["used_epsilon"] == 2.0


def test_the_universe_is_required_and_public(prefect_harness, tmp_path, capsys):
    f = tmp_path / "s.txt"
    f.write_text("1 2 3\n2 3\n")
    rc = main(["sequences", "--input", str(f), "--epsilon", "1", "--height", "3", "--home", str(tmp_path / "h"),
               *PERIOD])
    assert rc == 2
    assert "give the public location universe: --locations FILE" in capsys.readouterr().err
    loc = tmp_path / "loc.txt"
    loc.write_text("1\n2\n3\n")
    rc = main(["sequences", "--input", str(f), "--locations", str(loc), "--epsilon", "1", "--height", "3",
               "--home", str(tmp_path / "h"), *PERIOD])
    assert rc == 2
    assert "the hybrid variant needs exactly one of a taxonomy file (--taxonomy, whose groups are used) or " \
           "--fanout F" in capsys.readouterr().err
    assert not (tmp_path / "h" / "releases").exists() or not list((tmp_path / "h" / "releases").iterdir())


def test_a_tree_too_large_to_build_is_refused_before_any_spend(prefect_harness, tmp_path, capsys):
    f = tmp_path / "s.txt"
    f.write_text("\n".join(" ".join(str(x) for x in range(i, i + 3)) for i in range(0, 940, 3)) + "\n")
    loc = tmp_path / "loc.txt"
    loc.write_text("\n".join(str(i) for i in range(944)) + "\n")
    home = tmp_path / "h"
    rc = main(["sequences", "--input", str(f), "--locations", str(loc), "--epsilon", "1", "--height", "12",
               "--variant", "simple", "--home", str(home), *PERIOD])
    assert rc == 2
    assert "would grow about" in capsys.readouterr().err
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").spends() == []


def test_sequences_from_tap_data_have_the_stop_table_as_universe(prefect_harness, small_week, tmp_path, capsys,
                                                                 test_seed):
    """One sequence per card over the declared week, the train stations of the stop table as the universe."""
    home = tmp_path / "home"
    rc = main(["sequences", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--mode",
               "train", "--epsilon", "1", "--height", "4", "--fanout", "4", "--home", str(home), "--queries", "200",
               "--period-start", "2016-08-08", "--period-end", "2016-08-14", "--release-id", "taps"])
    assert rc == 0, capsys.readouterr().err
    manifest = json.loads((home / "private" / "test-releases" / "taps" / "manifest.json").read_text())
    stops = pd.read_csv(small_week["stops"])
    assert manifest["universe"]["locations"] == stops.loc[stops["mode"] == "train", "name"].nunique()
    assert manifest["universe"]["source"].startswith("stops file")


# ---- the n-gram mechanism -------------------------------------------------------------------------------------

NGRAM_ID = "sequences-ngram-20260101-20260131"


def gram_key(gram: str, ids: list[str]) -> tuple:
    """The published order: station by station in the universe's (sorted) order, the end marker first."""
    return tuple(-1 if x == "&" else ids.index(x) for x in gram.split(" "))


def test_ngram_command_publishes_grams_and_synthetic_sequences_charges_once_and_passes_the_audit(
        prefect_harness, metro, tmp_path, capsys, test_seed):
    from mlflow.tracking import MlflowClient

    from transit_release.files.home import Home

    home = tmp_path / "home"
    args = ["sequences", "--mechanism", "ngram", "--input", str(metro / "sequences.txt"), "--epsilon", "1",
            "--taxonomy", str(metro / "taxonomy.csv"), "--lmax", "12", "--nmax", "4", "--home", str(home),
            "--queries", "400", *PERIOD]
    # a dry run first: it shows the one spend and the verdict, and writes, charges and draws nothing
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing charged, drawn or written" in out and NGRAM_ID in out
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").spends() == []
    assert not (home / "private" / "test-releases" / NGRAM_ID).exists() and not (home / "releases" / NGRAM_ID).exists()

    assert main(args) == 0
    assert f"Release {NGRAM_ID}: published" in capsys.readouterr().out
    rel = home / "private" / "test-releases" / NGRAM_ID
    ids = sorted(pd.read_csv(metro / "taxonomy.csv", dtype=str)["location"])
    grams = pd.read_csv(rel / "ngrams.csv", dtype={"gram": str}, keep_default_na=False)
    assert list(grams.columns) == ["gram", "count"] and len(grams) > 68
    keys = [gram_key(g, ids) for g in grams["gram"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(1 <= len(k) <= 4 and -1 not in k[:-1] and k[0] != -1 for k in keys)  # '&' only last, never alone
    assert (grams["count"] > 0).all() and (grams["count"].round(2) == grams["count"]).all()
    assert pd.read_parquet(rel / "ngrams.parquet").equals(grams)
    lines = [x for x in (rel / "sequences.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(1 <= len(x.split()) <= 12 for x in lines)
    table = pd.read_csv(rel / "sequences.csv", dtype={"sequence": str})
    assert table["count"].sum() == len(lines) and table["sequence"].is_unique

    manifest = json.loads((rel / "manifest.json").read_text())
    p = manifest["privacy"]
    assert (p["mechanism_id"], p["max_length"], p["max_gram"], p["end_marker"], p["epsilon"]) == \
        ("ngram", 12, 4, "&", 1.0)
    assert p["node_budgets"][0]["threshold"] >= p["node_budgets"][-1]["threshold"] > 0
    assert manifest["scope"] == "2026-01-01..2026-01-31" and manifest["universe"]["locations"] == 68
    assert {"ngrams.csv", "ngrams.parquet", "sequences.csv", "sequences.parquet", "sequences.txt"} <= \
        set(manifest["files"])
    check_open_data(rel, home)
    card = (rel / "DATACARD.md").read_text()
    assert "`ngrams.csv`" in card and "cut to their first 12" in card and "not the number of passengers" in card
    assert (home / "release_reports" / NGRAM_ID / "report.html").exists()

    spends = Ledger(home / "ledger.sqlite").spends()
    assert len(spends) == 1
    event = spends[0].event()
    assert (event.kind, event.period_start, event.period_end, event.max_length, event.max_gram, event.n_locations) \
        == ("ngram", "2026-01-01", "2026-01-31", 12, 4, 68)
    assert event.delta == p["delta"] > 0

    client = MlflowClient(tracking_uri=Home(home).mlflow_uri)
    exp = client.get_experiment_by_name("transit-release")
    (run,) = client.search_runs([exp.experiment_id], filter_string=f"tags.release_id = '{NGRAM_ID}'")
    assert run.data.tags["mechanism"] == "ngram" and run.data.params["lmax"] == "12"
    names = set(run.data.metrics)
    for prefix in ("count_query.relative_error.max_q", "patterns.top", "gram_query.relative_error.max_q",
                   "grams.top"):
        assert any(n.startswith(prefix) for n in names), prefix

    assert_republished_without_a_spend_and_audited(args, home, capsys)
    # the other mechanism on the same period is another release, and the period's cap counts both
    assert main(["sequences", "--input", str(metro / "sequences.txt"), "--epsilon", "1.5", "--height", "3",
                 "--taxonomy", str(metro / "taxonomy.csv"), "--home", str(home), "--queries", "0", *PERIOD]) == 3
    assert "remaining: ε=1.000" in capsys.readouterr().err


def test_ngram_flags_are_checked_before_prefect(tmp_path, capsys, metro):
    base = ["sequences", "--input", str(metro / "sequences.txt"), "--taxonomy", str(metro / "taxonomy.csv"),
            "--home", str(tmp_path / "h"), "--epsilon", "1", *PERIOD]
    assert main([*base, "--mechanism", "ngram", "--height", "6"]) == 2
    assert "--height: prefix-tree parameter(s); the n-gram sanitizer takes --lmax" in capsys.readouterr().err
    assert main([*base, "--height", "6", "--nmax", "3"]) == 2
    assert "--nmax: n-gram parameter(s)" in capsys.readouterr().err
    assert main([*base, "--mechanism", "ngram", "--epsilon", "0.0001"]) == 2
    assert "n-gram sanitizer" in capsys.readouterr().err
    assert not (tmp_path / "h" / ".prefect").exists()


def test_ngram_sequences_from_tap_data(prefect_harness, small_week, tmp_path, capsys, test_seed):
    home = tmp_path / "home"
    rc = main(["sequences", "--mechanism", "ngram", "--trips", str(small_week["trips"]), "--stops",
               str(small_week["stops"]), "--mode", "train", "--epsilon", "1", "--lmax", "6", "--nmax", "3",
               "--home", str(home), "--queries", "0", "--period-start", "2016-08-08", "--period-end", "2016-08-14"])
    assert rc == 0, capsys.readouterr().err
    rel = home / "private" / "test-releases" / "sequences-ngram-20160808-20160814"
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["privacy"]["mechanism_id"] == "ngram" and manifest["universe"]["source"].startswith("stops file")
    assert (rel / "ngrams.csv").exists()


def test_the_monthly_deployment_chooses_the_mechanism(prefect_harness, metro, tmp_path, test_seed):
    """prefect.yaml lists both mechanisms' parameters; the scheduled flow passes on only the chosen one's."""
    import inspect

    import yaml

    from flows.deployments import PROJECT
    from flows.scheduled import monthly_sequence_release

    spec = yaml.safe_load((PROJECT / "prefect.yaml").read_text())
    (monthly,) = [d for d in spec["deployments"] if d["name"] == "monthly"]
    params = monthly["parameters"]
    assert params["mechanism"] == "ngram" and {"lmax", "nmax"} <= set(params)  # the recommended mechanism
    inspect.signature(monthly_sequence_release.fn).bind(**params)  # every listed parameter is the flow's
    head = (metro / "sequences.txt").read_text().splitlines(keepends=True)[:3000]  # small: the flow's default
    (tmp_path / "seq-2026-01.txt").write_text("".join(head))                    # workload has 40,000 queries
    summary = monthly_sequence_release(
        input_pattern=str(tmp_path / "seq-{year}-{month}.txt"), epsilon=1.0, mechanism="ngram", height=12,
        variant="hybrid", lmax=8, nmax=3, taxonomy=str(metro / "taxonomy.csv"), home=str(tmp_path / "home"),
        month_of="2026-01-15")
    assert summary["release_id"] == NGRAM_ID
    manifest = json.loads((tmp_path / "home" / "private" / "test-releases" / NGRAM_ID / "manifest.json").read_text())
    assert (manifest["privacy"]["max_length"], manifest["privacy"]["max_gram"]) == (8, 3)
