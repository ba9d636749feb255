"""#40's escapes, as an operator would try them: the same people released under another population are refused
(exit 3, nothing charged, one line naming the earlier release, never a card id), however the input is copied;
the same taps under the same population compose as before; an undeclared population is refused before anything
is read (exit 2)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from tests.conftest import WEEK_FLAGS
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import default_policy_path
from transit_release.cli import EXIT_BUDGET, EXIT_INPUT, main

pytestmark = pytest.mark.flow

POPULATIONS = [{"name": "default", "covers": "every card of the agency's network"},
               {"name": "riders-d", "covers": "a test population of other riders"},
               {"name": "riders-e", "covers": "another test population of other riders"}]


@pytest.fixture(scope="module")
def declaring_policy(tmp_path_factory):
    data = yaml.safe_load(default_policy_path().read_text(encoding="utf-8"))
    data["policy"]["populations"] = POPULATIONS
    data["policy"]["allow_unbounded_person_loss"] = True  # the trip-level escape is refused by the overlap itself
    path = tmp_path_factory.mktemp("policy") / "populations.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def _spends(home) -> dict[str, str]:
    """Release id → population of every release the ledger charged."""
    return {e.release_id: e.event().population for e in Ledger(home / "ledger.sqlite").entries()
            if e.entry_type == "spend"}


def _refused(capsys, argv, earlier: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_BUDGET, err
    line = err.strip()
    assert len(line.splitlines()) == 1 and "nothing was charged" in line, line
    assert f"release '{earlier}' read " in line or f"release '{earlier}' was made from the same input files" in line
    return line


def test_the_escapes_of_the_review_are_refused_and_the_same_population_composes(prefect_harness, tiny_week, tmp_path,
                                                                                declaring_policy, capsys):
    home = tmp_path / "home"
    trips, stops = tiny_week["trips"], tiny_week["stops"]
    flags = ["--home", str(home), "--policy", declaring_policy, *WEEK_FLAGS]
    # copies an operator could make: the stop table with one more newline and with its rows reordered, the trips
    # file with its rows reordered
    stops_newline = tmp_path / "stops-copy.csv"
    stops_newline.write_bytes(stops.read_bytes() + b"\n")
    stops_table = pd.read_csv(stops, dtype=str, keep_default_na=False)
    stops_reordered = tmp_path / "stops-reordered.csv"
    stops_table.iloc[::-1].to_csv(stops_reordered, index=False)
    trips_reordered = tmp_path / "trips-reordered.csv"
    pd.read_csv(trips, dtype=str, keep_default_na=False).sample(frac=1.0, random_state=1).to_csv(trips_reordered,
                                                                                                  index=False)
    # a card-level release about the default population
    assert main(["release", "--trips", str(trips), "--stops", str(stops), "--workers", "0", *flags]) == 0
    capsys.readouterr()
    before = _spends(home)
    # the same release again under another (declared) population: already published, the population ignored, said
    assert main(["release", "--trips", str(trips), "--stops", str(stops), "--workers", "0", "--population",
                 "riders-d", *flags]) == 0
    out = capsys.readouterr().out
    assert "Release opal-card-20160808-20160814: already published: nothing drawn or spent" in out
    assert ("  warning: --population riders-d was ignored: release 'opal-card-20160808-20160814' is already "
            "published, about population 'default'") in out
    card_ids = set(pd.read_csv(trips, usecols=["card_id"])["card_id"].astype(str))
    # 1. station sets of the same trips, the stop table copied with one trailing newline, under another population
    line = _refused(capsys, ["sets", "--trips", str(trips), "--stops", str(stops_newline), "--epsilon", "1",
                             "--queries", "100", "--population", "riders-d", *flags], "opal-card-20160808-20160814")
    assert "the same trips (its clean rows, in any order)" in line and "cards" in line
    assert not any(f" {c} " in f" {line} " for c in card_ids)  # never a card id
    # 2. a trip-level release of the same trips (the stop table's rows reordered) under a third population; with
    #    the very same files the ledger's own fingerprint of the files refuses it too (test_person_loss)
    _refused(capsys, ["release", "--trips", str(trips), "--stops", str(stops_reordered), "--unit", "trip",
                      "--workers", "0", "--population", "riders-e", *flags], "opal-card-20160808-20160814")
    # 3. the trips file's rows reordered, under another population
    _refused(capsys, ["release", "--trips", str(trips_reordered), "--stops", str(stops), "--workers", "0",
                      "--release-id", "reordered", "--population", "riders-d", *flags], "opal-card-20160808-20160814")
    # 4. (atk40 M1) the stop ids relabelled in both the stop table and the trips, and the card ids renumbered:
    #    the same trips, whose stops count as their public locations, under another population
    relabel = lambda ids: ids.map(lambda x: str(int(x) + 1_000_000) if x else x)  # noqa: E731
    stops_relabelled = tmp_path / "stops-relabelled.csv"
    stops_table.assign(stop_id=relabel(stops_table["stop_id"])).to_csv(stops_relabelled, index=False)
    table = pd.read_csv(trips, dtype=str, keep_default_na=False)
    cards = {c: str(50_000_000 + i) for i, c in enumerate(sorted(set(table["card_id"]), reverse=True))}
    trips_relabelled = tmp_path / "trips-relabelled.csv"
    table.assign(card_id=table["card_id"].map(cards), tap_on_stop=relabel(table["tap_on_stop"]),
                 tap_off_stop=relabel(table["tap_off_stop"])).to_csv(trips_relabelled, index=False)
    line = _refused(capsys, ["sets", "--trips", str(trips_relabelled), "--stops", str(stops_relabelled),
                             "--epsilon", "1", "--queries", "100", "--release-id", "escape-stops-cards",
                             "--population", "riders-d", *flags], "opal-card-20160808-20160814")
    assert "release 'opal-card-20160808-20160814' read the same trips (its clean rows, in any order);" in line
    assert _spends(home) == before  # nothing charged
    assert not (home / "releases" / "reordered").exists()
    # the same taps under the same population compose, as before
    assert main(["sets", "--trips", str(trips_reordered), "--stops", str(stops_newline), "--epsilon", "1",
                 "--queries", "100", *flags]) == 0
    out = capsys.readouterr().out
    assert "a passenger of population 'default' at publication: ε=9" in out
    assert set(_spends(home).values()) == {"default"}
    # the audit lists every population with the first release that named it
    assert main(["audit", "--home", str(home), "--policy", declaring_policy]) == 0
    out = capsys.readouterr().out
    assert ("  default: every card of the agency's network; first named by opal-card-20160808-20160814, "
            "2 release(s)") in out
    assert "  riders-d: a test population of other riders; no release yet, 0 release(s)" in out


def test_an_id_less_record_file_copied_under_another_population_is_refused(prefect_harness, tmp_path,
                                                                          declaring_policy, capsys):
    home = tmp_path / "home"
    assert main(["synth-metro", "--out", str(tmp_path / "metro"), "--passengers", "2000"]) == 0
    metro = {"sequences": tmp_path / "metro" / "sequences.txt", "locations": tmp_path / "metro" / "locations.txt"}
    seqs = metro["sequences"].read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / "copy.txt"
    copy.write_text("# a comment the copy adds\n" + "".join(reversed(seqs)).rstrip("\n"), encoding="utf-8")
    common = ["sequences", "--locations", str(metro["locations"]), "--epsilon", "0.5", "--mechanism", "ngram",
              "--queries", "100", "--home", str(home), "--policy", declaring_policy, *WEEK_FLAGS]
    assert main([*common, "--input", str(metro["sequences"])]) == 0
    capsys.readouterr()
    # the dry run says so too (exit 3, as a dry run the policy refuses), and writes nothing
    assert main([*common, "--input", str(copy), "--release-id", "copy", "--population", "riders-d", "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert ("  budget policy: REFUSES it: release 'copy' of population 'riders-d' reads records of people already "
            "released under population 'default': release 'sequences-ngram-20160808-20160814' read the same "
            "sequences file content") in out
    line = _refused(capsys, [*common, "--input", str(copy), "--release-id", "copy", "--population", "riders-d"],
                    "sequences-ngram-20160808-20160814")
    assert "the same sequences file content" in line
    # atk40 N1: the same file as station sets, over a locations file with one unused station more; N2: the same
    # file over a locations file without its rarest station (the line using it set aside, within the limit)
    stations = metro["locations"].read_text(encoding="utf-8").splitlines()
    extra = tmp_path / "locations-extra.txt"
    extra.write_text("\n".join([*stations, "unused-station"]) + "\n", encoding="utf-8")
    used = pd.Series([t for x in seqs if not x.startswith("#") for t in x.split()]).value_counts()
    narrow = tmp_path / "locations-narrow.txt"
    narrow.write_text("\n".join(s for s in stations if s != used.index[-1]) + "\n", encoding="utf-8")
    same_lines = ("release 'sequences-ngram-20160808-20160814' read the same record lines (each line's location "
                  "ids, in any order, whichever kind read them);")
    sets = ["sets", "--input", str(metro["sequences"]), "--epsilon", "1", "--queries", "100", "--home", str(home),
            "--policy", declaring_policy, "--population", "riders-d", *WEEK_FLAGS]
    assert same_lines in _refused(capsys, [*sets, "--locations", str(extra)], "sequences-ngram-20160808-20160814")
    assert same_lines in _refused(capsys, [*common[:2], str(narrow), *common[3:], "--input", str(metro["sequences"]),
                                           "--release-id", "narrower", "--population", "riders-d"],
                                  "sequences-ngram-20160808-20160814")
    assert list(_spends(home)) == ["sequences-ngram-20160808-20160814"]


def test_an_undeclared_population_is_refused_before_anything_is_read(tmp_path, capsys):
    home = tmp_path / "home"
    for argv in (["release", "--trips", str(tmp_path / "missing.csv"), "--stops", str(tmp_path / "missing.csv"),
                  *WEEK_FLAGS],
                 ["sets", "--input", str(tmp_path / "missing.txt"), "--locations", str(tmp_path / "missing.txt"),
                  "--epsilon", "1", *WEEK_FLAGS]):
        assert main([*argv, "--home", str(home), "--population", "riders-x"]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert "population 'riders-x' is not declared in the budget policy" in err and "missing" not in err
        assert not home.exists()  # nothing created, no Prefect server started
