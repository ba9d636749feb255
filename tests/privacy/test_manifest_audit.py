"""The public manifest must be the same for neighbouring inputs, apart from ids, hashes, timestamps and files.

Everything in a manifest (parameters, thresholds, fan-out, δ, the period) is
published without noise, so it must be a function of public inputs only: for
D and D′ (one record more or replaced) the manifests may differ only in what
identifies the run (release id, creation time, code version's hashes) and in
the file list (hashes and row counts of the noisy files).

Built today at the library level, with the functions a release calls, in the
order its flow calls them (``flows/sequence_release.py``: read → sequence budget
→ plan spend → ``sequence_release.build_manifest``; ``flows/opal_release.py``:
release period → ``opal.build_manifest``); the tasks' plain functions
(``task.fn``) are called directly, no flow runs. The same comparison on the
manifests of two *real* release runs (the CLI, Prefect on the session's shared
server, the ledger) is :func:`test_sequence_manifests_of_two_real_runs`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transit_release.accounting.events import DEFAULT_POPULATION
from transit_release.config import load_release_config
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import read_locations_file, read_taxonomy_file
from transit_release.releases import opal
from transit_release.releases import sequences as sequence_release
from transit_release.version import code_version

pytestmark = pytest.mark.privacy

#: Keys that identify a run rather than describe the release (anywhere in the manifest).
RUN_KEYS = {"release_id", "created_at", "files"}
RUN_KEY_PARTS = ("sha256", "hash", "fingerprint", "timestamp")
CREATED = "2026-01-01T00:00:00+00:00"


def public_view(manifest: dict) -> dict:
    """The manifest without ids, hashes, timestamps and the file list."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if k not in RUN_KEYS and not any(p in k.lower() for p in RUN_KEY_PARTS)}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(manifest)


def differences(a: dict, b: dict, where: str = "") -> list[str]:
    """Paths (``privacy.fanout``) where two public views differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            path = f"{where}.{k}" if where else k
            if k not in a or k not in b:
                out.append(f"{path}: only in {'D′' if k not in a else 'D'}")
            else:
                out.extend(differences(a[k], b[k], path))
        return out
    return [] if a == b else [f"{where}: {a!r} (D) vs {b!r} (D′)"]


def assert_same_public_manifest(m_d: dict, m_d2: dict) -> None:
    diff = differences(public_view(m_d), public_view(m_d2))
    assert not diff, "the public manifest depends on the data: " + "; ".join(diff)


def manifest_of_release_dir(path: Path) -> dict:
    return json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))


# ---- sequences ----------------------------------------------------------------------------------

STATIONS = tuple(f"S{i:02d}" for i in range(1, 14))  # the public network: 13 stations on 4 lines
LINE = {s: "ABCD"[min(i // 3, 3)] for i, s in enumerate(STATIONS)}  # 3, 3, 3, 4 stations


def neighbouring_sequence_files(tmp: Path) -> tuple[Path, Path]:
    """D: 400 passengers over the first 12 stations; D′: D plus one passenger at the 13th."""
    rng = np.random.default_rng(4)
    d = [" ".join(rng.choice(STATIONS[:12], rng.integers(1, 5))) for _ in range(400)]
    (tmp / "d").mkdir()
    (tmp / "d2").mkdir()
    f, f2 = tmp / "d" / "journeys.txt", tmp / "d2" / "journeys.txt"
    f.write_text("\n".join(d) + "\n", encoding="utf-8")
    f2.write_text("\n".join([*d, "S13 S01"]) + "\n", encoding="utf-8")
    return f, f2


def public_taxonomy_file(tmp: Path) -> Path:
    f = tmp / "taxonomy.csv"
    f.write_text("location,group\n" + "".join(f"{s},{LINE[s]}\n" for s in STATIONS), encoding="utf-8")
    return f


def public_locations_file(tmp: Path) -> Path:
    f = tmp / "locations.txt"
    f.write_text("\n".join(STATIONS) + "\n", encoding="utf-8")
    return f


PERIOD = Period(datetime(2026, 1, 1).date(), datetime(2026, 1, 31).date())


def library_sequence_manifest(path: Path, epsilon: float, height: int, variant: str, taxonomy: str | None,
                              fanout: int | None) -> dict:
    """The manifest a sequence release of ``path`` publishes, built as ``flows/sequence_release.py`` builds it:
    the universe (public: the network's locations or taxonomy file) first, the budget from it, then the data."""
    from tasks.sequences import plan_sequence_spend, read_sequences, sequence_budget

    universe = (read_taxonomy_file(taxonomy) if taxonomy
                else read_locations_file(public_locations_file(Path(path).parent.parent)))
    budget, _ = sequence_budget.fn("prefix-tree", universe, epsilon, height, variant, fanout, None, None)
    read_sequences.fn(str(path), universe, 0.01)
    event = plan_sequence_spend.fn("sequences-audit", PERIOD, budget, "fingerprint", code_version(), DEFAULT_POPULATION)
    return sequence_release.build_manifest("sequences-audit", PERIOD, universe, budget, event, "os-entropy",
                                           code_version(), CREATED)


# The finding these cases caught on the code before the public-universe rule: the hybrid fan-out came from the
# data's own |L| (the reader took the universe from the file's tokens), so one passenger at an unused station
# changed the published fan-out, level ε's, thresholds and δ. With the universe an input they are the same.
SEQUENCE_CASES = [
    pytest.param("simple", None, id="simple"),
    pytest.param("hybrid", "fanout", id="hybrid-fanout"),
    pytest.param("hybrid", "taxonomy", id="hybrid-taxonomy"),
]


@pytest.mark.parametrize("variant,tax", SEQUENCE_CASES)
def test_sequence_manifest_is_the_same_for_neighbours(variant, tax, tmp_path):
    f, f2 = neighbouring_sequence_files(tmp_path)
    taxonomy = str(public_taxonomy_file(tmp_path)) if tax == "taxonomy" else None
    fanout = 4 if tax == "fanout" else None
    manifests = [library_sequence_manifest(p, 1.0, 3, variant, taxonomy, fanout) for p in (f, f2)]
    assert_same_public_manifest(*manifests)


def test_the_comparison_sees_what_it_should(tmp_path):
    """Ids, times and files are ignored; a changed parameter is reported with both values."""
    f, _ = neighbouring_sequence_files(tmp_path)
    m = library_sequence_manifest(f, 1.0, 3, "simple", None, None)
    other = {**m, "release_id": "x", "created_at": "y", "files": {"a": {"sha256": "z", "rows": 3}}}
    assert_same_public_manifest(m, other)
    changed = {**m, "privacy": {**m["privacy"], "station_threshold": 99}}
    assert differences(public_view(m), public_view(changed)) == [
        f"privacy.station_threshold: {m['privacy']['station_threshold']!r} (D) vs 99 (D′)"]


@pytest.mark.flow
@pytest.mark.parametrize("variant,tax", SEQUENCE_CASES)
def test_sequence_manifests_of_two_real_runs(variant, tax, prefect_harness, tmp_path, test_seed):
    """The same check on the manifests two real releases publish (the CLI, Prefect, the ledger)."""
    from transit_release.cli import main

    f, f2 = neighbouring_sequence_files(tmp_path)
    locations = ["--locations", str(public_locations_file(tmp_path))]
    extra = {"taxonomy": ["--taxonomy", str(public_taxonomy_file(tmp_path))], "fanout": [*locations, "--fanout", "4"],
             None: locations}[tax]
    manifests = []
    for p in (f, f2):
        home = p.parent / "home"
        rc = main(["sequences", "--input", str(p), "--epsilon", "1", "--height", "3", "--variant", variant,
                   *extra, "--home", str(home), "--queries", "50", "--period-start", "2026-01-01",
                   "--period-end", "2026-01-31"])
        if rc != 0:  # not an AssertionError: a failed run must not count as the expected manifest difference
            pytest.fail(f"the sequence release of {p.parent.name} exited {rc}")
        (rel,) = [d for d in (home / "private" / "test-releases").iterdir() if not d.name.startswith(".")]
        manifests.append(manifest_of_release_dir(rel))
    assert_same_public_manifest(*manifests)


# ---- Opal ---------------------------------------------------------------------------------------

def neighbouring_trips() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A week (Mon 2016-08-08 .. Sun 08-14) of 40 tap-ons a day, and one stray tap-on on Mon 08-15.

    D′ replaces one trip of 08-08 by a second tap-on on 08-15 (replace-one, the Opal relation).
    """
    start = datetime(2016, 8, 8, 7)
    times = [start + timedelta(days=d, minutes=7 * i) for d in range(7) for i in range(40)]
    times.append(datetime(2016, 8, 15, 9))
    d = pd.DataFrame({"tap_on_time": pd.to_datetime(times)})
    d2 = d.copy()
    d2.loc[0, "tap_on_time"] = pd.Timestamp(2016, 8, 15, 10)
    return d, d2


def library_opal_manifest(trips: pd.DataFrame, period_start: str | None, period_end: str | None) -> dict:
    """The manifest an Opal release publishes, built as ``flows/opal_release.py`` builds it."""
    from tasks.screen import release_period

    period = release_period.fn(trips, period_start, period_end)
    config = load_release_config(None)
    return opal.build_manifest(opal.release_id_for(period.start, period.end, config.unit_of_privacy), period, config, "os-entropy",
                               code_version(), CREATED)


def test_opal_manifest_is_the_same_for_neighbours():
    d, d2 = neighbouring_trips()
    assert_same_public_manifest(*(library_opal_manifest(t, "2016-08-08", "2016-08-14") for t in (d, d2)))


def test_a_publishing_run_must_declare_its_period():
    """The finding on the code before: without --period-start/--period-end the period was inferred from the
    tap-on dates, and the stray-day rule (a day counts when it has ≥ 5% of the median day's rows) is a function
    of the data: one trip moved to or from a boundary day changed the published period and the release id.
    A publishing run now refuses to guess; only a dry run may suggest a period."""
    from transit_release.errors import InputDataError

    d, d2 = neighbouring_trips()
    for t in (d, d2):
        with pytest.raises(InputDataError, match="declare the release period with --period-start and --period-end"):
            library_opal_manifest(t, None, None)
