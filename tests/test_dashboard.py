"""The reviewer's views of past releases: MLflow's server (REST) and release_reports/index.html (browser)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import WEEK_FLAGS

from flows.deployments import free_port
from transit_release.cli import main
from transit_release.reports.release_index import collect_releases, render_index

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def two_releases(prefect_harness, small_week, tmp_path_factory):
    """A home with two published releases: one Opal week and one sequence release."""
    home = tmp_path_factory.mktemp("dashboard-home")
    data = tmp_path_factory.mktemp("metro")
    assert main(["release", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), *WEEK_FLAGS,
                 "--home", str(home), "--release-id", "opal-week-2016-08-08"]) == 0
    assert main(["synth-metro", "--out", str(data), "--passengers", "20000"]) == 0
    assert main(["sequences", "--input", str(data / "sequences.txt"), "--epsilon", "1", "--height", "8",
                 "--taxonomy", str(data / "taxonomy.csv"), "--home", str(home), "--release-id", "metro-month-1",
                 "--queries", "400", "--period-start", "2016-09-01", "--period-end", "2016-09-30"]) == 0
    return home


@contextlib.contextmanager
def mlflow_server(home: Path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{home / 'mlflow.db'}", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_mlflow_server_shows_both_releases_with_comparable_tags_params_and_metrics(two_releases):
    with mlflow_server(two_releases) as base:
        api = f"{base}/api/2.0/mlflow"
        exps = httpx.post(f"{api}/experiments/search", json={"max_results": 100}).json()["experiments"]
        ids = [e["experiment_id"] for e in exps]
        (ours,) = [e for e in exps if e["name"] == "transit-release"]  # the UI opens it on its runs, not on traces
        assert {"key": "mlflow.experimentKind", "value": "custom_model_development"} in ours["tags"]
        runs = httpx.post(f"{api}/runs/search", json={"experiment_ids": ids, "max_results": 1000,
                                                       "filter": "tags.published = 'true'"}).json()["runs"]

    def flat(run):
        data = run["data"]
        return ({t["key"]: t["value"] for t in data.get("tags", [])},
                {p["key"]: p["value"] for p in data.get("params", [])},
                {m["key"]: m["value"] for m in data.get("metrics", [])})

    parents = {run["info"]["run_name"]: flat(run) for run in runs
               if "mlflow.parentRunId" not in flat(run)[0]}
    assert set(parents) == {"opal-week-2016-08-08", "metro-month-1"}
    tags, params, metrics = parents["opal-week-2016-08-08"]
    assert tags["release_id"] == "opal-week-2016-08-08"
    assert tags["mechanism"] == "stability_histogram"
    assert tags["unit_of_privacy"] == "card"  # the default unit
    assert tags["period"] == "2016-08-08..2016-08-14"
    assert tags["mode_set"] == "bus+ferry+lightrail+train"
    assert float(params["epsilon"]) == 8.0
    for key in ("privacy.epsilon", "privacy.delta", "rows.released", "trip_coverage"):
        assert key in metrics
    assert metrics["privacy.epsilon"] == 8.0 and metrics["rows.released"] > 0
    tags, params, metrics = parents["metro-month-1"]
    assert tags["mechanism"] == "prefix_tree"
    assert tags["unit_of_privacy"] == "passenger-sequence"
    assert params["height"] == "8"
    assert metrics["privacy.epsilon"] == 1.0 and metrics["rows.released"] > 0
    # the same metric names in both, so the runs table compares them side by side
    assert {"privacy.epsilon", "privacy.delta", "rows.released"} <= set(parents["metro-month-1"][2])


def test_index_lists_releases_newest_first_whatever_the_folder_order(two_releases, tmp_path):
    rows = collect_releases(two_releases / "releases", two_releases / "release_reports")
    keys = [(r.sort_key, r.release_id) for r in rows]
    assert keys == sorted(keys, reverse=True)
    opal = next(r for r in rows if r.kind == "opal")
    assert opal.period == "2016-08-08 – 2016-08-14" and opal.epsilon == 8.0 and opal.rows > 0
    assert opal.utility.startswith("trips covered ")
    assert set(opal.links) >= {"report", "data card", "manifest", "Data Docs (raw)", "Data Docs (release)"}
    seq = next(r for r in rows if r.kind == "sequences")
    assert seq.utility.startswith("error of the 100 most frequent runs ")  # the kind's headline figure
    page = render_index(rows, None)
    assert "No audit yet" in page


def test_browser_opens_the_index_and_a_report(two_releases, tmp_path):
    """Headless Chromium (Debian's), kept off the network, over file:// pages."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install chromium (the README's test command does)"

    assert main(["audit", "--home", str(two_releases)]) == 0  # the index then shows the latest audit
    index = two_releases / "release_reports" / "index.html"
    shots = Path(os.environ.get("TRANSIT_RELEASE_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        # Playwright gives the browser a new empty profile; these flags keep it off the network
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(index.as_uri())
        assert page.title() == "transit-release: past releases"
        rows = page.locator("tr.release")
        assert rows.count() == 2
        assert sorted(rows.nth(i).get_attribute("data-release-id") for i in range(2)) == \
            ["metro-month-1", "opal-week-2016-08-08"]
        assert "PASSED" in page.locator("#latest-audit").inner_text()
        page.screenshot(path=str(shots / "index.png"), full_page=True)
        # follow the Opal release's report link
        page.locator('tr[data-release-id="opal-week-2016-08-08"] a', has_text="report").click()
        page.wait_for_load_state("load")
        assert page.url.endswith("opal-week-2016-08-08/report.html")
        images = page.locator("img")
        assert images.count() >= 3
        for i in range(images.count()):  # every plot loaded and has a size
            assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", images.nth(i).element_handle())
        page.screenshot(path=str(shots / "report.png"), full_page=True)
        # the report's public data card opens rendered, on the release's landing page
        page.locator("a", has_text="Public data card").click()
        page.wait_for_load_state("load")
        assert page.url.endswith("releases/opal-week-2016-08-08/index.html#data-card")
        assert page.locator("#data-card h3").first.is_visible()
        browser.close()
    assert all(u.startswith("file://") for u in requests), [u for u in requests if not u.startswith("file://")]
    assert (shots / "index.png").stat().st_size > 10_000


def test_data_docs_work_offline_styled_and_complete(two_releases, tmp_path):
    """A release's Great Expectations Data Docs in Chromium with every non-file request refused (an air-gapped
    agency): nothing is fetched from the network, Bootstrap styles the pages, the index lists the validations
    (bootstrap-table draws it with jQuery) and Font Awesome draws the status icons."""
    from playwright.sync_api import sync_playwright

    docs = two_releases / "release_reports" / "opal-week-2016-08-08" / "data_docs"
    shots = Path(os.environ.get("TRANSIT_RELEASE_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    requests: list[str] = []
    errors: list[str] = []
    icons_loaded = """async () => { await document.fonts.ready;
        return [...document.fonts].some(f => f.family.includes('Font Awesome') && f.status === 'loaded'); }"""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        context.route(lambda url: not url.startswith("file:"), lambda route: route.abort())
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        for site in ("raw", "release"):
            page.goto((docs / site / "index.html").as_uri())
            page.wait_for_load_state("load")
            remote = [u for u in requests if not u.startswith("file://")]
            assert not remote, f"the {site} Data Docs load from the network: {remote}"
            assert not errors, errors
            assert page.evaluate("getComputedStyle(document.querySelector('nav.navbar')).display") == "flex"
            rows = page.locator("table.ge-index-page-validation-results-table tbody tr.clickable-row")
            rows.first.wait_for(timeout=15_000)
            assert page.evaluate(icons_loaded)
            page.screenshot(path=str(shots / f"data_docs_{site}_index.png"))
            rows.first.click()  # the validation result
            page.wait_for_load_state("load")
            assert "/validations/" in page.url
            assert page.locator("table tbody tr").count() > 1
            assert page.evaluate(icons_loaded)
            assert page.evaluate("getComputedStyle(document.querySelector('.card')).borderStyle") == "solid"
            page.screenshot(path=str(shots / f"data_docs_{site}_validation.png"))
        browser.close()
    assert requests and all(u.startswith("file://") for u in requests), \
        [u for u in requests if not u.startswith("file://")]
    assert not errors, errors
