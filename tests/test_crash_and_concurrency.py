"""Kill the release process between charging and publishing; run four releases at once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transit_release.accounting.ledger import Ledger
from transit_release.cli import main
from transit_release.publish import verify_release

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def api_env(prefect_harness):
    """Environment for subprocesses that use the session's Prefect test server."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return {**os.environ, "PREFECT_API_URL": str(url), "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def release_cmd(week, home: Path, rid: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "transit_release.cli", "release", "--trips", str(week["trips"]),
            "--stops", str(week["stops"]), "--home", str(home), "--release-id", rid, *extra]


def spends_recorded(home: Path) -> bool:
    try:
        con = sqlite3.connect(f"file:{home / 'ledger.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT count(*) FROM entries").fetchone()[0] > 0
        finally:
            con.close()
    except sqlite3.Error:
        return False


def staging_exists(home: Path) -> bool:
    return any((home / "releases").glob(".tmp-*")) if (home / "releases").is_dir() else False


def mlflow_run_exists(home: Path) -> bool:
    try:
        con = sqlite3.connect(f"file:{home / 'mlflow.db'}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT count(*) FROM tags WHERE key = 'release_id'").fetchone()[0] > 0
        finally:
            con.close()
    except sqlite3.Error:
        return False


@pytest.mark.parametrize("point", [spends_recorded, staging_exists, mlflow_run_exists],
                         ids=["after-charge", "while-staging", "after-mlflow-run"])
def test_sigkill_between_charge_and_publish(point, api_env, small_week, tmp_path, capsys):
    home = tmp_path / "home"
    rid = "killed-release"
    proc = subprocess.Popen(release_cmd(small_week, home, rid), env=api_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline and not point(home):
        time.sleep(0.002)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    killed = proc.returncode == -signal.SIGKILL
    if point is not mlflow_run_exists:
        assert killed, "the process finished before the kill point"
    final = home / "releases" / rid
    if killed:
        # no partial release: either nothing under the id, or a complete, intact one
        assert not final.exists() or verify_release(final) == []
    rc = main(["audit", "--home", str(home), "--json"])
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert rc == 0 and result["ok"], result["discrepancies"]
    if not final.exists():
        assert result["charged_not_published"] == {rid: 168}
        assert result["loss"]["trip"]["basic"]["epsilon"] == 8.0  # the charged spend still counts
    # the next run cleans the hidden staging directory and is refused by the budget: the spend counted
    again = subprocess.run(release_cmd(small_week, home, "retry"), env=api_env, capture_output=True, text=True)
    assert again.returncode == 3
    assert "Cannot release 'bus/20160808' without exceeding the budget" in again.stderr


def test_four_releases_at_once_against_a_cap_that_fits_two(api_env, small_week, tmp_path):
    home = tmp_path / "home"
    policy = tmp_path / "policy.yaml"
    policy.write_text("policy:\n  caps:\n    - {name: two-releases, unit_of_privacy: trip, per: partition, "
                      "period: all-time, epsilon: 16, delta: 1.0e-5}\n")
    # a fresh home: the four processes also race to create the MLflow store
    procs = [subprocess.Popen(release_cmd(small_week, home, f"r{i}", "--policy", str(policy)), env=api_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(4)]
    outcomes = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in outcomes)
    assert codes == [0, 0, 3, 3], [e[-2000:] for _, e in outcomes]
    for code, err in outcomes:
        if code == 3:
            assert "transit-release: error: Cannot release 'bus/20160808' without exceeding the budget. " \
                   "Requested: ε=8.000; remaining: ε=0.000; short by ε=8.000" in err
    ledger = Ledger(home / "ledger.sqlite")
    assert ledger.verify() == 2 * 168 + 2
    assert len(ledger.published()) == 2
    assert sorted(p.name for p in (home / "releases").iterdir()) == sorted(ledger.published())
