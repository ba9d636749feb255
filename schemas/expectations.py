"""Great Expectations 1.x suites: raw-data quality and release checks, with Data Docs.

No value ever leaves a validation: results use ``SUMMARY`` with
``partial_unexpected_count = 0`` (counts and percentages only), and the raw
suite runs on a *view* of the trips without the card id (times as minutes
since the epoch, which GE's pandas engine compares about twenty times faster
than timestamps). Data Docs are written to the release's internal report
folder, and work offline: GE's pages load Bootstrap, jQuery, bootstrap-table and
Font Awesome from public CDNs (its templates hard-code the URLs), so once built
they are pointed at copies of the same files shipped in ``schemas/data_docs_assets``
(an air-gapped agency otherwise sees unstyled pages and an empty index).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 0, "include_unexpected_rows": False}
_NS_PER_MIN = 60_000_000_000
MIN_TAP_OFF_PRESENT = 0.8  # at most 20% missing tap-offs

ASSETS = Path(__file__).resolve().parent / "data_docs_assets"
# the remote assets GE 1.x's page templates load -> the same library and version under static/vendor/
# (None: removed; Vega draws charts that these suites never render)
_GE_CDN = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
_LOCAL_ASSETS = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "vendor/jquery.min.js",
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "vendor/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "vendor/bootstrap.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "vendor/popper.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "vendor/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "vendor/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        "vendor/bootstrap-table-filter-control.min.css",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        "vendor/bootstrap-table-filter-control.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        "vendor/bootstrap-table-filter-control.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        "vendor/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        "vendor/bootstrap-datepicker.min.js",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        "vendor/bootstrap-prefers-dark.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "vendor/fontawesome/css/all.min.css",
    "https://cdn.jsdelivr.net/npm/vega@5": None,
    "https://cdn.jsdelivr.net/npm/vega-lite@5": None,
    "https://cdn.jsdelivr.net/npm/vega-embed@6": None,
    _GE_CDN + "logo-long.png": "images/logo-long.png",
    _GE_CDN + "full_logo_dark.png": "images/logo-long.png",
}
# what a page loads by itself: <script src>, <link href>, <img src> and CSS url(); plain links (<a href>) stay
_LOADED = re.compile(r"""<(?P<tag>script|link|img)\b[^>]*?\b(?:src|href)\s*=\s*["'](?P<url>https?://[^"']+)["'][^>]*>"""
                     r"""(?:\s*</script>)?|url\(\s*["']?(?P<css>https?://[^"')]+)["']?\s*\)""", re.IGNORECASE)
_CORS_ATTRS = re.compile(r"""\s(?:integrity|crossorigin)\s*=\s*["'][^"']*["']""", re.IGNORECASE)


def _gx():
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    return gx


def _context(docs_dir: Path):
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    docs_dir.mkdir(parents=True, exist_ok=True)
    ctx.add_data_docs_site(site_name="internal", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    })
    return ctx


def raw_view(trips: pd.DataFrame, stops: pd.DataFrame, modes: tuple[str, ...]) -> pd.DataFrame:
    """The trips as GE sees them: no card id, times as epoch minutes, a row fingerprint, and whether each tap's
    stop is in the stop table for the row's mode (the lookup the screen uses: a set of 200,000 stop ids as an
    expectation's value set would be copied into every Data Docs page)."""
    from transit_release.inputs.screening import _ints, _ns, _row_hash, mode_codes, stop_lookup

    on, off = _ns(trips["tap_on_time"]), _ns(trips["tap_off_time"])
    nat = np.iinfo(np.int64).min
    on_min = np.where(on == nat, np.nan, on // _NS_PER_MIN)
    off_min = np.where(off == nat, np.nan, off // _NS_PER_MIN)
    card, on_stop, off_stop = (_ints(trips[c]) for c in ("card_id", "tap_on_stop", "tap_off_stop"))
    raw_codes, mode_code = mode_codes(trips, modes)
    known = stop_lookup(stops, modes, mode_code)
    return pd.DataFrame({
        "mode": trips["mode"],
        "card_present": (card >= 0).astype(np.int8),
        "tap_on_minute": on_min,
        "tap_off_minute": off_min,
        "duration_minutes": off_min - on_min,
        "tap_on_stop_known": np.where(on_stop < 0, np.nan, known(on_stop).astype(float)),
        "tap_off_stop_known": np.where(off_stop < 0, np.nan, known(off_stop).astype(float)),
        "row_fingerprint": _row_hash(card, raw_codes.astype(np.int64), on, on_stop, off, off_stop).view(np.int64),
    })


def raw_suite(period, quality, modes: tuple[str, ...]):
    """Raw-data quality; ``mostly`` is the quarantine policy, so the suite passes iff the gate does."""
    gx = _gx()
    E = gx.expectations
    mostly = 1.0 - quality.quarantine_limit
    start = pd.Timestamp(period.start).value // _NS_PER_MIN
    end = pd.Timestamp(period.end).value // _NS_PER_MIN + 1439
    suite = gx.ExpectationSuite(name="raw_trips_quality")
    for e in (
        E.ExpectTableRowCountToBeBetween(min_value=quality.min_rows, max_value=quality.max_rows),
        E.ExpectColumnValuesToBeInSet(column="mode", value_set=list(modes), mostly=mostly),
        E.ExpectColumnValuesToBeInSet(column="card_present", value_set=[1], mostly=mostly),
        E.ExpectColumnValuesToNotBeNull(column="tap_on_minute", mostly=mostly),
        E.ExpectColumnValuesToBeBetween(column="tap_on_minute", min_value=start, max_value=end, mostly=mostly),
        E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="tap_off_minute", column_B="tap_on_minute", or_equal=True,
                                                   ignore_row_if="either_value_is_missing", mostly=mostly),
        E.ExpectColumnValuesToBeBetween(column="duration_minutes", min_value=0,
                                        max_value=quality.max_trip_minutes, mostly=mostly),
        E.ExpectColumnValuesToBeInSet(column="tap_on_stop_known", value_set=[1.0], mostly=mostly),
        E.ExpectColumnValuesToBeInSet(column="tap_off_stop_known", value_set=[1.0], mostly=mostly),
        E.ExpectColumnValuesToNotBeNull(column="tap_off_minute", mostly=MIN_TAP_OFF_PRESENT),
        E.ExpectColumnValuesToBeUnique(column="row_fingerprint", mostly=mostly),
    ):
        suite.add_expectation(e)
    return suite


def release_suite(name: str, columns: list[str], thresholds: dict[str, int], modes: tuple[str, ...],
                  input_times: list[str] | None, input_locations: dict[str, list[str]] | None):
    """Checks of one published table: exact columns, counts ≥ threshold per tap, only the given time bins and
    locations. Give only public domains: Great Expectations renders a value set into the Data Docs (the release
    check passes the public time bins and checks locations in plain code, see ``tasks.quality``)."""
    gx = _gx()
    E = gx.expectations
    suite = gx.ExpectationSuite(name=f"release_{name.replace('-', '_')}")
    suite.add_expectation(E.ExpectTableColumnsToMatchOrderedList(column_list=columns))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="mode", value_set=list(modes)))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="tap", value_set=["on", "off"]))
    for tap, t in thresholds.items():
        suite.add_expectation(E.ExpectColumnValuesToBeBetween(
            column="count", min_value=t, row_condition=f'tap=="{tap}"', condition_parser="pandas"))
    if input_times is not None:
        suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="time", value_set=sorted(input_times)))
    for mode, locs in (input_locations or {}).items():
        suite.add_expectation(E.ExpectColumnValuesToBeInSet(
            column="loc", value_set=sorted(locs), row_condition=f'mode=="{mode}"', condition_parser="pandas"))
    return suite


def validate_frames(docs_dir: Path, frames: dict[str, tuple[pd.DataFrame, Callable[[], object]]]) -> dict:
    """Validate each frame against its suite through a checkpoint that updates Data Docs; counts only.

    Suites are passed as zero-argument builders (e.g. ``functools.partial(raw_suite, ...)``): GE builds
    expectations only inside an active data context.
    """
    gx = _gx()
    from great_expectations.checkpoint import UpdateDataDocsAction

    ctx = _context(docs_dir)
    source = ctx.data_sources.add_pandas("transit_release")
    out = {"success": True, "suites": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (df, build_suite) in frames.items():
            batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
            suite = ctx.suites.add(build_suite())
            vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=suite))
            cp = ctx.checkpoints.add(gx.Checkpoint(
                name=f"{name}_checkpoint", validation_definitions=[vd], result_format=RESULT_FORMAT,
                actions=[UpdateDataDocsAction(name="data_docs", site_names=["internal"])]))
            result = cp.run(batch_parameters={"dataframe": df})
            rows = []
            for run in result.run_results.values():
                for r in run.results:
                    cfg = r.expectation_config
                    res = r.result or {}
                    rows.append({"expectation": cfg.type, "column": cfg.kwargs.get("column") or
                                 cfg.kwargs.get("column_A"), "row_condition": cfg.kwargs.get("row_condition"),
                                 "success": bool(r.success), "unexpected_count": res.get("unexpected_count"),
                                 "unexpected_percent": res.get("unexpected_percent"),
                                 "element_count": res.get("element_count")})
            out["suites"][name] = {"success": bool(result.success), "expectations": rows}
            out["success"] = out["success"] and bool(result.success)
    make_data_docs_offline(docs_dir)
    out["data_docs"] = str(docs_dir / "index.html")
    return out


def make_data_docs_offline(docs_dir: Path) -> None:
    """Point every Data Docs page under ``docs_dir`` at local copies of its CSS, JavaScript and images.

    The vendored files go to ``<docs_dir>/static/vendor/``; each page refers to them by a path relative
    to itself, so the site still works when the folder is copied (e.g. to MLflow). A remote asset that
    is not in the table (a GE upgrade that changes its templates) is removed rather than fetched.
    """
    docs_dir = Path(docs_dir)
    static = docs_dir / "static"
    shutil.copytree(ASSETS, static / "vendor", dirs_exist_ok=True, ignore=shutil.ignore_patterns("README.md"))
    for page in docs_dir.rglob("*.html"):
        prefix = Path(os.path.relpath(static, page.parent)).as_posix()

        def local(match: re.Match) -> str:
            url = match["url"] or match["css"]
            target = _LOCAL_ASSETS.get(url.split("?", 1)[0])
            if match["css"]:
                return f"url('{prefix}/{target}')" if target else "none"
            if target is None:
                return ""
            # integrity/crossorigin make a file:// load a CORS request, which Chromium refuses
            return _CORS_ATTRS.sub("", match[0].replace(url, f"{prefix}/{target}"))

        html = page.read_text(encoding="utf-8")
        offline = _LOADED.sub(local, html)
        if offline != html:
            page.write_text(offline, encoding="utf-8")
