"""A mixed week from one tap file: every data card's "where a passenger stands" is what the audit computes for
the ledger as it stood at that publication, whatever the order of the releases."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import WEEK_FLAGS
from transit_release.accounting.events import DEFAULT_POPULATION
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import default_policy_path
from transit_release.cli import EXIT_BUDGET, main
from transit_release.integrity.audit import cumulative_loss
from transit_release.releases.loss_statement import person_text

pytestmark = pytest.mark.flow


def _commands(week: dict) -> dict[str, list[str]]:
    taps = ["--trips", str(week["trips"]), "--stops", str(week["stops"])]
    train = [*taps, "--mode", "train", "--queries", "100"]
    return {
        "card": ["release", *taps, *WEEK_FLAGS, "--workers", "0"],
        "trip": ["release", *taps, *WEEK_FLAGS, "--workers", "0", "--unit", "trip"],
        "ngram": ["sequences", *train, *WEEK_FLAGS, "--epsilon", "1", "--mechanism", "ngram", "--lmax", "6",
                  "--nmax", "3"],
        "tree": ["sequences", *train, *WEEK_FLAGS, "--epsilon", "0.5", "--height", "3", "--fanout", "4"],
        "trajectories": ["trajectories", *train, *WEEK_FLAGS, "--epsilon", "1", "--height", "3",
                         "--location-fanout", "2", "--location-taxonomy-height", "4"],
        "sets": ["sets", *taps, "--mode", "train", "--queries", "100", *WEEK_FLAGS, "--epsilon", "1"],
    }


@pytest.fixture(scope="module")
def allowing_policy(tmp_path_factory):
    data = yaml.safe_load(default_policy_path().read_text(encoding="utf-8"))
    data["policy"]["allow_unbounded_person_loss"] = True
    path = tmp_path_factory.mktemp("policy") / "allowing.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _published(home) -> list[dict]:
    root = home / "private" / "test-releases"
    return [json.loads((d / "manifest.json").read_text(encoding="utf-8")) | {"_card": (d / "DATACARD.md").read_text(
        encoding="utf-8")} for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")]


def _check_every_card_against_the_audit(home) -> list[dict]:
    """Each published release's person figure equals the audit's for the ledger up to that release's head, and its
    data card says exactly that."""
    entries = Ledger(home / "ledger.sqlite").entries()
    manifests = _published(home)
    for m in manifests:
        p = m["privacy"]
        then = cumulative_loss(entries[:m["ledger_head"]["seq"]])["person"][p["population"]]
        assert p["person_at_publication"] == then, m["release_id"]
        assert person_text(p) in m["_card"], m["release_id"]
    return manifests


# every kind once with the trip level last; then the trip level early, followed by a kind of each unit's family
# (a passenger-level kind and the card level), whose statements must then be unbounded
@pytest.mark.parametrize("order", [("card", "ngram", "tree", "trajectories", "sets", "trip"),
                                   pytest.param(("sets", "trip", "card"), marks=pytest.mark.long)])
def test_a_mixed_week_states_one_passenger_as_the_audit_does(prefect_harness, tiny_week, tmp_path, capsys, test_seed,
                                                            allowing_policy, order):
    home = tmp_path / "home"
    commands = _commands(tiny_week)
    seen_trip = False
    for name in order:
        argv = [*commands[name], "--home", str(home)]
        if name == "trip":  # refused by the default policy, nothing charged; accepted with the allowance
            before = len(Ledger(home / "ledger.sqlite").entries()) if (home / "ledger.sqlite").exists() else 0
            assert main(argv) == EXIT_BUDGET
            err = capsys.readouterr().err
            assert "is at trip level: it bounds a trip, not a passenger" in err
            after = len(Ledger(home / "ledger.sqlite").entries()) if (home / "ledger.sqlite").exists() else 0
            assert after == before
            argv += ["--policy", str(allowing_policy)]
            seen_trip = True
        elif seen_trip:
            argv += ["--policy", str(allowing_policy)]
        assert main(argv) == 0, capsys.readouterr().err
        capsys.readouterr()
        manifests = _check_every_card_against_the_audit(home)
        latest = max(manifests, key=lambda m: m["ledger_head"]["seq"])
        person = latest["privacy"]["person_at_publication"]
        assert person["releases"] == len(manifests)
        assert person["bounded"] == (not seen_trip)
        if seen_trip:
            assert "## Where a passenger stands: unbounded" in latest["_card"]
    # the audit states the person first, then the units
    assert main(["audit", "--json", "--home", str(home)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert next(iter(result["loss"])) == "person"
    person = result["loss"]["person"][DEFAULT_POPULATION]
    assert person["releases"] == len(order) and not person["bounded"]
    units = {"card": "card", "trip": "trip", "sets": "passenger-set", "trajectories": "passenger-trajectory"}
    assert {k for k in result["loss"] if k != "person"} >= {units[n] for n in order if n in units}
