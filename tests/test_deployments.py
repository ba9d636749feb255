"""Scheduled releases: prefect.yaml deployed to a real server and run by a worker; the same file served."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import httpx
import pytest
import yaml

from flows.deployments import PROJECT, SchedulerHealth, SchedulerLogWatch, local_server, read_deployments
from transit_release.accounting.ledger import Ledger
from transit_release.errors import ConfigError

EXPECTED = {  # deployment name -> (flow name, cron, time zone)
    "weekly": ("weekly-opal-release", "0 3 * * 1", "Australia/Sydney"),
    "monthly": ("monthly-sequence-release", "0 4 2 * *", "America/Montreal"),
    "weekly-trajectories": ("weekly-trajectory-release", "0 5 * * 1", "America/Montreal"),
    "monthly-sets": ("monthly-set-release", "0 5 2 * *", "America/Montreal"),
    "monthly-audit": ("privacy-audit", "0 6 1 * *", "Australia/Sydney"),
}


def _variables() -> list[str]:
    """Every ``{{ $NAME }}`` of the project's prefect.yaml's deployments."""
    spec = yaml.safe_load((PROJECT / "prefect.yaml").read_text(encoding="utf-8"))
    return sorted(set(re.findall(r"\{\{\s*\$(\w+)\s*\}\}", json.dumps(spec.get("deployments") or []))))


def _env(tmp_path: Path, home: Path, trips_pattern: str, stops: str, **extra) -> dict:
    """The environment a deployment needs: the given paths, and a file under ``tmp_path`` for every other variable
    the file names (so a new deployment's variables are set without editing this helper)."""
    given = {"TRANSIT_RELEASE_HOME": str(home), "TRANSIT_RELEASE_TRIPS_PATTERN": trips_pattern,
             "TRANSIT_RELEASE_STOPS": stops,
             "TRANSIT_RELEASE_SEQUENCES_PATTERN": str(tmp_path / "sequences-{year}-{month}.txt"),
             "TRANSIT_RELEASE_TAXONOMY": str(tmp_path / "taxonomy.csv")}
    others = {v: str(tmp_path / v.lower()) for v in _variables() if v not in given}
    return {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_HOME": str(tmp_path / "client"),
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
            **others, **given, **extra}


def test_the_environment_helper_sets_every_variable_prefect_yaml_names(tmp_path):
    env = _env(tmp_path, tmp_path / "home", "t-{start}.csv", "stops.csv")
    assert {"TRANSIT_RELEASE_SETS_PATTERN", "TRANSIT_RELEASE_LOCATIONS"} <= set(_variables())
    assert all(env.get(v) for v in _variables())


def _deployments(url: str) -> dict[str, dict]:
    # deployments first: a deployment's flow exists before it does, so none can be missing from the flows read
    # after (read before, a flow registered in between was, while serve was still registering them)
    deployments = httpx.post(f"{url}/deployments/filter", json={}).json()
    flows = {f["id"]: f["name"] for f in httpx.post(f"{url}/flows/filter", json={}).json()}
    return {d["name"]: {**d, "flow_name": flows[d["flow_id"]]} for d in deployments}


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
    for var in _variables():
        if var != "TRANSIT_RELEASE_STOPS":
            monkeypatch.setenv(var, "/x")
    with pytest.raises(ConfigError) as refused:
        read_deployments()
    assert str(refused.value) == (f"{PROJECT / 'prefect.yaml'}: deployment 'weekly' reads TRANSIT_RELEASE_STOPS (its "
                                  "parameter stops): set the environment variable(s), or serve only the deployments "
                                  "you need, e.g. --only monthly")


def test_each_deployment_asks_only_for_the_variables_of_its_own_parameters(monkeypatch):
    """The monthly audit alone needs only the home; the others are named with the variables their parameters read."""
    for var in _variables():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRANSIT_RELEASE_HOME", "/srv/transit-release")
    (audit,) = read_deployments(only=["monthly-audit"])
    assert audit["parameters"] == {"home": "/srv/transit-release", "report_folder": "audit-scheduled"}
    with pytest.raises(ConfigError) as refused:
        read_deployments(only=["monthly-audit", "monthly-sets"])
    assert str(refused.value).endswith(": deployment 'monthly-sets' reads TRANSIT_RELEASE_LOCATIONS (its parameter "
                                       "locations), TRANSIT_RELEASE_SETS_PATTERN (its parameter input_pattern): set the "
                                       "environment variable(s)")
    with pytest.raises(ConfigError) as refused:
        read_deployments()
    message = str(refused.value)
    assert "deployment 'weekly' reads TRANSIT_RELEASE_STOPS (its parameter stops), TRANSIT_RELEASE_TRIPS_PATTERN " \
           "(its parameter trips_pattern); " in message and "deployment 'monthly-audit' reads" not in message
    assert message.endswith("or serve only the deployments you need, e.g. --only monthly-audit")
    with pytest.raises(ConfigError, match=r"^--only nope: no such deployment \(the file's are: monthly, monthly-audit, "):
        read_deployments(only=["nope"])


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, small_week):
    """`prefect deploy --all` of prefect.yaml against a real Prefect server on loopback (one per module).

    The server's scheduler loops every second or two instead of every minute, so that it schedules
    soon; what it creates does not depend on how often it runs.
    """
    tmp_path = tmp_path_factory.mktemp("deployed")
    home = tmp_path / "home"
    inbox = tmp_path / "inbox"  # where the agency drops each week's file
    inbox.mkdir()
    shutil.copy(small_week["trips"], inbox / "trips-2016-08-08.csv")
    stops = Path(small_week["stops"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS", "2")
        mp.setenv("PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS", "1")
        server = local_server(tmp_path / "server")
        url = server.__enter__()
    try:
        env = _env(tmp_path, home, str(inbox / "trips-{start}.csv"), str(stops), PREFECT_API_URL=url,
                   PWD=str(PROJECT))

        def prefect(*args, timeout=180):
            done = subprocess.run([sys.executable, "-m", "prefect", *args], cwd=PROJECT, env=env,
                                  capture_output=True, text=True, timeout=timeout)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            return done.stdout

        prefect("work-pool", "create", "transit-release", "--type", "process")
        deployed_at = datetime.now(timezone.utc)
        prefect("--no-prompt", "deploy", "--all")
        yield SimpleNamespace(url=url, home=home, stops=stops, prefect=prefect, deployed_at=deployed_at,
                              server_log=tmp_path / "server" / "server.log")
    finally:
        server.__exit__(None, None, None)


def _cron_times(cron: str, tz: str, after: datetime, until: datetime) -> list[datetime]:
    """The times a five-field cron (numbers, lists, ranges or *) falls on in ``tz``, after ``after`` and up to
    ``until``, in UTC: an oracle written apart from Prefect's (it uses cronsim)."""
    def field(text: str, low: int, high: int) -> set[int] | None:
        if text == "*":
            return None
        out = set()
        for part in text.split(","):
            a, _, b = part.partition("-")
            out |= set(range(int(a), int(b or a) + 1))
        assert out <= set(range(low, high + 1)), f"unsupported cron field {text!r}"
        return out

    minute, hour, dom, month, dow = cron.split()
    minutes, hours = sorted(field(minute, 0, 59) or range(60)), sorted(field(hour, 0, 23) or range(24))
    doms, months, dows = field(dom, 1, 31), field(month, 1, 12), field(dow, 0, 7)
    dows = {d % 7 for d in dows} if dows is not None else None
    zone, out = ZoneInfo(tz), []
    day = after.astimezone(zone).date()
    while datetime.combine(day, datetime.min.time(), zone) <= until:
        cron_dow = (day.weekday() + 1) % 7  # cron: 0 is Sunday
        if doms is not None and dows is not None:  # both restricted: either matches (cron's rule)
            day_ok = day.day in doms or cron_dow in dows
        else:
            day_ok = (doms is None or day.day in doms) and (dows is None or cron_dow in dows)
        if day_ok and (months is None or day.month in months):
            for h in hours:
                for m in minutes:
                    t = datetime(day.year, day.month, day.day, h, m, tzinfo=zone).astimezone(timezone.utc)
                    if after < t <= until:
                        out.append(t)
        day += timedelta(days=1)
    return out


def _scheduled_runs(url: str, deployment_id: str) -> list[dict]:
    runs = httpx.post(f"{url}/flow_runs/filter", json={"flow_runs": {"deployment_id": {"any_": [deployment_id]}},
                                                        "sort": "EXPECTED_START_TIME_ASC"}, timeout=30).json()
    return [r for r in runs if r["auto_scheduled"]]


def test_the_scheduler_itself_creates_the_upcoming_runs_of_every_deployment_in_prefect_yaml(deployed):
    """After `prefect deploy --all`, Prefect's scheduler service (not the test) creates the runs that fall due,
    at the cron's times in each deployment's time zone; nobody creates a run by hand here."""
    spec = yaml.safe_load((PROJECT / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]
    by_name = _deployments(deployed.url)
    scheduled = {d["name"]: d for d in spec if d.get("schedules")}
    assert scheduled, "prefect.yaml has no scheduled deployment"
    deadline, runs = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        runs = {name: _scheduled_runs(deployed.url, by_name[name]["id"]) for name in scheduled}
        if all(len(r) >= 3 for r in runs.values()):  # the scheduler keeps at least 3 upcoming runs
            break
        time.sleep(1)
    log = deployed.server_log.read_text(encoding="utf-8", errors="replace") if deployed.server_log.exists() else ""
    errors = [line for line in log.splitlines() if line.startswith(("sqlalchemy.", "sqlite3."))][-1:]
    assert all(runs.values()), ("the scheduler created no run for "
                                f"{sorted(n for n, r in runs.items() if not r)}; server log: {errors}")
    for name, d in scheduled.items():
        deployment = by_name[name]
        (schedule,) = d["schedules"]
        (server_schedule,) = deployment["schedules"]
        for run in runs[name]:
            assert run["state_type"] == "SCHEDULED" and run["state_name"] == "Scheduled"
            assert run["created_by"]["type"] == "SCHEDULE" and run["created_by"]["id"] == server_schedule["id"]
            assert run["parameters"] == deployment["parameters"]
        times = [datetime.fromisoformat(r["expected_start_time"]) for r in runs[name]]
        # the next consecutive occurrences of the cron after the deployment, none skipped
        assert len(times) >= 3
        assert times == _cron_times(schedule["cron"], schedule["timezone"], deployed.deployed_at, times[-1]), name
        zone = ZoneInfo(schedule["timezone"])
        minute, hour = (int(x) for x in schedule["cron"].split()[:2])
        assert {(t.astimezone(zone).hour, t.astimezone(zone).minute) for t in times} == {(hour, minute)}


def test_the_cron_oracle_follows_the_time_zone_and_cron_day_rules():
    after = datetime(2026, 3, 25, tzinfo=timezone.utc)
    weekly = _cron_times("0 3 * * 1", "Australia/Sydney", after, after + timedelta(days=15))
    # Sydney leaves daylight saving on 5 April 2026: Monday 03:00 is 16:00 UTC the day before, then 17:00
    assert weekly == [datetime(2026, 3, 29, 16, tzinfo=timezone.utc), datetime(2026, 4, 5, 17, tzinfo=timezone.utc)]
    assert _cron_times("0 4 2 * *", "America/Montreal", after, after + timedelta(days=40)) == \
        [datetime(2026, 4, 2, 8, tzinfo=timezone.utc), datetime(2026, 5, 2, 8, tzinfo=timezone.utc)]


@pytest.mark.long  # Prefect's own deploy-and-worker path; CI runs the schedules through the scheduler and serve
def test_prefect_deploy_all_on_a_real_server_then_a_worker_runs_the_weekly_release(deployed):
    """`prefect deploy --all` against a Prefect server on loopback; a process worker runs one week."""
    url, home, stops = deployed.url, deployed.home, deployed.stops
    deployments = _deployments(url)
    _check_schedules(deployments)
    assert {d["work_pool_name"] for d in deployments.values()} == {"transit-release"}
    weekly = deployments["weekly"]
    assert weekly["parameters"]["stops"] == str(stops)
    assert weekly["parameters"]["home"] == str(home)
    assert weekly["parameters"]["workers"] == 2  # sanitized on a local Dask cluster of 2 processes

    # one run of the weekly release for the synthetic week (8–14 Aug 2016), by a worker
    run = _create_run(url, weekly["id"], {"week_of": "2016-08-10"})
    deployed.prefect("worker", "start", "--pool", "transit-release", "--run-once", timeout=600)
    final = _wait_for_run(url, run["id"], 60)
    assert final["state_type"] == "COMPLETED", final["state"]
    manifests = list((home / "releases").glob("*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["period"] == {"start": "2016-08-08", "end": "2016-08-14"}
    assert manifest["privacy"]["unit_of_privacy"] == "card"  # the scheduled release follows the README's recommendation
    assert manifest["release_id"] in (home / "release_reports" / "index.html").read_text()
    assert not (home / "private" / "work").exists() or not any((home / "private" / "work").iterdir())


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
    lines: list[str] = []  # read as it comes: a full pipe would block serve
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = {n: d for n, d in _deployments(url).items() if n in EXPECTED}
            if len(found) == len(EXPECTED):
                break
            assert proc.poll() is None, "".join(lines)[-3000:]
            time.sleep(1)
        _check_schedules(found)
        run = _create_run(url, found["monthly-audit"]["id"])
        final = _wait_for_run(url, run["id"], 180)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("scheduler OK" in line for line in list(lines)):
            assert proc.poll() is None, "".join(lines)[-3000:]
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    output = "".join(lines)
    # serve checked that the scheduler created the upcoming runs, and said when the next ones are
    (ok,) = [line for line in output.splitlines() if "scheduler OK" in line]
    assert all(f"{name} 20" in ok for name in EXPECTED), ok
    assert "transit-release serve: ERROR" not in output, output[-3000:]  # no scheduler failure reported
    assert final["state_type"] == "COMPLETED", (final["state"].get("message"), [l for l in output.splitlines() if "Error" in l or "error" in l][:20])
    audits = list((home / "release_reports").glob("audit-*/audit.html"))
    assert len(audits) == 1
    assert "PASSED" in (home / "release_reports" / "index.html").read_text()


# what Prefect 3.8's server logs when SQLAlchemy 2.1 refuses its scheduler's insert (traceback shortened)
_FAILED_LOOP = """\
10:49:55.610 | ERROR   | docket.dependencies - \u21a9 [   167ms] schedule_deployments(){schedule_deployments}
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/docket/worker.py", line 1134, in _execute
    result = await execution.function(
  File "/venv/lib/python3.11/site-packages/sqlalchemy/ext/hybrid.py", line 1851, in prop
    raise exc.InvalidRequestError(
sqlalchemy.exc.InvalidRequestError: Can't evaluate bulk DML statement; please supply a bulk_dml decorated function
10:49:56.001 | INFO    | uvicorn.access - 127.0.0.1 - "GET /api/health HTTP/1.1" 200
10:49:57.100 | ERROR   | prefect.server.api.server - Some other failure
Traceback (most recent call last):
  File "x.py", line 1, in f
ValueError: not the scheduler
"""


def test_the_server_log_watch_reports_each_failed_scheduler_loop_in_one_line():
    seen: list[str] = []
    watch = SchedulerLogWatch(seen.append)
    for line in (_FAILED_LOOP * 2).splitlines(keepends=True):
        watch.feed(line)
    assert seen == ["schedule_deployments: sqlalchemy.exc.InvalidRequestError: Can't evaluate bulk DML statement; "
                    "please supply a bulk_dml decorated function"] * 2
    out = io.StringIO()
    health = SchedulerHealth(log_path=Path("/srv/x/.prefect/server.log"), out=out)
    for summary in seen + ["schedule_recent_deployments: other"]:
        health.error(summary)
    lines = out.getvalue().splitlines()  # the same error at most once a minute
    assert len(lines) == 2 and len(health.errors) == 3
    assert lines[0].startswith("transit-release serve: ERROR: the Prefect scheduler failed")
    assert lines[0].endswith("(server log: /srv/x/.prefect/server.log)")


def test_serve_stops_with_a_one_line_error_when_the_scheduler_fails(tmp_path):
    """A scheduler that fails (here: its database refuses the runs it creates) stops `serve` at start-up
    with exit 2 and the scheduler's error, instead of serving in silence."""
    home = tmp_path / "home"
    prefect_home = home / ".prefect"  # where `serve` keeps its local server's database
    env = _env(tmp_path, home, str(tmp_path / "trips-{start}.csv"), str(tmp_path / "stops.csv"),
               PREFECT_HOME=str(prefect_home))
    env.pop("PREFECT_API_URL", None)  # `serve` starts its own server
    prefect_home.mkdir(parents=True)
    made = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    with sqlite3.connect(prefect_home / "prefect.db") as db:
        db.execute("CREATE TRIGGER refuse_scheduled_runs BEFORE INSERT ON flow_run WHEN NEW.auto_scheduled "
                   "BEGIN SELECT RAISE(ABORT, 'test: scheduled runs refused'); END")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "transit_release.cli", "serve", "--home", str(home)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("transit-release")]
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    assert errors[-1].startswith("transit-release: error: the Prefect scheduler failed: schedule_"), errors
    assert "test: scheduled runs refused" in errors[-1]
    assert time.monotonic() - started < 120  # reported when it fails, not after a long wait
    assert "test: scheduled runs refused" in (prefect_home / "server.log").read_text(encoding="utf-8")


def test_a_new_homes_server_starts_from_the_empty_database_template(tmp_path, monkeypatch):
    """The first server on a new database keeps a snapshot of it (schema and block types only) in the cache;
    the next new home's server starts from a copy instead of running Prefect's migrations, and works."""
    import sqlite3

    from flows import deployments
    from transit_release.files.home import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    seeded = []
    seed = deployments._seed_server_db
    monkeypatch.setattr(deployments, "_seed_server_db", lambda db: seeded.append(seed(db)) or seeded[-1])
    with local_server(tmp_path / "first"):
        pass
    template = deployments.server_db_template()
    assert seeded == [False] and template.exists()
    with sqlite3.connect(template) as db:
        filled = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if db.execute(f'SELECT EXISTS (SELECT 1 FROM "{t}")').fetchone()[0]}
    assert filled == {"alembic_version", "block_schema", "block_schema_reference", "block_type"}
    with local_server(tmp_path / "second") as url:
        made = httpx.post(f"{url}/flows/", json={"name": "template-check"}, timeout=30)
        assert made.status_code in (200, 201), made.text[:500]
        assert httpx.post(f"{url}/block_types/filter", json={}, timeout=30).json()
    assert seeded == [False, True]
    with sqlite3.connect(template) as db:  # the template itself is never written to
        assert not db.execute("SELECT EXISTS (SELECT 1 FROM flow)").fetchone()[0]


class Served:
    """A ``transit-release serve`` process; its output read as it comes (a full pipe would block it)."""

    def __init__(self, args: list[str], cwd: Path, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-m", "transit_release.cli", "serve", *args], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, what, timeout: float = 240) -> list[str]:
        """The output's lines once ``what(lines)`` holds."""
        deadline = time.monotonic() + timeout
        while not what([line.rstrip("\n") for line in list(self.lines)]):
            assert self.proc.poll() is None, self.output()[-3000:]
            assert time.monotonic() < deadline, self.output()[-3000:]
            time.sleep(0.5)
        return [line.rstrip("\n") for line in list(self.lines)]

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C, as a custodian stops it
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.reader.join(timeout=10)


def _outcomes(lines: list[str], deployment: str) -> list[str]:
    prefix = f"transit-release serve: {deployment} run "
    return [line.split(": ", 2)[2] for line in lines if line.startswith(prefix)]


def _run_hint(lines: list[str], deployment: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """Run serve's printed hint for ``deployment`` exactly as printed, in a shell, in a terminal that knows nothing
    of the server (no PREFECT_API_URL)."""
    (hint,) = [line for line in lines if line.startswith(f"transit-release serve: to start a run of {deployment} now: ")]
    command = hint.split(" now: ", 1)[1]
    env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    return done


def _logs(url: str, run_id: str) -> list[str]:
    return [entry["message"] for entry in httpx.post(f"{url}/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}, timeout=30).json()]


def test_two_served_runs_of_one_release_race_and_the_later_ends_published_by_another_run(tmp_path, tiny_week):
    """A deployments file from anywhere (its entrypoints are the project's) served on a configured Prefect server:
    ``--run-now`` fires two runs of the same week at once (a cron run and a run-now, two workers, a retry: the same
    race) and a run of a week without input; serve's runner executes them (the test creates no run). The first run
    pauses after its charge until the test has seen the second one wait for it; the second then ends as
    "published by another run" (exit 0, nothing spent). The refused run's state, logs and outcome artifact on the
    server say its class and exit code only; serve prints its full line, which the home's private run log keeps.
    The audit is then started with serve's printed `prefect deployment run` hint, as printed."""
    from transit_release.runtime.faults import PAUSE_ENV, PAUSE_FILE_ENV

    home, inbox, elsewhere, cue = tmp_path / "home", tmp_path / "inbox", tmp_path / "ops", tmp_path / "cue"
    inbox.mkdir()
    elsewhere.mkdir()
    shutil.copy(tiny_week["trips"], inbox / "trips-2016-08-08.csv")
    weekly = {"entrypoint": "flows/scheduled.py:weekly_opal_release",
              "parameters": {"trips_pattern": str(inbox / "trips-{start}.csv"), "stops": str(tiny_week["stops"]),
                             "home": str(home), "week_of": "2016-08-08", "workers": 0},
              "schedules": [{"cron": "0 3 * * 1", "timezone": "UTC"}]}
    (elsewhere / "try.yaml").write_text(yaml.safe_dump({"deployments": [
        {"name": "try-weekly", **weekly},
        {"name": "try-missing-week", **weekly, "parameters": {**weekly["parameters"], "week_of": "2016-08-15"}},
        {"name": "try-audit", "entrypoint": "flows/audit.py:privacy_audit", "parameters": {"home": str(home)},
         "schedules": [{"cron": "0 6 1 * *", "timezone": "UTC"}]}]}), encoding="utf-8")
    with local_server(tmp_path / "server") as url:
        env = _env(tmp_path, home, str(tmp_path / "trips-{start}.csv"), str(tmp_path / "stops.csv"),
                   PREFECT_API_URL=url, PREFECT_LOGGING_LEVEL="INFO",  # the runs' INFO lines reach the server
                   **{PAUSE_ENV: "after-charge", PAUSE_FILE_ENV: str(cue)})
        bad = subprocess.run([sys.executable, "-m", "transit_release.cli", "serve", "--home", str(home),
                              "--deployments", str(elsewhere / "try.yaml"), "--run-now", "nope"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
            "transit-release: error: --run-now nope: no such deployment served (they are: try-audit, "
            "try-missing-week, try-weekly)")
        served = Served(["--home", str(home), "--deployments", str(elsewhere / "try.yaml"), "--run-now", "try-weekly",
                         "--run-now", "try-weekly", "--run-now", "try-missing-week"], elsewhere, env)
        try:
            deadline = time.monotonic() + 300
            while not cue.exists():  # the first run of the week has charged, and waits there
                assert served.proc.poll() is None and time.monotonic() < deadline, served.output()[-3000:]
                time.sleep(0.5)
            # the second run says so in its release's log (the scheduled run's subflow)
            while not any("waiting for another run of it to end" in entry["message"] for entry in httpx.post(
                    f"{url}/logs/filter", json={"limit": 200, "sort": "TIMESTAMP_DESC"}, timeout=30).json()):
                assert served.proc.poll() is None and time.monotonic() < deadline, served.output()[-3000:]
                time.sleep(0.5)
            cue.unlink()  # the first run goes on and publishes
            lines = served.wait_for(lambda ls: len(_outcomes(ls, "try-weekly")) == 2
                                    and _outcomes(ls, "try-missing-week"))
            hinted = _run_hint(lines, "try-audit", tmp_path, env)
            lines = served.wait_for(lambda ls: _outcomes(ls, "try-audit"))
        finally:
            served.stop()
        output = served.output()
        assert "Traceback" not in output and "FileNotFoundError" not in output, output[-3000:]
        print("\n".join(line for line in lines if line.startswith("transit-release serve: try-")))
        first, second = sorted(_outcomes(lines, "try-weekly"), key=lambda line: not line.startswith("published opal"))
        assert re.fullmatch(r"published opal-card-20160808-20160814: \S+ rows in 3 file\(s\), ε=8, δ=6e-09 per card; "
                            rf"{re.escape(str(home))}/releases/opal-card-20160808-20160814 \(exit 0\)", first), first
        assert second == ("published by another run: opal-card-20160808-20160814 (ε=8, δ=6e-09 per card), while this "
                          "run waited for it; nothing drawn or spent (exit 0)")
        (missing,) = _outcomes(lines, "try-missing-week")  # the full line on serve's terminal
        assert missing == (f"refused: no input for the period 2016-08-15..2016-08-21: {inbox}/trips-2016-08-15.csv "
                           "does not exist (exit 2)")
        (audit,) = _outcomes(lines, "try-audit")
        assert re.fullmatch(r"audit PASSED: 169 ledger entries, 1 published release\(s\), 0 discrepancy\(ies\); "
                            r"report .*audit\.html \(exit 0\)", audit), audit
        assert "Created flow run" in hinted.stdout
        ledger = Ledger(home / "ledger.sqlite", key=b"", read_only=True)
        assert len(ledger.spends()) == 168 and list(ledger.published()) == ["opal-card-20160808-20160814"]
        # what the configured server holds of the refused run: its class and exit code, nothing of the message
        deployment = _deployments(url)["try-missing-week"]
        (run,) = httpx.post(f"{url}/flow_runs/filter", json={"flow_runs": {"deployment_id": {
            "any_": [deployment["id"]]}, "state": {"type": {"any_": ["FAILED"]}}}}, timeout=30).json()
        assert run["state"]["message"] == ("Flow run encountered an exception: InputDataError: refused: "
                                           "InputDataError, exit 2")
        artifacts = httpx.post(f"{url}/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}},
                               timeout=30).json()
        (artifact,) = [a for a in artifacts if a["key"] == "outcome-weekly-opal-release"]
        run_log = home / "private" / "run-log.jsonl"
        assert artifact["description"] == f"refused: InputDataError, exit 2 (the full line: {run_log})"
        task_runs = httpx.post(f"{url}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}},
                               timeout=30).json()
        stored = [run["state"]["message"], artifact["description"], artifact["data"], *_logs(url, run["id"]),
                  *(t["state"]["message"] or "" for t in task_runs)]
        assert any("refused: InputDataError, exit 2" in m for m in _logs(url, run["id"]))
        assert not [m for m in stored if "does not exist" in m or "2016-08-15.csv" in m], stored
        full = [json.loads(line) for line in run_log.read_text(encoding="utf-8").splitlines()]
        assert {(e["flow_run_id"], e["line"]) for e in full} >= {(run["id"], missing)}
        # nor is the refusal kept pickled in the home's result storage (Prefect's engine writes a failed run's there)
        assert not [p for p in (home / ".prefect" / "storage").glob("*") if p.is_file()]


def test_serve_of_the_audit_alone_from_prefect_yaml_outside_the_project_serves_the_ui_and_its_hints_run(tmp_path):
    """As a custodian would, from outside the repository, with none of the deployments' variables set and a home
    that does not exist yet: `serve --only monthly-audit` asks for nothing else, starts its own server, which serves
    Prefect's UI at the printed link, prints no warning about Prefect's home, and its printed `prefect deployment
    run` hint, run as printed in a terminal without PREFECT_API_URL, starts a run that serve executes."""
    from transit_release.files.home import CACHE_ENV

    home, elsewhere = tmp_path / "new-home", tmp_path / "ops"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRANSIT_RELEASE_", "PREFECT_API", "PREFECT_HOME"))}
    env = {**env, CACHE_ENV: os.environ[CACHE_ENV], "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    served = Served(["--home", str(home), "--deployments", str(PROJECT / "prefect.yaml"), "--only", "monthly-audit"],
                    elsewhere, env)
    try:
        lines = served.wait_for(lambda ls: any(" to start a run of monthly-audit now: " in line for line in ls))
        (address,) = [line for line in lines if line.startswith("transit-release serve: Prefect API ")]
        api, ui = re.fullmatch(r"transit-release serve: Prefect API (\S+) \(its log: .*\); Prefect UI (\S+)",
                               address).groups()
        page = httpx.get(ui, headers={"Accept": "text/html"}, follow_redirects=True, timeout=30)  # as a browser asks
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert httpx.get(f"{ui}ui-settings", timeout=30).json()["api_url"] == api  # the UI talks to this server
        hinted = _run_hint(lines, "monthly-audit", elsewhere, {**env, "PREFECT_HOME": str(tmp_path / "terminal")})
        lines = served.wait_for(lambda ls: _outcomes(ls, "monthly-audit"))
        running = served.output()
    finally:
        served.stop()
    output = served.output()
    assert "Failed to create the Prefect home directory" not in output and "Warning" not in running, output[-3000:]
    assert "Traceback" not in output and "[DEPLOYMENT_NAME]" not in output, output[-3000:]
    assert "Created flow run" in hinted.stdout and ui.rstrip("/") in hinted.stdout  # Prefect's own link, this UI
    (audit,) = _outcomes(lines, "monthly-audit")
    assert re.fullmatch(r"audit PASSED: 0 ledger entries, 0 published release\(s\), 0 discrepancy\(ies\); report "
                        rf"{re.escape(str(home))}/release_reports/audit-scheduled/audit\.html \(exit 0\)", audit), audit
