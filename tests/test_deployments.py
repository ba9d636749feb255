"""Scheduled releases: prefect.yaml deployed to a real server and run by a worker; the same file served."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from flows.deployments import PROJECT, local_server, read_deployments
from transit_release.errors import ConfigError

EXPECTED = {  # deployment name -> (flow name, cron, time zone)
    "weekly": ("weekly-opal-release", "0 3 * * 1", "Australia/Sydney"),
    "monthly": ("monthly-sequence-release", "0 4 2 * *", "America/Montreal"),
    "monthly-audit": ("privacy-audit", "0 6 1 * *", "Australia/Sydney"),
}


def _env(tmp_path: Path, home: Path, trips_pattern: str, stops: str, **extra) -> dict:
    return {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_HOME": str(tmp_path / "client"),
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
            "TRANSIT_RELEASE_HOME": str(home), "TRANSIT_RELEASE_TRIPS_PATTERN": trips_pattern,
            "TRANSIT_RELEASE_STOPS": stops,
            "TRANSIT_RELEASE_SEQUENCES_PATTERN": str(tmp_path / "sequences-{year}-{month}.txt"),
            "TRANSIT_RELEASE_TAXONOMY": str(tmp_path / "taxonomy.csv"), **extra}


def _deployments(url: str) -> dict[str, dict]:
    flows = {f["id"]: f["name"] for f in httpx.post(f"{url}/flows/filter", json={}).json()}
    return {d["name"]: {**d, "flow_name": flows[d["flow_id"]]}
            for d in httpx.post(f"{url}/deployments/filter", json={}).json()}


def _wait_for_run(url: str, run_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = httpx.get(f"{url}/flow_runs/{run_id}").json()
        if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run
        time.sleep(1)
    raise AssertionError(f"flow run {run_id} did not finish within {timeout} s")


def _check_schedules(deployments: dict[str, dict]) -> None:
    assert set(deployments) == set(EXPECTED)
    for name, (flow_name, cron, tz) in EXPECTED.items():
        d = deployments[name]
        assert d["flow_name"] == flow_name
        assert [(s["schedule"]["cron"], s["schedule"]["timezone"], s["active"]) for s in d["schedules"]] == \
            [(cron, tz, True)]


def test_a_deployment_parameter_without_its_environment_variable_is_named(monkeypatch):
    monkeypatch.delenv("TRANSIT_RELEASE_STOPS", raising=False)
    for var in ("TRANSIT_RELEASE_HOME", "TRANSIT_RELEASE_TRIPS_PATTERN", "TRANSIT_RELEASE_SEQUENCES_PATTERN",
                "TRANSIT_RELEASE_TAXONOMY"):
        monkeypatch.setenv(var, "/x")
    with pytest.raises(ConfigError, match="set the environment variable\\(s\\) TRANSIT_RELEASE_STOPS"):
        read_deployments()


def test_prefect_deploy_all_on_a_real_server_then_a_worker_runs_the_weekly_release(tmp_path, small_week):
    """`prefect deploy --all` against a Prefect server on loopback; a process worker runs one week."""
    home = tmp_path / "home"
    inbox = tmp_path / "inbox"  # where the agency drops each week's file
    inbox.mkdir()
    shutil.copy(small_week["trips"], inbox / "trips-2016-08-08.csv")
    stops = Path(small_week["stops"])
    with local_server(tmp_path / "server") as url:
        env = _env(tmp_path, home, str(inbox / "trips-{start}.csv"), str(stops), PREFECT_API_URL=url,
                   PWD=str(PROJECT))

        def prefect(*args, timeout=180):
            done = subprocess.run([sys.executable, "-m", "prefect", *args], cwd=PROJECT, env=env,
                                  capture_output=True, text=True, timeout=timeout)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            return done.stdout

        prefect("work-pool", "create", "transit-release", "--type", "process")
        prefect("--no-prompt", "deploy", "--all")
        deployments = _deployments(url)
        _check_schedules(deployments)
        assert {d["work_pool_name"] for d in deployments.values()} == {"transit-release"}
        weekly = deployments["weekly"]
        assert weekly["parameters"]["stops"] == str(stops)
        assert weekly["parameters"]["home"] == str(home)
        assert weekly["parameters"]["workers"] == 2  # sanitized on a local Dask cluster of 2 processes

        # one run of the weekly release for the synthetic week (8–14 Aug 2016), by a worker
        run = _create_run(url, weekly["id"], {"week_of": "2016-08-10"})
        prefect("worker", "start", "--pool", "transit-release", "--run-once", timeout=600)
        final = _wait_for_run(url, run["id"], 60)
        assert final["state_type"] == "COMPLETED", final["state"]
    manifests = list((home / "releases").glob("*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["period"] == {"start": "2016-08-08", "end": "2016-08-14"}
    assert manifest["release_id"] in (home / "release_reports" / "index.html").read_text()
    assert not (home / "private" / manifest["release_id"] / "partitions").exists()


def test_transit_release_serve_runs_the_same_schedules_and_executes_a_run(tmp_path):
    # a full server (as `serve` starts by itself when no API is configured): its scheduler and run
    # bookkeeping are the ones a served deployment relies on
    with local_server(tmp_path / "server") as url:
        _serve_and_run_the_audit(tmp_path, url)


def _create_run(url: str, deployment_id: str, parameters: dict | None = None, attempts: int = 3) -> dict:
    """Create a run of a deployment; a server error (SQLite busy on a loaded 2-core machine) creates nothing
    and is retried, anything else fails with the server's answer."""
    for attempt in range(attempts):
        resp = httpx.post(f"{url}/deployments/{deployment_id}/create_flow_run",
                          json={"parameters": parameters or {}}, timeout=60)
        if resp.status_code < 500 or attempt == attempts - 1:
            break
        time.sleep(2)
    assert resp.status_code == 201, (resp.status_code, resp.text[:2000])
    return resp.json()


def _serve_and_run_the_audit(tmp_path: Path, url: str) -> None:
    home = tmp_path / "home"
    env = _env(tmp_path, home, str(tmp_path / "trips-{start}.csv"), str(tmp_path / "stops.csv"),
               PREFECT_API_URL=url)
    proc = subprocess.Popen([sys.executable, "-m", "transit_release.cli", "serve", "--home", str(home)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = {n: d for n, d in _deployments(url).items() if n in EXPECTED}
            if len(found) == len(EXPECTED):
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(1)
        _check_schedules(found)
        run = _create_run(url, found["monthly-audit"]["id"])
        final = _wait_for_run(url, run["id"], 180)
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    assert final["state_type"] == "COMPLETED", (final["state"].get("message"), [l for l in output.splitlines() if "Error" in l or "error" in l][:20])
    audits = list((home / "release_reports").glob("audit-*/audit.html"))
    assert len(audits) == 1
    assert "PASSED" in (home / "release_reports" / "index.html").read_text()
