"""Great Expectations gates: raw-data quality before any spend, release checks before publication."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import pandas as pd

from schemas import expectations
from tasks import data_task
from transit_release.config import MARGINALS, ReleaseConfig
from transit_release.errors import InputDataError, TransitReleaseError
from transit_release.files.home import Home
from transit_release.files.partition_store import PartitionDataset
from transit_release.inputs.screening import GateFigures
from transit_release.inputs.streaming import PreparedPartition
from transit_release.preprocessing import location_label, time_label
from transit_release.releases import opal
from transit_release.releases.opal import OUTPUT_COLUMNS


#: The folder beside the two Data Docs sites (``data_docs/raw``, ``data_docs/release``) that holds their pages'
#: styles, scripts and images, once for both.
DOCS_STATIC = "static"


class RawQualityError(InputDataError):
    """The raw-data quality suite failed."""


class ReleaseCheckError(TransitReleaseError):
    """A release table failed its expectations: nothing is published."""


def _failures(result: dict) -> str:
    bad = [f"{suite}: {e['expectation']}({e['column'] or ''}) unexpected {e['unexpected_count']}"
           for suite, r in result["suites"].items() for e in r["expectations"] if not e["success"]]
    return "; ".join(bad[:8])


@data_task(name="check-raw-quality")
def check_raw_quality(home: Home, work: str, release_id: str, figures: GateFigures,
                      prepared: list[PreparedPartition], partitions: list[tuple[str, str]],
                      config: ReleaseConfig) -> dict:
    """The raw-data suites, on what the streaming screen and the partition steps measured: the period's totals
    (rows, each problem's share against the quarantine limit, tap-offs present) and one row per partition of the
    public domain (each passed its own suite, run where it was prepared, and its contracts). One verdict and one
    set of Data Docs in the run's working directory (copied to the report when the release is published); the
    partitions' own results are kept beside them. A failing suite's results are kept next to the quarantine,
    and the error names them."""
    out = Path(work) / "validation"
    n = max(figures.total_rows, 1)
    clean = sum(p.rows for p in prepared)
    totals = pd.DataFrame([{
        "rows": figures.total_rows, "quarantined_share": figures.share,
        "unknown_stop_share": figures.unknown_stop_rows / n, "outside_period_share": figures.outside_rows / n,
        "duplicate_share": figures.counts.get("duplicate", 0) / n,
        "tap_off_missing_share": sum(p.tap_off_missing for p in prepared) / max(clean, 1)}])
    by_partition = {(p.mode, p.date): p for p in prepared}

    def row(m: str, d: str) -> dict:  # a partition of the public domain that was never prepared fails the suite
        p = by_partition.get((m, d))
        return {"partition": f"{m}/{d}", "clean_rows": p.rows if p else 0, "duplicates": p.duplicates if p else 0,
                "checks_passed": bool(p and p.checks.get("success"))}

    rows = pd.DataFrame([row(m, d) for m, d in partitions])
    result = expectations.validate_frames(out / "data_docs" / "raw", {
        "raw_trips": (totals, partial(expectations.totals_suite, config.quality)),
        "raw_trips_partitions": (rows, partial(expectations.partitions_suite, len(partitions)))},
        static_dir=out / "data_docs" / DOCS_STATIC)
    result["partitions"] = {p.label: p.checks for p in prepared}
    (out / "validation-raw.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    if not result["success"]:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        kept = home.quarantine / release_id / f"validation-{stamp}"
        kept.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.move(str(out), kept)
        raise RawQualityError(f"raw-data quality suite failed ({_failures(result)}); "
                              f"see {kept / 'data_docs' / 'raw' / 'index.html'}")
    return result


def _keys_outside(tables: dict[str, pd.DataFrame], times: set[str] | None, locs: dict[str, set[str]]) -> int:
    """How many released rows have a time bin outside ``times`` (unless ``None``) or a location outside its
    mode's ``locs`` (a count only)."""
    n = 0
    for df in tables.values():
        if times is not None and "time" in df.columns:
            n += int((~df["time"].isin(times)).sum())
        if "loc" in df.columns:
            for mode, rows in df.groupby("mode", sort=True):
                n += int((~rows["loc"].isin(locs.get(mode, set()))).sum())
    return n


@data_task(name="check-release-tables")
def check_release_tables(home: Home, work: str, release_id: str, tables: dict[str, pd.DataFrame],
                         outcomes: list[opal.PartitionOutcome], dataset: PartitionDataset,
                         config: ReleaseConfig) -> dict:
    """Exact columns, counts ≥ each marginal's threshold, modes, taps and only public time bins (Great
    Expectations); only locations of the stop table and only keys present in the input (checked here, in plain
    code, counts only).

    Great Expectations renders an expectation's value set into the Data Docs, which are stored with the report and
    in MLflow: the input's stations and time bins there would name what one passenger used even where nothing was
    released, and a large stop table would make pages of megabytes. So the suite gets only the public time bins.
    """
    import numpy as np

    times: set[str] = set()
    locs: dict[str, set[str]] = {}
    for o in outcomes:
        times.update(time_label(o.input_time_bins, dataset.bin_minutes))
        locs.setdefault(o.sanitized.mode, set()).update(
            location_label(o.input_locations, dataset.vocab[o.sanitized.mode]))
    stray = _keys_outside(tables, times, locs)
    if stray:
        raise ReleaseCheckError(f"release tables hold {stray} key(s) that no input trip has; nothing published")
    public_times = sorted(set(time_label(np.arange(-1, dataset.key_space.n_bins), dataset.bin_minutes)))
    public_locs = {m: set(location_label(np.arange(-1, len(v)), v)) for m, v in dataset.vocab.items()}
    off_domain = _keys_outside(tables, None, public_locs)
    if off_domain:  # here rather than in the suite: a stop table of 200,000 names made 27 MB of Data Docs
        raise ReleaseCheckError(f"release tables hold {off_domain} location(s) outside the stop table; "
                                "nothing published")
    frames = {}
    for name, df in tables.items():
        ms = [m for m in MARGINALS if m.output == name]
        thresholds = {m.tap: config.sbh_budget(m.name).threshold for m in ms}
        has_time = ms[0].has_time
        frames[f"release_{name.replace('-', '_')}"] = (df, partial(
            expectations.release_suite, name, OUTPUT_COLUMNS[name], thresholds, config.modes,
            public_times if has_time else None, None))
    out = Path(work) / "validation"
    result = expectations.validate_frames(out / "data_docs" / "release", frames,
                                          static_dir=out / "data_docs" / DOCS_STATIC)
    (out / "validation-release.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    if not result["success"]:
        raise ReleaseCheckError(f"release tables failed their expectations ({_failures(result)}); nothing published")
    return result
