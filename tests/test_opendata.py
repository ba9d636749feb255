"""Open data beside every release: Data Package, margins of error, landing page, DCAT catalogue (no Prefect).

Releases of every kind are staged here with the library functions their flows call (the kind's manifest and data
card, ``transit_release.files.publish.stage_release`` with the open-data hook) from small made-up outputs; the flow tests
of each kind run the same checks on real releases (``tests/open_data_checks.py``).
"""

from __future__ import annotations

import html
import json
import os
import re
from datetime import date
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.open_data_checks import (check_open_data, datapackage_view, page_view, validate_datapackage)
from transit_release import analysis, opendata
from transit_release.accounting.ledger import Ledger
from transit_release.config import load_release_config
from transit_release.errors import ConfigError
from transit_release.files import publish
from transit_release.inputs.screening import Period
from transit_release.inputs.sets import format_sets
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms import ngram
from transit_release.noise import NoiseSource, discrete_laplace_table
from transit_release.opendata import catalog, settings
from transit_release.releases import opal, sequences, sets, trajectories

UNIVERSE = LocationUniverse(tuple(f"S{i:02d}" for i in range(30)), "public station list")
WEEK = Period(date(2016, 8, 8), date(2016, 8, 14))
METRO_WEEK = Period(date(2026, 1, 5), date(2026, 1, 11))
JAN = Period(date(2026, 1, 1), date(2026, 1, 31))
CREATED = "2026-01-01T00:00:00+00:00"
KINDS = ("opal-card", "opal-trip", "prefix-tree", "ngram", "trajectories", "sets")


def opal_tables(rng: np.random.Generator, thresholds: dict[str, int]) -> dict[str, pd.DataFrame]:
    """Published-looking Opal tables (counts at or above each file's threshold, the -1 sentinel, a formula-like
    name)."""
    def counts(file, n):
        return thresholds[file] + rng.integers(0, 200, n)
    return {
        "time": pd.DataFrame({"mode": ["bus", "bus", "train"], "date": ["20160808", "20160808", "20160809"],
                              "tap": ["off", "on", "on"], "time": ["-1", "07:00", "17:45"],
                              "count": counts("time", 3)}),
        "location": pd.DataFrame({"mode": ["bus", "bus", "train"], "date": ["20160808"] * 3, "tap": ["off", "on", "on"],
                                  "loc": ["-1", "2000", "=Central, Platform 1"], "count": counts("location", 3)}),
        "time-loc": pd.DataFrame({"mode": ["bus"], "date": ["20160808"], "tap": ["on"], "time": ["07:00"],
                                  "loc": ["2000"], "count": counts("time-loc", 1)}),
    }


def kind_outputs(kind: str, rng: np.random.Generator, manifest: dict | None = None):
    """(tables, texts, manifest, render_datacard) of a small release of ``kind``."""
    if kind.startswith("opal"):
        config = load_release_config(None, unit=kind.split("-")[1])
        m = manifest or opal.build_manifest(f"opal-{kind.split('-')[1]}-20160808-20160814", WEEK, config,
                                            "os-entropy", "v1", CREATED)
        thresholds = {x["file"]: x["threshold"] for x in m["privacy"]["marginals"].values()}
        return opal_tables(rng, thresholds), {}, m, opal.render_datacard
    copies = [int(x) for x in rng.integers(1, 9, 3)]
    if kind in ("prefix-tree", "ngram"):
        kw = dict(height=4, variant="hybrid", fanout=5) if kind == "prefix-tree" else dict(lmax=6, nmax=3)
        budget, _ = sequences.budget_for(kind, UNIVERSE, 1.0, **kw)
        event = sequences.plan_spend("seq", JAN, budget, "fp", "v1")
        grams = [((0,), 12.5 + copies[0]), ((0, ngram.END), 3.25), ((0, 1), 9.0)] if kind == "ngram" else None
        release = sequences.SequenceRelease([((0, 1), copies[0]), ((2,), copies[1]), ((3, 4, 5), copies[2])], grams)
        tables, texts, m = sequences.outputs(f"sequences-{kind}", JAN, UNIVERSE, budget, event, "os-entropy", "v1",
                                             CREATED, release)
        return tables, texts, manifest or m, sequences.render_datacard
    if kind == "trajectories":
        setup = trajectories.safepath_setup(UNIVERSE, 1.0, 6, location_taxonomy_height=3)
        event = trajectories.plan_spend("traj", METRO_WEEK, setup, "fp", "v1")
        release = [(((0, 7), (3, 17)), copies[0]), (((2, 8),), copies[1])]
        m = manifest or trajectories.build_manifest("trajectories-x", METRO_WEEK, UNIVERSE, setup, event, "os-entropy",
                                                    "v1", CREATED)
        return ({"trajectories": trajectories.trajectory_table(release, UNIVERSE)},
                {"trajectories.txt": trajectories.trajectory_text(release, UNIVERSE, "trajectories-x")}, m,
                trajectories.render_datacard)
    budget = sets.set_budget(UNIVERSE, 1.0, 6)
    event = sets.plan_spend("sets-x", JAN, budget, "fp", "v1")
    release = [((0, 1), copies[0]), ((2,), copies[1]), ((4, 29), copies[2])]
    m = manifest or sets.build_manifest("sets-x", JAN, UNIVERSE, sets.describe_input(True, ("train",)), budget, event,
                                        "os-entropy", "v1", CREATED)
    return ({"sets": sets.set_table(release, UNIVERSE)}, {"sets.txt": format_sets(release, UNIVERSE, header="sets-x")},
            m, sets.render_datacard)


def stage(home: Path, kind: str, seed: int = 0, manifest: dict | None = None) -> publish.StagedRelease:
    """Stage a release of ``kind`` as ``tasks.publish.stage_release`` does (open-data settings of ``home``)."""
    tables, texts, m, render = kind_outputs(kind, np.random.default_rng(seed), manifest)
    m = opendata.with_publication(m, settings.load(home))
    return publish.stage_release(home / "releases", m["release_id"], tables, m, render(m) + opendata.card_section(m),
                                 texts, describe=opendata.describe_release)


def publish_in(home: Path, kind: str, seed: int = 0) -> Path:
    return publish.commit_release(stage(home, kind, seed), Ledger(home / "ledger.sqlite"))


# ---- Data Package ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_a_valid_data_package_listed_in_its_manifest(kind, tmp_path):
    d = publish_in(tmp_path, kind)
    package = check_open_data(d, tmp_path)
    assert publish.verify_release(d) == []  # the manifest lists and hashes the open-data files
    m = json.loads((d / "manifest.json").read_text())
    assert m["licence"] == "CC BY 4.0" and m["publication"]["licence"]["name"] == "CC-BY-4.0"
    dp = package["differentialPrivacy"]
    assert (dp["epsilon"], dp["delta"], dp["unit_of_privacy"]) == (m["privacy"]["epsilon"], m["privacy"]["delta"],
                                                                   m["privacy"]["unit_of_privacy"])
    assert package["temporalCoverage"] == m["period"] and package["licenses"][0]["path"].startswith("https://")
    tables = {r["path"]: r for r in package["resources"] if r.get("type") == "table"}
    for name in tables:
        assert name.endswith((".csv", ".parquet")) and "rows" not in m["files"].get("uncertainty.csv", {})
    assert "uncertainty.csv" in m["files"] and "uncertainty.csv" in tables
    if kind.startswith("opal"):
        schema = tables["location.csv"]["schema"]
        loc = next(f for f in schema["fields"] if f["name"] == "loc")
        assert loc["missingValues"] == ["-1"] and schema["primaryKey"] == ["mode", "date", "tap", "loc"]
        assert tables["location.parquet"]["schema"] == schema
    else:
        assert any(r["path"].endswith(".txt") and r["mediatype"] == "text/plain" for r in package["resources"])


@pytest.mark.parametrize("start,end,words", [
    ("2016-08-08", "2016-08-14", "8–14 August 2016"), ("2026-01-01", "2026-01-31", "January 2026"),
    ("2016-07-28", "2016-08-03", "28 July – 3 August 2016"), ("2016-08-08", "2016-08-08", "8 August 2016"),
    ("2025-12-29", "2026-01-04", "29 December 2025 – 4 January 2026"), ("2024-02-01", "2024-02-29", "February 2024")])
def test_a_period_in_words(start, end, words):
    from transit_release.opendata.titles import period_words

    assert period_words(start, end) == words


TITLES = {"opal-card": "Public-transport taps by time and location, 8–14 August 2016",
          "opal-trip": "Public-transport taps by time and location, 8–14 August 2016 (per-trip privacy)",
          "prefix-tree": "Passenger journeys as sequences of stations, January 2026",
          "ngram": "Passenger journeys as runs of consecutive stations, January 2026",
          "trajectories": "Passenger trajectories: stations and hours of the week, 5–11 January 2026",
          "sets": "The stations each passenger used, January 2026"}


def _sentences(text: str) -> list[str]:
    """The prose sentences of a Markdown text (tables, code and headings aside), whitespace collapsed."""
    prose = " ".join(line.strip().lstrip("-> ").strip() for line in text.splitlines()
                     if line.strip() and not line.lstrip().startswith(("|", "#", "`")))
    return [s for s in (x.strip() for x in re.split(r"(?<=[.!?])\s+", prose)) if len(s.split()) >= 6]


@pytest.mark.parametrize("kind", KINDS)
def test_every_public_description_has_one_human_title_and_plain_words(kind, tmp_path):
    """The landing page, the data card, the Data Package and the catalogue give the release one title in words
    (its kind and period; the release id stays the identifier). The page and the card hold no code of the
    tool's internal API, no sensitivity triple, and no sentence twice."""
    d = publish_in(tmp_path, kind)
    title = TITLES[kind]
    m = json.loads((d / "manifest.json").read_text())
    page = (d / "index.html").read_text()
    card = (d / "DATACARD.md").read_text()
    assert f"<title>{html.escape(title)}</title>" in page and f"<h1>{html.escape(title)}</h1>" in page
    assert f"<dt>Release</dt><dd><code>{m['release_id']}</code></dd>" in page
    assert card.startswith(f"# {title}\n\nRelease `{m['release_id']}`.\n")
    assert json.loads((d / "datapackage.json").read_text())["title"] == title
    graph = catalog_graph(catalog.write_catalog(tmp_path, tmp_path / "releases"))
    from rdflib import Literal, Namespace

    dct = Namespace("http://purl.org/dc/terms/")
    assert (None, dct.title, Literal(title)) in graph and (None, dct.identifier, Literal(m["release_id"])) in graph
    for text in (page, card):
        assert "transit_release" not in text and "analysis." not in text and "(L0, L1, L∞)" not in text
    sentences = _sentences(card)
    assert len(sentences) > 10 and len(set(sentences)) == len(sentences), \
        [s for s in sentences if sentences.count(s) > 1]
    if kind == "opal-card":  # the bounding is said once (the card said it again as its "composition")
        flat = " ".join(card.split())
        assert flat.count("before the card id was dropped") == 1 and " ".join(
            m["privacy"]["composition"].split()) not in flat
    if kind.startswith("opal"):  # how the counts were made, in plain words
        how = re.search(r"<dt>How</dt><dd>(.*?)</dd>", page).group(1)
        assert "published only if it reached its threshold" in how
        assert ("One card adds at most 2 to any count, in at most 10 of the (mode, day) partitions." in how
                if kind == "opal-card" else "Replacing one trip by another changes at most two counts" in how)


def test_the_place_open_data_yaml_names_is_in_the_title(tmp_path):
    (tmp_path / "open-data.yaml").write_text("publisher: {name: Example Transit}\n"
                                             "spatial: {uri: 'https://sws.geonames.org/2147714/', name: Sydney}\n")
    d = publish_in(tmp_path, "opal-card")
    title = "Public-transport taps by time and location, Sydney, 8–14 August 2016"
    assert f"<h1>{title}</h1>" in (d / "index.html").read_text()
    assert (d / "DATACARD.md").read_text().startswith(f"# {title}\n")
    assert json.loads((d / "manifest.json").read_text())["publication"]["spatial"]["name"] == "Sydney"


def test_frictionless_finds_a_file_that_differs_from_its_hash_or_schema(tmp_path):
    d = publish_in(tmp_path, "opal-card")
    with open(d / "time.csv", "a") as fh:
        fh.write("bus,20160808,on,25:00,1\n")
    report = validate_datapackage(d)
    assert not report.valid
    types = {e.type for task in report.tasks for e in task.errors}
    assert {"hash-count", "byte-count", "constraint-error"} <= types, types


# ---- settings --------------------------------------------------------------------------------------------

def test_settings_default_and_configured(tmp_path):
    s = settings.load(tmp_path)
    assert s.licence["name"] == "CC-BY-4.0" and s.publisher == {"name": "Unnamed publisher"} and s.base_url == ""
    (tmp_path / settings.SETTINGS_FILE).write_text(
        "licence: {name: ODbL-1.0, title: ODbL 1.0, path: 'https://opendatacommons.org/licenses/odbl/1-0/'}\n"
        "publisher: {name: Example Transit, url: 'https://transit.example.org/'}\n"
        "base_url: https://data.example.org/transit/releases\nkeywords: [Sydney]\n", encoding="utf-8")
    s = settings.load(tmp_path)
    assert (s.licence["title"], s.publisher["name"], s.base_url, s.keywords) == \
        ("ODbL 1.0", "Example Transit", "https://data.example.org/transit/releases/", ("Sydney",))
    d = publish_in(tmp_path, "sets")
    package = json.loads((d / "datapackage.json").read_text())
    assert package["licenses"][0]["name"] == "ODbL-1.0" and "Sydney" in package["keywords"]
    assert package["contributors"] == [{"title": "Example Transit", "roles": ["publisher"],
                                        "path": "https://transit.example.org/"}]
    assert "ODbL 1.0" in (d / "index.html").read_text()


@pytest.mark.parametrize("text,message", [
    ("colour: red\n", "unknown key(s) colour"),
    ("licence: {name: X}\n", "licence: missing path, title"),
    ("publisher: {name: A, url: 'ftp://x'}\n", "publisher.url: must be an http(s) URL. Found 'ftp://x'."),
    ("base_url: data.example.org\n", "base_url: must be an http(s) URL"),
    ("keywords: transit\n", "keywords must be a list of non-empty texts"),
    ("- a\n", "expected a mapping"),
])
def test_malformed_settings_are_refused_with_one_line(tmp_path, text, message):
    (tmp_path / settings.SETTINGS_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        settings.load(tmp_path)
    assert message in str(exc.value) and str(tmp_path / settings.SETTINGS_FILE) in str(exc.value)
    assert "\n" not in str(exc.value)


# ---- DCAT catalogue --------------------------------------------------------------------------------------

def catalog_graph(path: Path):
    import rdflib

    g = rdflib.Graph()
    g.parse(str(path), format="json-ld", publicID="https://portal.example/releases/catalog.jsonld")
    return g


def test_the_catalogue_parses_into_dcat_triples_for_every_release(tmp_path):
    import rdflib
    from rdflib.namespace import DCAT, DCTERMS, RDF

    spdx = rdflib.Namespace("http://spdx.org/rdf/terms#")
    for kind in KINDS:
        publish_in(tmp_path, kind)
    path = catalog.write_catalog(tmp_path, tmp_path / "releases")
    assert path == tmp_path / "releases" / catalog.CATALOG and oct(path.stat().st_mode & 0o777) == "0o644"
    g = catalog_graph(path)
    (cat,) = g.subjects(RDF.type, DCAT.Catalog)
    assert str(cat) == "https://portal.example/releases/catalog.jsonld"
    datasets = set(g.objects(cat, DCAT.dataset))
    assert datasets == set(g.subjects(RDF.type, DCAT.Dataset)) and len(datasets) == len(KINDS)
    for ds in datasets:
        rid = str(g.value(ds, DCTERMS.identifier))
        assert str(ds) == f"https://portal.example/releases/{rid}/"
        manifest = json.loads((tmp_path / "releases" / rid / "manifest.json").read_text())
        temporal = g.value(ds, DCTERMS.temporal)
        assert str(g.value(temporal, DCAT.startDate)) == manifest["period"]["start"]
        assert str(g.value(ds, DCTERMS.license)) == "https://creativecommons.org/licenses/by/4.0/"
        assert g.value(ds, DCTERMS.publisher) is not None and g.value(ds, DCAT.landingPage) is not None
        assert "differential privacy" in {str(k) for k in g.objects(ds, DCAT.keyword)}
        dists = set(g.objects(ds, DCAT.distribution))
        assert len(dists) == len(manifest["files"]) + 1  # and the manifest itself
        for dist in dists:
            name = str(g.value(dist, DCAT.downloadURL)).rsplit("/", 1)[1]
            meta = manifest["files"].get(name)
            if meta is None:
                assert name == "manifest.json"
                continue
            checksum = g.value(dist, spdx.checksum)
            assert str(g.value(checksum, spdx.checksumValue)) == meta["sha256"]
            assert str(g.value(checksum, spdx.algorithm)) == "http://spdx.org/rdf/terms#checksumAlgorithm_sha256"
            assert int(g.value(dist, DCAT.byteSize)) == meta["bytes"]
            assert str(g.value(dist, DCAT.mediaType)).startswith("https://www.iana.org/assignments/media-types/")
    assert len(g) > 50 * len(KINDS)


def test_a_base_url_makes_download_links_absolute(tmp_path):
    from rdflib.namespace import DCAT

    (tmp_path / settings.SETTINGS_FILE).write_text("base_url: https://data.example.org/transit/\n")
    publish_in(tmp_path, "sets")
    g = catalog_graph(catalog.write_catalog(tmp_path, tmp_path / "releases"))
    links = {str(o) for o in g.objects(None, DCAT.downloadURL)}
    assert "https://data.example.org/transit/sets-x/sets.csv" in links


def _publish_and_catalogue(home: Path, kind: str, rid: str) -> None:
    tables, texts, m, render = kind_outputs(kind, np.random.default_rng(0))
    m = opendata.with_publication({**m, "release_id": rid}, settings.load(home))
    staged = publish.stage_release(home / "releases", rid, tables, m, render(m), texts,
                                   describe=opendata.describe_release)
    publish.commit_release(staged, Ledger(home / "ledger.sqlite"))
    catalog.write_catalog(home, home / "releases")


def test_concurrent_publications_are_all_in_the_catalogue(tmp_path):
    """Each publication rewrites the catalogue under a lock after its rename: whichever writes last sees them all."""
    import multiprocessing

    Ledger(tmp_path / "ledger.sqlite")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_publish_and_catalogue, args=(tmp_path, "sets", f"sets-{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    graph = json.loads((tmp_path / "releases" / catalog.CATALOG).read_text())["@graph"]
    assert sorted(n["dct:identifier"] for n in graph if n.get("@type") == "dcat:Dataset") == \
        [f"sets-{i}" for i in range(4)]
    assert not [p.name for p in (tmp_path / "releases").iterdir() if p.name.startswith(".")]


def test_the_audit_accepts_the_catalogue_and_repair_regenerates_it(tmp_path):
    from transit_release.files.home import Home
    from transit_release.integrity.audit import check_releases
    from transit_release.integrity.recovery import repair

    home = Home.at(tmp_path)
    ledger = Ledger(home.ledger)
    publish_in(tmp_path, "opal-card")
    catalog.write_catalog(tmp_path, home.releases)
    assert check_releases(home, ledger.published())[0] == []
    (home.releases / "stray.json").write_text("{}")
    assert [str(p) for p in check_releases(home, ledger.published())[0]] == [
        "release: releases/stray.json: not a release: nothing but release directories belongs there; remove it"]
    (home.releases / "stray.json").unlink()
    # a publication interrupted after its rename: repair completes it, and the catalogue then lists it
    ledger.charge([sets.plan_spend("sets-x", JAN, sets.set_budget(UNIVERSE, 1.0, 6), "fp", "v1")])
    staged = stage(tmp_path, "sets")
    ledger.record_intent("sets-x", staged.manifest_sha256, staged.staging_dir, staged.final_dir, None)
    os.rename(staged.staging_dir, staged.final_dir)
    assert "sets-x/" not in (home.releases / catalog.CATALOG).read_text()
    assert repair(home, ledger).completed == ["sets-x"]
    assert '"sets-x/"' in (home.releases / catalog.CATALOG).read_text()
    assert check_releases(home, ledger.published())[0] == []


# ---- margins of error ------------------------------------------------------------------------------------

#: (scale, noise bound, cells summed): the card level's two laws (k = 2, ε_j = 0.1 and 0.2) and the trip level's.
COVERAGE_CASES = [("20", 402, 1), ("20", 402, 7), ("10", 208, 1), ("10", 208, 2), ("2", None, 1), ("1", None, 7)]
DRAWS = 20_000


def simulated_noise(scale: str, bound: int | None, cells: int, draws: int = DRAWS, seed: int = 36) -> np.ndarray:
    """``draws`` sums of ``cells`` independent noises, drawn by the samplers the releases use (fixed test seed)."""
    table = discrete_laplace_table(Fraction(scale))
    generator = NoiseSource(seed=seed).stream("coverage", scale, str(bound), str(cells))
    z = (table.sample(generator, draws * cells) if bound is None
         else table.sample_within(generator, bound, draws * cells))
    return z.reshape(draws, cells).sum(axis=1)


@pytest.mark.parametrize("scale,bound,cells", COVERAGE_CASES)
def test_interval_coverage_by_simulation_away_from_the_threshold(scale, bound, cells):
    """Published counts far above T (always published at the card level): ``n ± h`` holds the truth as often as
    stated, 95% within ±1 point where the noise is fine-grained (the card level); the trip level's small
    integer noise jumps by steps, and covers at least 95%, as stated."""
    law = analysis.NoiseLaw.of(scale, bound)
    truth = np.full(DRAWS, 5000 * cells)
    published = truth + simulated_noise(scale, bound, cells)
    interval = analysis.sum_interval([0] * cells, [law] * cells)
    h = interval.half_width
    empirical = float((np.abs(published - truth) <= h).mean())
    assert interval.method == analysis.EXACT and interval.coverage >= 0.95
    assert abs(empirical - interval.coverage) <= 0.006, (empirical, interval.coverage)
    if bound is not None:
        assert abs(empirical - 0.95) <= 0.01
    assert float((np.abs(published - truth) <= h - 1).mean()) < 0.95 + 0.006  # h is the smallest that covers


def test_the_threshold_effects_match_simulation():
    law = analysis.NoiseLaw.of("20", 402)
    threshold, h = 405, analysis.count_interval(0, law).half_width
    noise = simulated_noise("20", 402, 1, draws=40_000, seed=7)
    for true in (threshold - h // 2, threshold, threshold + h):
        effect = analysis.near_threshold(law, threshold, true, h)
        published = true + noise
        kept = published >= threshold
        n = int(kept.sum())
        assert abs(kept.mean() - effect.published) <= 4 * np.sqrt(effect.published * (1 - effect.published) / 40_000)
        assert abs((published[kept] - true).mean() - effect.mean_error) <= 4 * law.sd / np.sqrt(n)
        tolerance = 4 * np.sqrt(effect.coverage * (1 - effect.coverage) / n)
        assert abs((np.abs(published[kept] - true) <= h).mean() - effect.coverage) <= tolerance


def test_the_chernoff_bound_is_conservative(monkeypatch):
    law = analysis.NoiseLaw.of("10", 208)
    exact = analysis.half_width([law] * 30)
    monkeypatch.setattr(analysis, "MAX_EXACT_SUPPORT", 100)
    bound = analysis.half_width([law] * 30)
    assert bound[2] == analysis.CHERNOFF and exact[2] == analysis.EXACT
    assert exact[0] <= bound[0] <= 1.5 * exact[0]
    low, p = analysis.sum_distribution([law] * 30)  # the bound's stated coverage is below the true one at its h
    z = np.arange(low, low + p.size)
    assert 0.95 <= bound[1] <= p[np.abs(z) <= bound[0]].sum()


def test_intervals_for_a_published_table(tmp_path):
    d = publish_in(tmp_path, "opal-card")
    m = json.loads((d / "manifest.json").read_text())
    table = pd.read_csv(d / "location.csv", dtype={"loc": str}, keep_default_na=False)
    laws = analysis.row_laws(m, "location", table)
    assert laws[0] == analysis.NoiseLaw(Fraction(20), 402)
    week = analysis.sum_interval(table["count"], laws)
    assert week.estimate == table["count"].sum() and week.half_width == analysis.half_width(laws)[0]
    diff = analysis.difference_interval(table["count"][1], laws[1], table["count"][2], laws[2])
    assert diff.half_width == analysis.half_width(laws[:2])[0] and diff.low < diff.estimate < diff.high
    u = pd.read_csv(d / "uncertainty.csv", keep_default_na=False)
    assert set(u["half_width_95"]) == {60, 30} and set(u["file"]) == {"time.csv", "location.csv", "time-loc.csv"}
    card = (d / "DATACARD.md").read_text()
    assert "## Margins of error" in card and "| 1–4 | ± 60 | ± 82 | ± 149 |" in card
    assert "| 1–4 | T = 405 | 51.2% | +19.5 |" in card
    with pytest.raises(ValueError, match="states no marginals"):
        analysis.marginal_laws({"release_id": "x", "privacy": {}})


# ---- the landing page, in the browser --------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


def test_the_landing_page_in_the_browser(tmp_path):
    """Debian's Chromium, kept off the network: the page fits 1400 px (and a phone's 390 px) with nothing
    overflowing, shows the files, the margins of error and the data card, and loads nothing."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install chromium"
    d = publish_in(tmp_path, "opal-card")
    shots = Path(os.environ.get("TRANSIT_RELEASE_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    overflowing = """() => [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect();
        return r.right > window.innerWidth + 0.5 || e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX
            !== 'auto'; }).map(e => e.tagName + '.' + e.className)"""
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                           "--disable-background-networking", "--disable-component-update",
                                           "--disable-sync"])
        for width in (1400, 390):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.goto((d / "index.html").as_uri())
            assert page.title() == "Public-transport taps by time and location, 8–14 August 2016"
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            if width == 1400:
                assert page.evaluate(overflowing) == []
                rows = page.locator("table.files tbody tr")
                files = json.loads((d / "manifest.json").read_text())["files"]
                assert rows.count() == len(files)  # every file but the page itself, and the manifest
                assert page.locator("#margins-of-error").is_visible()
                assert page.locator("code.sha256").first.inner_text() != ""
            page.screenshot(path=str(shots / f"landing_{width}.png"), full_page=True)
            page.close()
        browser.close()
    assert requests and all(u.startswith("file://") for u in requests), requests


def test_the_catalogue_is_the_one_file_the_tool_writes_beside_the_releases():
    from transit_release.files.home import RELEASES_TOOL_FILES
    from transit_release.opendata.catalog import CATALOG

    assert RELEASES_TOOL_FILES == {CATALOG}


# ---- DCAT-AP conformance ---------------------------------------------------------------------------------

def test_the_catalogue_conforms_to_dcat_ap_2_1_1(tmp_path):
    """pySHACL with RDFS inference against the DCAT-AP 2.1.1 shapes of tests/shapes/ (written from the
    specification's tables): no violation with two releases or with six (every kind); the recommended contact
    point, theme, spatial coverage and distribution descriptions are filled from open-data.yaml and public
    parameters, so no warning either once the settings name the area."""
    import rdflib
    from rdflib.namespace import DCAT, DCTERMS, RDF, SKOS

    from tests.dcat_shapes import shacl_results

    vcard = rdflib.Namespace("http://www.w3.org/2006/vcard/ns#")
    (tmp_path / settings.SETTINGS_FILE).write_text(
        "publisher:\n  name: Example Transit Agency\n  email: opendata@transit.example.org\n"
        "spatial:\n  uri: https://sws.geonames.org/2147714/\n  name: Sydney\n")
    for n, kinds in ((2, KINDS[:2]), (6, KINDS)):
        home = tmp_path / f"home{n}"
        home.mkdir()
        (home / settings.SETTINGS_FILE).write_text((tmp_path / settings.SETTINGS_FILE).read_text())
        for kind in kinds:
            publish_in(home, kind)
        path = catalog.write_catalog(home, home / "releases")
        results = shacl_results(path)
        assert results["Violation"] == [] and results["Warning"] == [], (n, results)
    g = catalog_graph(path)
    for ds in g.subjects(RDF.type, DCAT.Dataset):
        contact = g.value(ds, DCAT.contactPoint)
        assert str(g.value(contact, vcard.fn)) == "Example Transit Agency"
        assert str(g.value(contact, vcard.hasEmail)) == "mailto:opendata@transit.example.org"
        theme = g.value(ds, DCAT.theme)
        assert str(theme).endswith("/data-theme/TRAN") and str(g.value(theme, SKOS.prefLabel)) == "Transport"
        assert str(g.value(ds, DCTERMS.spatial)) == "https://sws.geonames.org/2147714/"
        for dist in g.objects(ds, DCAT.distribution):
            assert str(g.value(dist, DCTERMS.description)).endswith(").")
    # without the area, its recommendation is the only one left unfilled
    bare = tmp_path / "bare"
    publish_in(bare, "sets")
    warnings = shacl_results(catalog.write_catalog(bare, bare / "releases"))["Warning"]
    assert warnings and all("dc/terms/spatial" in w for w in warnings)


def test_the_shapes_find_what_portals_refuse(tmp_path):
    """The shapes are no rubber stamp: the catalogue as it was written before (an integer byte size, untyped
    media types, formats, checksum algorithm and landing page) has violations of each kind."""
    from tests.dcat_shapes import shacl_results

    publish_in(tmp_path, "sets")
    path = catalog.write_catalog(tmp_path, tmp_path / "releases")
    old = json.loads(path.read_text())
    for node in old["@graph"]:
        for dist in node.get("dcat:distribution", []):
            dist["dcat:byteSize"]["@type"] = "xsd:nonNegativeInteger"
            dist["dcat:mediaType"].pop("@type")
            dist["spdx:checksum"]["spdx:algorithm"] = {"@id": "spdx:checksumAlgorithm_sha256"}
        if "dcat:landingPage" in node:
            node["dcat:landingPage"].pop("@type")
    old["@graph"] = [n for n in old["@graph"] if n.get("@id") != "spdx:checksumAlgorithm_sha256"]
    path.write_text(json.dumps(old))
    violations = "\n".join(shacl_results(path)["Violation"])
    for what in ("dcat#byteSize", "dcat#mediaType", "spdx.org/rdf/terms#algorithm", "dcat#landingPage"):
        assert what in violations, what


def test_the_station_sets_margin_is_per_count_and_names_the_sets_nobody_had():
    """#40: the interval holds for each set's count, not among the published rows (a row is published only when its
    noise carried it over the threshold); the expected rows of sets nobody had come from public parameters."""
    from transit_release.mechanisms.diffpart import expected_phantom_leaves
    from transit_release.opendata.uncertainty import card_section, uncertainty_rows

    _, _, m, _ = kind_outputs("sets", np.random.default_rng(0))
    text = " ".join(card_section(m).split())
    p = m["privacy"]
    assert "This is a statement about each count, published or not, **not about the published rows**" in text
    assert "among published rows the interval holds less often" in text
    phantoms = expected_phantom_leaves(p["fanout"], p["c1"], p["epsilon"])
    assert f"on average at most **{phantoms:.3g}** of those nobody had are published per such group" in text
    (row,) = uncertainty_rows(m)
    assert "per count, not conditional on publication" in row["interval"]
