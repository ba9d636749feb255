"""Hardening: crashes at every publication step are repaired, one id never serves two runs, big stop tables are
passed by reference, public CSVs never start a formula, private data is not world-readable, a keyed ledger
resists a forged history, test-seed releases never reach releases/."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import WEEK, WEEK_FLAGS
from transit_release.accounting.ledger import Ledger
from transit_release.cli import main
from transit_release.files.home import Home
from transit_release.files.publish import verify_release
from transit_release.runtime.faults import CRASH_ENV, STEPS

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def api_env(prefect_harness):
    from prefect.settings import get_current_settings

    return {**os.environ, "PREFECT_API_URL": str(get_current_settings().api.url),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def release_cmd(week, home: Path, rid: str, *extra: str, workers: int = 0) -> list[str]:
    """A release command without a Dask cluster by default: these tests are about crashes and concurrency, not the
    cluster (tests/test_scale_out.py), and several of them run at once on the test machine's two cores."""
    return [sys.executable, "-m", "transit_release.cli", "release", "--trips", str(week["trips"]), "--stops",
            str(week["stops"]), "--home", str(home), "--release-id", rid, "--workers", str(workers), *WEEK_FLAGS,
            *extra]


def audit_json(home: Path, capsys) -> dict:
    capsys.readouterr()
    main(["audit", "--home", str(home), "--json"])
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def orphans(home: Path) -> list[int]:
    """Prefect servers started for ``home`` that outlived their command (found by their PREFECT_HOME)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"server" in cmd and f"PREFECT_HOME={home / '.prefect'}".encode() in env:
            found.append(int(proc.name))
    return found


#: Killed in every run: after the charge with a cluster alive (then the id is refused), after the intent with the
#: command's own server (repair completes the publication); the other steps (staging, MLflow run, rename,
#: publication entry, published tag) are marked ``long`` (also run by default; ``-m "not long"`` leaves them out).
CI_STEPS = ("after-charge", "after-intent")


@pytest.mark.parametrize("step", [s if s in CI_STEPS else pytest.param(s, marks=pytest.mark.long) for s in STEPS])
def test_a_kill_at_every_step_is_repaired_and_the_audit_passes(step, api_env, tiny_week, tmp_path, capsys):
    """SIGKILL at each step of charging and publishing; `repair` completes or rolls back; the audit passes; the
    same command afterwards either finds the release published or names what to do."""
    home = tmp_path / "home"
    env = {**api_env, CRASH_ENV: step}
    if step == "after-intent":  # this one runs without a configured API: the command's own server must die with it
        env.pop("PREFECT_API_URL")
    # after-charge: killed with a local cluster of one worker alive (started for the partitions' preparation)
    proc = subprocess.run(release_cmd(tiny_week, home, "killed", workers=1 if step == "after-charge" else 0),
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    if step == "after-intent":
        deadline = time.monotonic() + 20
        while orphans(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert orphans(home) == [], "the killed command left its Prefect server running"
    assert main(["repair", "--home", str(home)]) == 0
    repaired = capsys.readouterr().out
    result = audit_json(home, capsys)
    assert result["ok"], result["discrepancies"]
    assert result["leftovers"] == [] and result["pending_publications"] == []
    final = home / "releases" / "killed"
    published = step in ("after-intent", "after-rename", "after-publication-entry", "after-published-tag")
    assert final.is_dir() == published and (not published or verify_release(final) == [])
    assert ("killed" in result["releases_published"]) == published
    if step in ("after-intent", "after-rename"):
        assert "completed the interrupted publication of killed" in repaired
    if not published:  # charged, never published: the spends count
        assert result["charged_not_published"] == {"killed": 168}
    if step in ("after-charge", "after-rename"):  # the same command afterwards (one case of each outcome)
        again = subprocess.run(release_cmd(tiny_week, home, "killed"), env=api_env, capture_output=True, text=True,
                               timeout=600)
        if published:
            assert again.returncode == 0 and "already published: nothing drawn or spent" in again.stdout
        else:  # the id cannot be reused: its spends count and nothing of it was published
            assert again.returncode == 2 and "release 'killed' was charged by a run that ended without publishing " \
                "it, and no run of it is alive now" in again.stderr  # the killed run holds no lock: it is dead


def test_one_release_id_never_serves_two_runs(api_env, tiny_week, tmp_path):
    """The finding: two runs of one id started 3 s apart shared their working files; the published files came
    from one input while the ledger held the other's fingerprint."""
    home = tmp_path / "home"
    other = tmp_path / "other.csv"
    pd.read_csv(tiny_week["trips"], dtype=str, keep_default_na=False).iloc[:-50].to_csv(other, index=False)
    # output to files, not pipes: waiting on one process while the other fills an unread pipe would hang both
    logs = [tmp_path / f"run{i}.err" for i in range(2)]
    handles = [log.open("w") for log in logs]
    procs = [subprocess.Popen(release_cmd(w, home, "same"), env=api_env, stdout=subprocess.DEVNULL, stderr=h)
             for w, h in zip((tiny_week, {"trips": other, "stops": tiny_week["stops"]}), handles)]
    for h in handles:
        h.close()
    outcomes = sorted((p.wait(timeout=600), log.read_text()) for p, log in zip(procs, logs))
    assert [c for c, _ in outcomes] == [0, 2], outcomes
    # the later run waited for the first (the release's lock), then found the id published from other input
    assert "release 'same' already exists and was made from other input or parameters" in outcomes[1][1]
    ledger = Ledger(home / "ledger.sqlite")
    fingerprints = {e.event().input_fingerprint for e in ledger.spends("same")}
    assert len(fingerprints) == 1 and len(ledger.spends("same")) == 168
    from transit_release.inputs.tables import fingerprint

    key = Home.at(home).fingerprint_key()
    winner = [w for w in (tiny_week["trips"], other) if fingerprint(w, tiny_week["stops"], key=key) in fingerprints]
    assert len(winner) == 1  # the published release's input is the one the ledger charged


def test_a_large_stop_table_is_passed_by_reference_and_formulas_never_reach_the_csv(prefect_harness, tiny_week,
                                                                                   tmp_path, trip_policy):
    """The finding: 200,000 stops were charged, then Prefect refused the subflow's 5.4 MB parameters and 46 MB of
    stderr carried stop names and true counts. Also: stop names such as =HYPERLINK(...) reached the CSVs."""
    from prefect.client.orchestration import get_client

    from flows.opal_release import opal_release

    stops = pd.read_csv(tiny_week["stops"], dtype=str, keep_default_na=False)
    trips = pd.read_csv(tiny_week["trips"], dtype=str, keep_default_na=False)
    busiest = trips.loc[trips["mode"] == "train", "tap_on_stop"].value_counts().index[:3]  # surely released
    trains = stops.index[(stops["mode"] == "train") & stops["stop_id"].isin(busiest)]
    stops.loc[trains, "name"] = ['=HYPERLINK("http://x.test","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)"]
    extra = pd.DataFrame({"stop_id": [str(900_000 + i) for i in range(200_000)], "mode": "train",
                          "name": [f"Unused stop {i}" for i in range(200_000)], "postcode": ""})
    big = tmp_path / "stops.csv"
    pd.concat([stops, extra]).to_csv(big, index=False)
    trips.loc[5, "mode"] = "hovercraft"  # one quarantined row, for the permissions below
    bad = tmp_path / "trips.csv"
    trips.to_csv(bad, index=False)
    home = tmp_path / "home"
    old = os.umask(0o022)  # even a permissive umask must not expose private files
    try:
        summary = opal_release(trips=str(bad), stops=str(big), home=str(home), release_id="big", **WEEK, workers=0,
                               unit="trip", policy=trip_policy)  # the trip level's low thresholds publish the names
    finally:
        os.umask(old)
    assert summary["status"] == "published"
    location = (home / "releases" / "big" / "location.csv").read_text()
    for cell in ("'=HYPERLINK(\"\"http://x.test\"\",\"\"y\"\")", "'+cmd|' /C calc'!A0", "'@SUM(1+1)"):
        assert cell in location or cell.replace('""', '"') in location
    assert not any(line.split(",")[3].startswith(("=", "+", "@")) for line in location.splitlines()[1:])
    assert "single quote" in (home / "releases" / "big" / "DATACARD.md").read_text()

    import asyncio

    async def parameters_of_this_release():
        """The main flow's parameters and every subflow's (the partition steps get the stop table by path)."""
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName
        from prefect.client.schemas.sorting import FlowRunSort

        async with get_client() as client:
            async def runs_of(*names):  # the newest first: this test's runs are among them
                return await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=list(names))),
                                                   sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=20)

            main = [r for r in await runs_of("opal-release") if r.parameters.get("release_id") == "big"]
            subs = [r for r in await runs_of("prepare-partitions", "sanitize-partitions")
                    if str(home) in json.dumps(r.parameters, default=str)]
            return [r.parameters for r in main + subs], len(subs)

    params, n_subflows = asyncio.run(parameters_of_this_release())
    assert params and n_subflows == 2  # prepare-partitions and sanitize-partitions
    assert all(len(json.dumps(p, default=str)) < 20_000 for p in params)
    assert not any("Unused stop" in json.dumps(p, default=str) for p in params)

    # data at rest: raw rows and internal figures are not world-readable
    q = next((home / "private" / "quarantine").rglob("*.parquet"))
    assert stat.S_IMODE(q.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "private").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "release_reports").stat().st_mode) == 0o750
    assert stat.S_IMODE((home / "ledger.sqlite").stat().st_mode) == 0o600
    assert not stat.S_IMODE((home / "mlflow.db").stat().st_mode) & 0o007
    report = home / "release_reports" / "big" / "report.html"
    assert not stat.S_IMODE(report.stat().st_mode) & 0o007
    assert stat.S_IMODE((home / "releases" / "big" / "location.csv").stat().st_mode) == 0o644


def test_test_seed_releases_stay_private_and_a_keyed_ledger_resists_a_forged_history(
        prefect_harness, tiny_week, tmp_path, capsys, test_seed, monkeypatch, trip_policy):
    """Two findings, one release (made with the test seed, on a keyed ledger). Releases made with the test seed
    were published, and from a guessed seed their noise could be subtracted: they now land in
    private/test-releases/, and one moved under releases/ fails the audit. Forged history ("giving budget back"
    with a recomputed chain) passed the audit: with a key outside the home it is caught."""
    import sqlite3

    from transit_release.accounting.ledger_chain import entry_hash
    from transit_release.accounting.ledger_key import KEY_FILE_ENV

    key = tmp_path / "ledger.key"
    key.write_bytes(os.urandom(48).hex().encode())
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    home = tmp_path / "home"
    assert main(["release", "--trips", str(tiny_week["trips"]), "--stops", str(tiny_week["stops"]), "--home",
                 str(home), "--release-id", "seeded", "--workers", "0", "--unit", "trip", "--policy", trip_policy,
                 *WEEK_FLAGS]) == 0
    private = home / "private" / "test-releases" / "seeded"
    assert not (home / "releases" / "seeded").exists()
    assert json.loads((private / "manifest.json").read_text())["noise_source"] == "test-seed"
    result = audit_json(home, capsys)
    assert result["ok"] and result["keyed"] and any("The ledger is keyed" in t for t in result["threat_model"])
    shutil.move(private, home / "releases" / "seeded")
    result = audit_json(home, capsys)
    assert "release: seeded: made with the test-only noise seed but placed under releases/: its noise can be " \
           "regenerated; withdraw it" in result["discrepancies"]
    shutil.move(home / "releases" / "seeded", private)
    # an insider "gives budget back" and re-chains everything: consistent without the key, caught with it
    con = sqlite3.connect(home / "ledger.sqlite")
    for trigger in ("entries_no_update", "entries_spend_is_a_cost"):
        con.execute(f"DROP TRIGGER {trigger}")
    rows = con.execute("SELECT seq, recorded_at, entry_type, release_id, payload FROM entries ORDER BY seq").fetchall()
    prev = "0" * 64
    for seq, at, kind, rid, payload in rows:
        if seq == 1:
            payload = payload.replace('"epsilon":1.0', '"epsilon":0.001')
        digest = entry_hash(prev, seq, at, kind, rid, payload)
        con.execute("UPDATE entries SET payload = ?, prev_hash = ?, hash = ? WHERE seq = ?", (payload, prev, digest, seq))
        prev = digest
    con.commit()
    con.close()
    result = audit_json(home, capsys)
    assert not result["ok"]
    assert any("entry 1's MAC does not match the key" in d for d in result["discrepancies"])
    assert any("the ledger head in its public manifest does not match" in d for d in result["discrepancies"])


def test_the_audit_text_names_leftovers_and_repair_removes_them(prefect_harness, tmp_path, capsys):
    home = tmp_path / "home"
    (home / "releases" / ".tmp-gone-1234abcd").mkdir(parents=True)
    (home / "private" / "work" / "gone-deadbeef").mkdir(parents=True)
    assert main(["audit", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "left behind by a run that stopped: .tmp-gone-1234abcd" in out
    assert "left behind by a run that stopped: private/work/gone-deadbeef" in out
    assert "remove them with: transit-release repair --home <home>" in out
    assert main(["repair", "--home", str(home)]) == 0
    assert "removed private/work/gone-deadbeef" in capsys.readouterr().out
    assert not (home / "releases" / ".tmp-gone-1234abcd").exists()


def test_the_input_fingerprint_on_the_ledger_is_keyed_by_the_home(tmp_path):
    """The finding: the published ledger head chains each spend's payload, whose input fingerprint was a plain
    SHA-256 of the input files, so anyone holding candidate inputs could test them against the published head."""
    import hashlib
    import stat

    from transit_release.inputs.tables import fingerprint

    data = tmp_path / "trips.csv"
    data.write_bytes(b"card_id,mode\n1,bus\n")
    first, second = (Home.at(tmp_path / h).prepare() for h in ("a", "b"))
    mine = fingerprint(data, key=first.fingerprint_key())
    assert mine == fingerprint(data, key=first.fingerprint_key())  # same home, same files: a re-run is recognised
    assert mine != fingerprint(data, key=second.fingerprint_key())
    assert mine != hashlib.sha256(data.read_bytes() + b"\x00").hexdigest()
    assert stat.S_IMODE(first.fingerprint_key_file.stat().st_mode) == 0o600
    assert len(first.fingerprint_key()) == 32 and first.fingerprint_key() != second.fingerprint_key()


def test_spends_recorded_with_the_earlier_fingerprints_are_still_recognised(tmp_path):
    """Fingerprints name their scheme (keyed BLAKE2b) since 2026-11; the spends recorded before carry an
    HMAC-SHA-256 without one. Publishing such a release again from the same input is recognised (nothing drawn
    or spent), from another input it is not; both schemes stay keyed by the home."""
    import hashlib
    import hmac

    from transit_release.inputs.tables import recognising_earlier_fingerprints
    from transit_release.accounting.events import StabilityHistogramEvent
    from transit_release.inputs.tables import fingerprint, legacy_fingerprint

    data, other = tmp_path / "trips.csv", tmp_path / "other.csv"
    data.write_bytes(b"card_id,mode\n1,bus\n")
    other.write_bytes(b"card_id,mode\n2,bus\n")
    home = Home.at(tmp_path / "home").prepare()
    key = home.fingerprint_key()
    old = legacy_fingerprint(data, key=key)
    assert old == hmac.new(key, data.read_bytes() + b"\x00", hashlib.sha256).hexdigest()
    current = fingerprint(data, key=key)
    assert current == "blake2b:" + hashlib.blake2b(data.read_bytes() + b"\x00", key=key, digest_size=32).hexdigest()
    earlier = [StabilityHistogramEvent(
        release_id="before", mode="bus", date="20160808", marginal="tap_on_time", epsilon=1.0, delta=1e-7,
        threshold=34, noise_scale="2", sensitivity=1, unit_of_privacy="trip", neighbouring="replace-one",
        input_fingerprint=old, code_version="0.1.0")]

    def same_as(fp):
        return lambda events: all(e.input_fingerprint == fp for e in events)

    assert not same_as(current)(earlier)  # compared as they are, the schemes differ
    assert recognising_earlier_fingerprints(same_as(current), current, [str(data)], home.fingerprint_key)(earlier)
    elsewhere = fingerprint(other, key=key)
    assert not recognising_earlier_fingerprints(same_as(elsewhere), elsewhere, [str(other)],
                                                home.fingerprint_key)(earlier)


def test_the_test_seed_is_refused_by_a_home_that_holds_public_releases(tmp_path, monkeypatch):
    """The finding: with the test seed set on a production home, a run charged the real ledger and recorded its
    (regenerable) release as published, burning the period."""
    from tasks.home import prepare_home
    from transit_release.errors import ConfigError
    from transit_release.noise import TEST_SEED_ENV

    home = Home.at(tmp_path / "home").prepare()
    (home.releases / "opal-20160808-20160814").mkdir()
    monkeypatch.setenv(TEST_SEED_ENV, "7")
    with pytest.raises(ConfigError, match="TRANSIT_RELEASE_TEST_SEED is set, but .* holds public releases"):
        prepare_home.fn(str(home.root), None)
    assert prepare_home.fn(str(home.root), None, releasing=False).root == home.root  # the audit may still run


def test_no_library_reports_usage_from_a_release_process(monkeypatch):
    """Great Expectations, MLflow 3 and Prefect's client each report usage to their makers unless told not to;
    the command, a release flow and the MLflow client all turn that off, even where the user's environment
    turned it on."""
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY
    from prefect._internal.analytics.ci_detection import CI_ENV_VARS
    from prefect._internal.analytics.enabled import is_telemetry_enabled

    from transit_release.cli import _prepare_environment
    from transit_release.files.home import Home

    for var in CI_ENV_VARS:  # Prefect's client stays quiet in CI by itself: test it as on a custodian's machine
        monkeypatch.delenv(var, raising=False)
    for var in ("PREFECT_HOME", "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "MLFLOW_LOGGING_LEVEL", "GIT_PYTHON_REFRESH",
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR",
                "PREFECT_SERVER_ANALYTICS_ENABLED"):  # restored after the test, whatever the command sets
        monkeypatch.setenv(var, os.environ[var]) if var in os.environ else monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "false")
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "true")
    assert is_telemetry_enabled() and not MLFLOW_DISABLE_TELEMETRY.get()
    _prepare_environment(Home.at(Path("/nonexistent-home")), verbose=False)
    assert not is_telemetry_enabled() and MLFLOW_DISABLE_TELEMETRY.get()
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false" and os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"


def test_no_telemetry_client_whatever_imports_mlflow_first(tmp_path):
    """MLflow starts its telemetry client when it is imported: importing any of this tool's packages first, as
    every entry point does (a Prefect worker running a deployment, a Dask worker, ``serve``), turns it off."""
    from prefect._internal.analytics.ci_detection import CI_ENV_VARS

    env = {k: v for k, v in os.environ.items()
           if k not in CI_ENV_VARS and k not in ("PYTEST_CURRENT_TEST", "DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY")}
    probe = ("import {package}, mlflow, os; from mlflow.telemetry.client import get_telemetry_client; "
             "print(get_telemetry_client() is None, os.environ.get('DO_NOT_TRACK'))")
    for package in ("flows", "tasks", "transit_release"):
        out = subprocess.run([sys.executable, "-c", probe.format(package=package)], env=env, capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        assert out.stdout.split() == ["True", "true"], (package, out.stderr[-2000:])

