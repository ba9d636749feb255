"""Great Expectations 1.x suites: raw-data quality and release checks, with Data Docs.

No value ever leaves a validation: results use ``SUMMARY`` with
``partial_unexpected_count = 0`` (counts and percentages only; the partitions'
suite asks GE for the labels of the failing rows and keeps nothing else). The raw
data is validated where it is prepared (on the Dask workers when there is a
cluster): each partition is one row of its clean trips' aggregates, without any
card id (see :func:`partition_aggregates` for why the aggregates give the same
verdict as the rows), and the partitions one task prepared are validated
together (:func:`validate_partitions`); the release's raw-data
suites then validate what the screen and the partitions measured (one row of
period totals, one row per partition), with Data Docs. Data Docs are written to the release's internal report
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

from transit_release.inputs import refusals

RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 0, "include_unexpected_rows": False}
_NS_PER_MIN = 60_000_000_000
MIN_TAP_OFF_PRESENT = refusals.MIN_TAP_OFF_PRESENT  # at most 20% missing tap-offs (a registered refusal)

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


def _context(docs_dir: Path | None):
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.config.analytics_enabled = False
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    if docs_dir is None:
        return ctx
    docs_dir.mkdir(parents=True, exist_ok=True)
    ctx.add_data_docs_site(site_name="internal", site_config=site_config(docs_dir))
    return ctx


def site_config(docs_dir: Path) -> dict:
    """A Data Docs site in ``docs_dir``: GE's default builders (an index, the suites, the validations; no profiling,
    which nothing here makes) with GE's views whose templates are compiled once (:mod:`schemas.data_docs_views`)."""
    views = "schemas.data_docs_views"
    page = {"view": {"module_name": views, "class_name": "CachedJinjaPageView"}}
    return {"class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder",
                                   "view": {"module_name": views, "class_name": "CachedJinjaIndexPageView"}},
            "site_section_builders": {"expectations": page, "validations": page, "profiling": "None"}}


def partition_aggregates(rows: dict[str, np.ndarray], date: str) -> dict:
    """A partition's clean trips as its suite sees them: one row of aggregates — how many trips, how many
    distinct (a keyless fingerprint of every column, card id included), the first and last tap-on (minute of
    the partition's day) and the shortest and longest trip (minutes; missing when no trip has a tap-off).

    Not the rows themselves: each of the suite's expectations is a statement about an extreme or a count (every
    tap-on inside the day ⟺ the first and the last are; no tap-off before its tap-on ⟺ the shortest trip is
    not negative; no trip over the limit ⟺ the longest is not; no repeated row ⟺ as many distinct rows as
    rows), so the verdict is the same, and Great Expectations — which fingerprints and copies whatever frame
    it is given — costs the same for a partition of ten trips as of a million. What is lost is the number of
    offending rows, which the screen has already counted: a failure here is a fault of the pipeline, not of the
    data. Minutes are counted from the partition's own day, so that one suite checks any partition: the
    partitions a worker prepared are validated together (:func:`partition_suite`)."""
    from transit_release.inputs.screening import _row_hash

    nat = np.iinfo(np.int64).min
    on, off = rows["on_ns"], rows["off_ns"]
    n = int(on.size)
    present = off != nat
    duration = (off[present] // _NS_PER_MIN - on[present] // _NS_PER_MIN).astype(float)
    h = np.sort(_row_hash(rows["card"], on, rows["on_stop"], off, rows["off_stop"]))  # (np.unique hashes: slower)
    distinct = int(n > 0) + int(np.count_nonzero(h[1:] != h[:-1]))
    on_min = on // _NS_PER_MIN - pd.Timestamp(date).value // _NS_PER_MIN
    return {"trips": n, "distinct_trips": distinct,
            "first_tap_on_minute_of_day": float(on_min.min()) if n else np.nan,
            "last_tap_on_minute_of_day": float(on_min.max()) if n else np.nan,
            "shortest_minutes": float(duration.min()) if duration.size else np.nan,
            "longest_minutes": float(duration.max()) if duration.size else np.nan}


#: The column naming each row of the partitions' aggregates (its partition): GE reports the failing rows by it.
PARTITION_LABEL = "partition"


def partitions_view(aggregates: dict[str, dict]) -> pd.DataFrame:
    """The aggregates of several partitions (label → :func:`partition_aggregates`), one row each, by label."""
    return pd.DataFrame([{PARTITION_LABEL: label, **a} for label, a in sorted(aggregates.items())])


def partition_suite(quality):
    """Partitions' clean trips, by their aggregates (:func:`partition_aggregates`, one row per partition; run
    where the partitions are prepared, on a Dask worker when there is a cluster): every tap-on inside the
    partition's day, no tap-off before its tap-on, no trip longer than the policy's limit, no repeated row. The
    screen has already quarantined rows that break these, so any failure here is a fault of the pipeline, not
    of the data: the release stops. Every expectation is about one row, so a partition's verdict does not
    depend on which partitions it is validated with."""
    gx = _gx()
    E = gx.expectations
    suite = gx.ExpectationSuite(name="partitions_clean_trips")
    for e in (
        E.ExpectColumnValuesToBeBetween(column="first_tap_on_minute_of_day", min_value=0, max_value=1439),
        E.ExpectColumnValuesToBeBetween(column="last_tap_on_minute_of_day", min_value=0, max_value=1439),
        E.ExpectColumnValuesToBeBetween(column="shortest_minutes", min_value=0),
        E.ExpectColumnValuesToBeBetween(column="longest_minutes", max_value=quality.max_trip_minutes),
        E.ExpectColumnPairValuesToBeEqual(column_A="distinct_trips", column_B="trips"),
    ):
        suite.add_expectation(e)
    return suite


def validate_partitions(aggregates: dict[str, dict], quality) -> dict[str, dict]:
    """:func:`partition_suite` on several partitions' aggregates in one validation (a validation costs about
    0.07 s whatever its rows, 28 of them 2 s); each partition's own result (counts only: which expectations its
    row broke, named by GE through the label column) by label."""
    labels = sorted(aggregates)
    fmt = {**RESULT_FORMAT, "result_format": "COMPLETE", "unexpected_index_column_names": [PARTITION_LABEL]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch_def = _process_batch_definition()
        try:
            result = batch_def.get_batch(batch_parameters={"dataframe": partitions_view(aggregates)}).validate(
                partition_suite(quality), result_format=fmt)
        finally:
            _forget_batches(batch_def)
    out = {label: {"success": True, "expectations": []} for label in labels}
    for r in result.results:
        res = r.result or {}
        failed = {row[PARTITION_LABEL] for row in res.get("unexpected_index_list") or []}
        if not r.success and not failed:  # a failure GE could not place on a row fails every partition
            failed = set(labels)
        (row,) = _rows([r])
        for label in labels:
            bad = label in failed
            out[label]["expectations"].append({**row, "success": not bad, "unexpected_count": int(bad),
                                               "unexpected_percent": 100.0 * bad, "element_count": 1})
            out[label]["success"] = out[label]["success"] and not bad
    return out


def totals_suite(quality):
    """The period's screen in one row of counts and shares: as many rows as the policy allows, and each kind
    of problem within the quarantine limit; at least 80% of the clean trips with a tap-off."""
    gx = _gx()
    E = gx.expectations
    limit = quality.quarantine_limit
    suite = gx.ExpectationSuite(name="raw_trips_quality")
    suite.add_expectation(E.ExpectColumnValuesToBeBetween(column="rows", min_value=quality.min_rows,
                                                          max_value=quality.max_rows))
    for column in ("quarantined_share", "unknown_stop_share", "outside_period_share", "duplicate_share"):
        suite.add_expectation(E.ExpectColumnValuesToBeBetween(column=column, min_value=0, max_value=limit))
    suite.add_expectation(E.ExpectColumnValuesToBeBetween(column="tap_off_missing_share", min_value=0,
                                                          max_value=1 - MIN_TAP_OFF_PRESENT))
    return suite


def partitions_suite(n_partitions: int):
    """One row per partition of the public domain: every one was prepared, and passed its own suite and its
    pandera contracts."""
    gx = _gx()
    E = gx.expectations
    suite = gx.ExpectationSuite(name="raw_trips_partitions")
    suite.add_expectation(E.ExpectTableRowCountToEqual(value=n_partitions))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="checks_passed", value_set=[True]))
    suite.add_expectation(E.ExpectColumnValuesToBeBetween(column="clean_rows", min_value=0))
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


def validate_frames(docs_dir: Path, frames: dict[str, tuple[pd.DataFrame, Callable[[], object]]],
                    static_dir: Path | None = None) -> dict:
    """Validate each frame against its suite through checkpoints, then build the Data Docs in ``docs_dir`` once for
    all of them; counts only. (The partitions' own suite: :func:`validate_partitions`.) The pages' styles, scripts
    and images go to ``static_dir`` (default: the site's own ``static/``), which several sites may share
    (:func:`make_data_docs_offline`).

    Suites are passed as zero-argument builders (e.g. ``functools.partial(totals_suite, quality)``): GE builds
    expectations only inside an active data context.
    """
    gx = _gx()
    out = {"success": True, "suites": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = _context(docs_dir)
        source = ctx.data_sources.add_pandas("transit_release")
        for name, (df, build_suite) in frames.items():
            batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
            suite = ctx.suites.add(build_suite())
            vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=suite))
            cp = ctx.checkpoints.add(gx.Checkpoint(
                name=f"{name}_checkpoint", validation_definitions=[vd], result_format=RESULT_FORMAT, actions=[]))
            result = cp.run(batch_parameters={"dataframe": df})
            rows = [row for run in result.run_results.values() for row in _rows(run.results)]
            out["suites"][name] = {"success": bool(result.success), "expectations": rows}
            out["success"] = out["success"] and bool(result.success)
        ctx.build_data_docs(site_names=["internal"])  # once: an action per checkpoint rebuilt the site each time
    make_data_docs_offline(docs_dir, static_dir)
    out["data_docs"] = str(docs_dir / "index.html")
    return out


def _rows(results) -> list[dict]:
    rows = []
    for r in results:
        cfg = r.expectation_config
        res = r.result or {}
        rows.append({"expectation": cfg.type, "column": cfg.kwargs.get("column") or cfg.kwargs.get("column_A"),
                     "row_condition": cfg.kwargs.get("row_condition"), "success": bool(r.success),
                     "unexpected_count": res.get("unexpected_count"),
                     "unexpected_percent": res.get("unexpected_percent"),
                     "element_count": res.get("element_count")})
    return rows


_BATCH_DEFINITION = None


def _process_batch_definition():
    """One ephemeral context, pandas data source and whole-dataframe batch definition per process."""
    global _BATCH_DEFINITION
    if _BATCH_DEFINITION is None:
        ctx = _context(None)
        _BATCH_DEFINITION = (ctx.data_sources.add_pandas("transit_release_partitions")
                             .add_dataframe_asset("partition").add_batch_definition_whole_dataframe("partition"))
    return _BATCH_DEFINITION


def _forget_batches(batch_def) -> None:
    """Drop the frame GE's execution engine keeps after a validation (its batch cache holds the last batch's
    data): a partition's view (aggregates of its private rows) must not outlive its validation in a process
    that goes on to other partitions, or, without a cluster, to sanitizing and publishing."""
    manager = batch_def.data_asset.datasource.get_execution_engine().batch_manager
    manager.reset_batch_cache()
    getattr(manager, "_batch_data_cache", {}).clear()  # reset_batch_cache leaves the loaded data (GE 1.x)


def warm_up() -> None:
    """Import Great Expectations and build this process's context (a Dask worker does it while the flow streams
    the input, instead of in its first partition)."""
    rows = {c: np.zeros(1, dtype=np.int64) for c in ("card", "on_ns", "on_stop", "off_ns", "off_stop")}
    from transit_release.config import QualityPolicy

    validate_partitions({"warm/up": partition_aggregates(rows, "19700101")}, QualityPolicy())


def make_data_docs_offline(docs_dir: Path, static_dir: Path | None = None) -> None:
    """Point every Data Docs page under ``docs_dir`` at local copies of its CSS, JavaScript and images, kept in
    ``static_dir`` (default: the site's own ``static/``).

    The vendored files go to ``<static_dir>/vendor/``; of Great Expectations' own static files, only those a page
    loads (its logo and icon) are kept (its animated help images and fonts, about 4 MB a site, are loaded by no
    page of these sites). Each page refers to them by a path relative to itself, so the site still works when the
    folder is copied with ``static_dir`` (e.g. the report's folder), and sites built beside each other share one
    copy. A remote asset that is not in the table (a GE upgrade that changes its templates) is removed rather
    than fetched.
    """
    docs_dir = Path(docs_dir)
    own = docs_dir / "static"  # where GE put its static files
    static = Path(static_dir) if static_dir is not None else own
    shutil.copytree(ASSETS, static / "vendor", dirs_exist_ok=True, ignore=shutil.ignore_patterns("README.md"))
    pages = list(docs_dir.rglob("*.html"))
    used: set[str] = set()  # GE's own static files the pages load, relative to its static folder
    for page in pages:
        prefix = Path(os.path.relpath(static, page.parent)).as_posix()
        ge_prefix = Path(os.path.relpath(own, page.parent)).as_posix()

        def local(match: re.Match) -> str:
            url = match["url"] or match["css"]
            target = _LOCAL_ASSETS.get(url.split("?", 1)[0])
            if target and not target.startswith("vendor/"):  # one of GE's own (its logo)
                used.add(target)
            if match["css"]:
                return f"url('{prefix}/{target}')" if target else "none"
            if target is None:
                return ""
            # integrity/crossorigin make a file:// load a CORS request, which Chromium refuses
            return _CORS_ATTRS.sub("", match[0].replace(url, f"{prefix}/{target}"))

        def shared(match: re.Match) -> str:  # a reference to one of GE's static files: kept, in ``static``
            used.add(match["path"])
            return f"{match['quote']}{prefix}/{match['path']}"

        html = page.read_text(encoding="utf-8")
        offline = _LOADED.sub(local, html)
        if static != own:
            offline = re.sub(rf"""(?P<quote>["'(]){re.escape(ge_prefix)}/(?P<path>(?!vendor/)[^"')?#]+)""", shared,
                             offline)
        else:
            used.update(m["path"] for m in re.finditer(rf"""["'(]{re.escape(ge_prefix)}/(?P<path>(?!vendor/)"""
                                                       r"""[^"')?#]+)""", offline))
        if offline != html:
            page.write_text(offline, encoding="utf-8")
    for path in sorted(used):
        source, target = own / path, static / path
        if source.is_file() and source != target:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    if static != own:
        shutil.rmtree(own, ignore_errors=True)
    else:  # GE's files that no page loads
        for f in [f for f in own.rglob("*") if f.is_file() and not f.relative_to(own).as_posix().startswith("vendor/")
                  and f.relative_to(own).as_posix() not in used]:
            f.unlink()
        for d in sorted((d for d in own.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            if not any(d.iterdir()):
                d.rmdir()
