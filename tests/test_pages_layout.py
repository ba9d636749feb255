"""The internal pages at 1400 px in headless Chromium: nothing wider than the window, nothing sticking out of
its box, numbers on one line, every plot captioned; and the figures' axes readable."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import WEEK_FLAGS

from transit_release.cli import main

CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400

#: Elements wider than their parent, outside any box that scrolls or clips (such a box is checked itself).
OVERFLOWING = """() => {
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const parent = el.parentElement;
    let clipped = false;
    for (let a = parent; a && a !== document.documentElement; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') { clipped = true; break; }
    }
    if (clipped) continue;
    const r = el.getBoundingClientRect(), p = parent.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > p.right + 1 || r.left < p.left - 1)
      out.push(`${el.tagName.toLowerCase()} "${(el.textContent || el.getAttribute('src') || '').slice(0, 40)}" `
               + `[${Math.round(r.left)}, ${Math.round(r.right)}] in ${parent.tagName.toLowerCase()} `
               + `[${Math.round(p.left)}, ${Math.round(p.right)}]`);
  }
  return out;
}"""

#: Table cells whose text takes more than one line.
WRAPPED_CELLS = """() => {
  const out = [];
  for (const td of document.querySelectorAll('td')) {
    const text = td.textContent.trim();
    if (!/^[-+0-9.,e%]+$/.test(text)) continue;  // numbers only
    const range = document.createRange();
    range.selectNodeContents(td);
    const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
    if (lines.size > 1) out.push(text);
  }
  return out;
}"""


@pytest.fixture(scope="module")
def pages(prefect_harness, small_week, trip_policy, tmp_path_factory):
    """A home with a card-level and a trip-level Opal week, a station-set release and an audit."""
    home = tmp_path_factory.mktemp("pages-home")
    metro = tmp_path_factory.mktemp("pages-metro")
    week = ["--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), *WEEK_FLAGS, "--home", str(home)]
    assert main(["release", *week, "--release-id", "opal-card-week"]) == 0
    assert main(["release", *week, "--unit", "trip", "--policy", trip_policy, "--release-id", "opal-trip-week"]) == 0
    assert main(["synth-metro", "--out", str(metro), "--passengers", "20000"]) == 0
    assert main(["sets", "--input", str(metro / "sets.txt"), "--locations", str(metro / "locations.txt"),
                 "--epsilon", "1", "--period-start", "2026-01-01", "--period-end", "2026-01-31",
                 "--home", str(home), "--release-id", "metro-sets", "--policy", trip_policy]) == 0
    assert main(["audit", "--home", str(home), "--policy", trip_policy]) == 0
    reports = home / "release_reports"
    audit = sorted(reports.glob("audit-*/audit.html"))[-1]
    return {"index": reports / "index.html", "opal-card": reports / "opal-card-week" / "report.html",
            "opal-trip": reports / "opal-trip-week" / "report.html",
            "passenger": reports / "metro-sets" / "report.html", "audit": audit}


def test_pages_fit_1400px_wide_with_captioned_plots(pages, tmp_path):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install chromium (the README's test command does)"
    shots = Path(os.environ.get("TRANSIT_RELEASE_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        for name, path in pages.items():
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH, name
            assert page.evaluate(OVERFLOWING) == [], name
            assert page.evaluate(WRAPPED_CELLS) == [], name
            images = page.locator("img")
            for i in range(images.count()):
                img = images.nth(i)
                assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", img.element_handle()), name
                caption = page.evaluate("(img) => img.closest('figure')?.querySelector('figcaption')?.textContent"
                                        " || img.nextElementSibling?.textContent"
                                        " || img.previousElementSibling?.textContent || ''", img.element_handle())
                assert caption.strip(), f"{name}: {img.get_attribute('src')} has no caption"
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        # the audit page says why a unit has no per-mode figures, never a bare dash
        page.goto(pages["audit"].as_uri())
        assert "<p>—</p>" not in page.content()
        assert page.locator("text=No per-mode figures").count() >= 1
        # the index links each release's MLflow run in the runs view of `mlflow ui`
        page.goto(pages["index"].as_uri())
        links = page.locator('a:has-text("MLflow run")')
        assert links.count() == 3
        assert all("/#/experiments/" in links.nth(i).get_attribute("href") and "/runs/" in
                   links.nth(i).get_attribute("href") for i in range(3))
        assert page.locator("#mlflow a").get_attribute("href").endswith("/runs")
        browser.close()


def test_card_level_report_says_where_its_curve_comes_from(pages):
    text = pages["opal-card"].read_text(encoding="utf-8")
    assert "full-size synthetic week" in text and "not drawn from this release's data" in text
    assert "card_level_curve.png" not in pages["opal-trip"].read_text(encoding="utf-8")


def _drawn(monkeypatch):
    """The figures the report closes, kept open for inspection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    return figures


def _overlapping_labels(ax) -> list[str]:
    renderer = ax.figure.canvas.get_renderer()
    labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in labels]
    return [f"{a.get_text()} / {b.get_text()}" for i, (a, x) in enumerate(zip(labels, boxes))
            for b, y in zip(labels[i + 1:], boxes[i + 1:]) if x.overlaps(y)]


def test_cumulative_chart_of_one_spend_spans_days_not_years(monkeypatch, tmp_path):
    from transit_release.reports import report

    figures = _drawn(monkeypatch)
    tl = pd.DataFrame({"recorded_at": pd.to_datetime(["2026-11-27T10:00:00"]), "mode": ["all modes"],
                       "cumulative_epsilon": [8.0]})
    report._cumulative_chart(tl, "card", 70.0, tmp_path / "c.png")
    ax = figures[-1].axes[0]
    lo, hi = ax.get_xlim()
    assert 1 <= hi - lo <= 30  # days (matplotlib's date axis counts days)
    assert _overlapping_labels(ax) == []
    assert figures[-1]._suptitle is None  # the page's heading names the chart; a figure title would be clipped


def test_cumulative_chart_of_a_year_has_no_overlapping_dates(monkeypatch, tmp_path):
    from transit_release.reports import report

    figures = _drawn(monkeypatch)
    times = pd.date_range("2026-01-05", periods=52, freq="7D")
    tl = pd.DataFrame({"recorded_at": list(times) * 2, "mode": ["bus"] * 52 + ["train"] * 52,
                       "cumulative_epsilon": list(range(1, 53)) * 2})
    report._cumulative_chart(tl, "trip", 8.0, tmp_path / "c.png")
    for ax in figures[-1].axes:
        assert _overlapping_labels(ax) == []


def test_an_empty_released_vs_true_panel_says_why_and_shows_its_threshold(monkeypatch, tmp_path):
    """A marginal with no released cell: its panel says so, and its axes reach past its threshold (the diagonal
    of no point is not drawn); a panel with a few points draws them large enough to see."""
    import numpy as np

    from transit_release.reports import report

    figures = _drawn(monkeypatch)
    points = {"tap_on_time": (np.array([410, 500, 900]), np.array([415, 490, 910]))}
    report._scatter(points, {"tap_on_time": 405, "tap_on_time_location": 211}, tmp_path / "s.png")
    axes = {ax.get_title(): ax for ax in figures[-1].axes}
    empty = axes["j=5 tap_on_time_location"]
    assert [t.get_text() for t in empty.texts] == ["no cell of this marginal reached\nits threshold: nothing released"]
    assert empty.get_ylim()[1] > 211 and empty.get_xlim()[1] > 211
    assert [len(line.get_xdata()) for line in empty.get_lines()] == [0, 2]  # no point; the threshold's line
    full = axes["j=1 tap_on_time"]
    assert len(full.texts) == 0 and full.get_lines()[0].get_markersize() >= 4


@pytest.fixture(scope="module")
def eight_of_every_kind(tmp_path_factory):
    """Eight releases of every kind in one home, built from the library (no flow: tests/dashboard_home.py)."""
    from tests.dashboard_home import build

    home = tmp_path_factory.mktemp("eight-of-every-kind")
    return home, build(home)


def test_the_dashboard_with_eight_releases_of_every_kind_fits_1400px(eight_of_every_kind):
    """The reviewer's page: per kind four plots over its releases, then one table, newest publication first, that
    fits a 1400 px window with every link inside it; the utility in one short line with every figure one click
    away; the data card opens rendered (the landing page); the person's plotted loss is what each release's
    manifest stated, which is the accountant's reading of the ledger up to it; MLflow links are the releases' own
    runs."""
    from playwright.sync_api import sync_playwright

    from transit_release.accounting.ledger import Ledger
    from transit_release.accounting.ledger_chain import SPEND
    from transit_release.accounting.person import person_loss
    from transit_release.reports.release_index import release_runs

    home, order = eight_of_every_kind
    index = home / "release_reports" / "index.html"
    shots = Path(os.environ.get("TRANSIT_RELEASE_SCREENSHOTS", home))
    entries = Ledger(home / "ledger.sqlite", read_only=True).entries()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.goto(index.as_uri())
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
        assert page.evaluate(OVERFLOWING) == []
        outside = page.evaluate("""() => [...document.querySelectorAll('a')].filter(a => {
            const r = a.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > window.innerWidth;
          }).map(a => a.textContent)""")
        assert outside == []
        ids = page.evaluate("[...document.querySelectorAll('tr.release')].map(r => r.dataset.releaseId)")
        assert ids == order[::-1]  # newest publication first
        sections = page.locator("section.kind")
        assert sections.count() == 4 and page.locator("section.kind svg").count() == 16
        assert page.locator("section.kind figcaption").count() == 16
        row_heights = page.evaluate("[...document.querySelectorAll('tr.release')].map(r => r.offsetHeight)")
        assert max(row_heights) < 100, row_heights
        # a short utility line, every figure one click away
        first = page.locator("tr.release details").first
        assert first.locator("dl").is_hidden()
        first.locator("summary").click()
        assert first.locator("dl").is_visible() and first.locator("dt").count() >= 3
        # the person's loss plotted per release is what the accountant says of the ledger up to that release
        opal = page.locator('section.kind[data-kind="Opal tap counts, card level"]')
        plotted = opal.locator("svg").nth(3).evaluate(
            "svg => [...svg.querySelectorAll('circle title')].map(t => t.textContent)")[:8]  # the basic line
        opal_ids = [r for r in order if r.startswith("opal-")]
        for rid, text in zip(opal_ids, plotted):
            seq = max(e.seq for e in entries if e.release_id == rid)
            upto = [e.event() for e in entries if e.entry_type == SPEND and e.seq <= seq]
            assert text.endswith(f": {person_loss(upto, with_pld=False).basic.epsilon:.3g}"), (rid, text)
        page.screenshot(path=str(shots / "index_eight_of_every_kind.png"), full_page=True)
        # the data card link opens the landing page on its rendered data card
        page.locator(f'tr[data-release-id="{order[-1]}"] a', has_text="data card").click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/index.html#data-card") and page.locator("#data-card h3, #data-card h4").count() >= 2
        browser.close()
    runs = release_runs(home / "mlflow.db")
    html_text = index.read_text(encoding="utf-8")
    for rid in order:
        assert f"/runs/{runs[rid][1]}" in html_text
