"""The deployments of ``prefect.yaml``, served from one local process (``transit-release serve``).

``prefect deploy --all`` registers the deployments of ``prefect.yaml`` with a
Prefect server, and workers of the process pool run them. ``serve`` reads the
same file (same names, parameters and cron schedules, ``{{ $NAME }}`` filled from
the environment exactly as ``prefect deploy`` does) and runs them with Prefect's
``serve``: one process that both holds the schedules and executes the runs. Prefect's
scheduler service creates the scheduled runs, so ``serve`` needs a server: the one
``PREFECT_API_URL`` names, or else a local one it starts on loopback for as long as
it runs (its database and its log, ``server.log``, under ``<home>/.prefect``), which
serves Prefect's UI too. Each deployment needs only the environment variables of its
own parameters, and ``only`` serves some of them; once the scheduler works, the command
that starts a run of each deployment from another terminal is printed, with the API's
address in it.

A scheduler that creates no runs leaves a served process looking healthy while nothing
ever runs, so ``serve`` checks it: at start-up, every served deployment with an active
schedule must get its upcoming runs from the scheduler within ``startup_timeout``, or
``serve`` stops with a ``SchedulerError`` (exit 2) before any run has started. Later,
the local server's scheduler errors are reported on stderr, one line each (at most one a
minute for the same error), and serving goes on: runs in flight and runs already
scheduled still execute, whereas stopping would abort a release that may already have
charged the ledger.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import yaml

from transit_release.errors import ConfigError, TransitReleaseError
from transit_release.runtime.subprocesses import die_with_parent
from transit_release.runtime.telemetry import OFF as TELEMETRY_OFF

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = PROJECT / "prefect.yaml"
_UNRESOLVED = re.compile(r"\{\{\s*\$(\w+)\s*\}\}")
# Prefect's server logs a failed service loop as an ERROR record naming the service, then the traceback
_SCHEDULER_SERVICES = ("schedule_deployments", "schedule_recent_deployments", "services.scheduler")
_LOG_RECORD = re.compile(r"^\d{2}:\d{2}:\d{2}(?:\.\d+)? \| (?P<level>[A-Z]+)\s*\| (?P<message>.*)")
_TRACEBACK_HEADERS = ("Traceback", "The above exception", "During handling")


class SchedulerError(TransitReleaseError):
    """Prefect's scheduler does not create the served deployments' runs."""


def read_deployments(path: str | Path = DEFAULT_FILE, only: Sequence[str] = ()) -> list[dict]:
    """The deployments of a ``prefect.yaml`` (those named in ``only``, if any), with ``{{ $NAME }}`` taken from the
    environment. Each deployment needs only the variables of its own parameters: one that lacks any is refused
    with the variables and the parameters they set, and ``only`` serves the others without them."""
    from prefect.utilities.templating import apply_values

    path = Path(path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read deployments from {path}: {exc}") from None
    raw = (spec or {}).get("deployments") or []
    if not raw:
        raise ConfigError(f"{path} defines no deployments")
    names = [str(d.get("name")) for d in raw]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ConfigError(f"--only {unknown[0]}: no such deployment (the file's are: {', '.join(sorted(names))})")
    if only:
        raw = [d for d in raw if d.get("name") in only]
    deployments = apply_values(raw, os.environ, remove_notset=False)
    lacking = []
    for d in deployments:
        unset = {var: name for name, value in (d.get("parameters") or {}).items()
                 for var in _UNRESOLVED.findall(repr(value))}
        if unset:
            lacking.append(f"deployment '{d.get('name')}' reads " + ", ".join(
                f"{var} (its parameter {name})" for var, name in sorted(unset.items())))
    if lacking:
        served = [d.get("name") for d in deployments if not any(
            _UNRESOLVED.search(repr(v)) for v in (d.get("parameters") or {}).values())]
        hint = (f", or serve only the deployments you need, e.g. --only {served[0]}" if served and not only
                else "")
        raise ConfigError(f"{path}: {'; '.join(lacking)}: set the environment variable(s){hint}")
    return deployments


def runner_deployments(path: str | Path = DEFAULT_FILE, only: Sequence[str] = ()) -> list:
    """``RunnerDeployment`` objects for ``prefect.serve``, one per deployment of the file; entrypoints are the
    project's (``flows/…``), as ``prefect deploy`` records them, wherever the file is."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.schedules import Cron

    out = []
    for d in read_deployments(path, only):
        file, _, func = d["entrypoint"].partition(":")
        flow = load_flow_from_entrypoint(f"{PROJECT / file}:{func}")  # relative to the project, wherever the file is
        schedules = [Cron(s["cron"], timezone=s.get("timezone")) for s in d.get("schedules") or []]
        out.append(flow.to_deployment(name=d["name"], description=d.get("description"), tags=d.get("tags"),
                                      parameters=d.get("parameters") or {}, schedules=schedules))
    return out


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SchedulerLogWatch:
    """Reads a Prefect server's log line by line and calls ``on_error`` with a one-line summary (the
    service and the exception) of each failed loop of the scheduler service."""

    def __init__(self, on_error: Callable[[str], None]):
        self.on_error = on_error
        self._service: str | None = None  # inside the traceback of a failed scheduler loop

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        record = _LOG_RECORD.match(line)
        if record:
            self._service = None
            if record["level"] in ("ERROR", "CRITICAL"):
                self._service = next((s for s in _SCHEDULER_SERVICES if s in record["message"]), None)
        elif self._service and line.strip() and not line[0].isspace() and not line.startswith(_TRACEBACK_HEADERS):
            self.on_error(f"{self._service}: {line.strip()}")  # the traceback's first exception
            self._service = None


class SchedulerHealth:
    """The scheduler errors seen while serving; each is printed on stderr as one line, the same error at
    most once every ``repeat_after`` seconds."""

    def __init__(self, log_path: Path | None = None, repeat_after: float = 60.0, out=None):
        self.log_path = log_path
        self.repeat_after = repeat_after
        self.out = out
        self.errors: list[str] = []
        self._last_printed: dict[str, float] = {}
        self._lock = threading.Lock()

    def error(self, summary: str) -> None:
        with self._lock:
            self.errors.append(summary)
            now = time.monotonic()
            if now - self._last_printed.get(summary, -self.repeat_after) < self.repeat_after:
                return
            self._last_printed[summary] = now
        where = f" (server log: {self.log_path})" if self.log_path else ""
        print(f"transit-release serve: ERROR: the Prefect scheduler failed, no new scheduled run is created: "
              f"{summary}{where}", file=self.out or sys.stderr, flush=True)


#: The tables a Prefect server fills when it first starts on an empty database (its schema version and the
#: block types it registers); a database with anything else is never made a template.
_TEMPLATE_TABLES = frozenset({"alembic_version", "block_schema", "block_schema_reference", "block_type"})


def server_db_template() -> Path:
    """Where an empty Prefect server database made by the installed versions is kept: the schema of this Prefect,
    migrated, and its block types; no flow, run, deployment, log or key. A new home's server starts from a copy
    (about 5 s) instead of running Prefect's migrations (about 11 s)."""
    from importlib.metadata import version

    from transit_release.files.home import cache_dir

    names = ("prefect", "sqlalchemy", "alembic", "aiosqlite")
    return cache_dir() / ("prefect-server-" + "-".join(f"{n}-{version(n)}" for n in names) + "-empty.db")


def _seed_server_db(db: Path) -> bool:
    """Put a copy of the template at ``db`` (a new home's server database); False if there is no template yet."""
    template = server_db_template()
    if not template.exists():
        return False
    tmp = db.with_name(f".{db.name}.{uuid.uuid4().hex}.tmp")
    try:
        shutil.copyfile(template, tmp)
        os.replace(tmp, db)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _save_server_db_template(db: Path) -> None:
    """Keep a snapshot of ``db`` — a server that has just started on a new database, before any run — as the
    template (SQLite's online backup: consistent while the server runs). Only if it holds nothing but the
    schema version and the block types; made atomically, so concurrent makers race harmlessly."""
    template = server_db_template()
    if template.exists() or not db.exists():
        return
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = template.with_name(f".{template.name}.{uuid.uuid4().hex}.tmp")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as src, \
                contextlib.closing(sqlite3.connect(tmp)) as dst:
            src.backup(dst)  # one consistent snapshot; what it holds is checked on the copy itself
            tables = [r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                "AND name NOT LIKE 'sqlite_%'")]
            if "alembic_version" not in tables or any(
                    dst.execute(f'SELECT EXISTS (SELECT 1 FROM "{t}")').fetchone()[0]
                    for t in tables if t not in _TEMPLATE_TABLES):
                return
        os.replace(tmp, template)
    except (sqlite3.Error, OSError):
        return  # a template is only a shortcut: the next new home migrates again
    finally:
        tmp.unlink(missing_ok=True)


#: What a command's own server runs (:func:`local_server` with ``command=True``), as Prefect's own temporary server
#: does (``PREFECT__SERVER_EPHEMERAL``: the API and the services a flow run needs, such as the task run recorder;
#: no scheduler, late-runs, foreman, cancellation or pause services, which only matter to a server that outlives
#: its runs), and without what its start would do for nothing: registering block types (the tool keeps none on
#: the server) and, on a database already at this Prefect's schema, looking for migrations; no automations
#: (triggers and their actions) and no event or log streams to subscribers, which nothing of a command's run has.
COMMAND_SERVER_SETTINGS = {"PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
                           "PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
                           "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
                           "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
                           "PREFECT_SERVER_EVENTS_STREAM_OUT_ENABLED": "false",
                           "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "false"}


def _schema_version(db: Path) -> str | None:
    """The Alembic revision a Prefect database is at (None: no database, or none readable)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        return row[0] if row else None
    except sqlite3.Error:
        return None


def _at_current_schema(db: Path) -> bool:
    """Is ``db`` at the schema of the installed Prefect (the revision of the template its versions made)? Then the
    server need not look for migrations when it starts (about a second)."""
    template = server_db_template()
    current = _schema_version(template) if template.exists() else None
    return current is not None and _schema_version(db) == current


@contextlib.contextmanager
def local_server(prefect_home: Path, timeout: float = 120.0, on_scheduler_error: Callable[[str], None] | None = None,
                 while_starting: Callable[[str], None] | None = None, settings: dict[str, str] | None = None,
                 ui: bool = False, command: bool = False):
    """A Prefect server (with its scheduler) on loopback for the duration; yields its API URL. With ``ui``, it
    serves Prefect's UI too, at the URL without ``/api`` (:func:`ui_url`), talking to this server's API.

    ``while_starting(url)`` is called once the server process is launched, before it answers (e.g. to import
    a flow's modules meanwhile: the server takes seconds to start). ``settings``: Prefect settings (environment
    variables) of the server process alone. ``command``: the server of one command's runs
    (:data:`COMMAND_SERVER_SETTINGS`: Prefect's API app as its own temporary server runs it, without the
    scheduler; ``prefect server start`` otherwise).

    Its output goes to ``<prefect_home>/server.log``; ``on_scheduler_error`` is called (from a reader
    thread) with a one-line summary of each failed scheduler loop.
    """
    prefect_home = Path(prefect_home)
    prefect_home.mkdir(parents=True, exist_ok=True)
    db = prefect_home / "prefect.db"  # Prefect's default database, unless the environment names another
    default_db = not any(os.environ.get(f"PREFECT_{k}_DATABASE_CONNECTION_URL") for k in ("API", "SERVER"))
    new_db = not db.exists() and default_db
    seeded = new_db and _seed_server_db(db)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    ui_settings = ({"PREFECT_UI_ENABLED": "true", "PREFECT_UI_API_URL": url, "PREFECT_UI_URL": ui_url(url)} if ui
                   else {"PREFECT_UI_ENABLED": "false"})
    env = {**os.environ, **TELEMETRY_OFF, "PREFECT_HOME": str(prefect_home), **ui_settings,
           **(COMMAND_SERVER_SETTINGS if command else {}), **(settings or {})}
    if command and default_db and (seeded or _at_current_schema(db)):
        env["PREFECT_API_DATABASE_MIGRATE_ON_START"] = "false"
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", None)  # the server logs in full to its own log file
    if command:  # Prefect's API app, as its temporary server starts it (no CLI, no scheduler)
        from importlib.util import find_spec  # (not imported here: the command imports Prefect meanwhile)

        site = Path(find_spec("prefect").origin).resolve().parent.parent
        args = ["-m", "transit_release.runtime.command_server", "--app-dir", str(site), "--factory",
                "prefect.server.api.server:create_app",
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--lifespan", "on"]
    else:
        args = ["-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port),
                *(() if ui else ("--no-ui",))]
    # a session of its own: a terminal's Ctrl-C reaches the command, which stops the server last, once the run's
    # final state is recorded (a server that took the Ctrl-C itself left the command retrying a dead API)
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace",
                            preexec_fn=die_with_parent, start_new_session=True)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    watch = SchedulerLogWatch(on_scheduler_error) if on_scheduler_error else None

    def read_log() -> None:  # always drained: a full pipe would block the server
        with open(prefect_home / "server.log", "a", encoding="utf-8") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                tail.append(line)
                if watch:
                    watch.feed(line)

    reader = threading.Thread(target=read_log, name="prefect-server-log", daemon=True)
    reader.start()
    try:
        if while_starting is not None:
            while_starting(url)
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                reader.join(timeout=5)
                raise RuntimeError(f"the local Prefect server exited (code {proc.returncode}): "
                                   f"{''.join(tail)[-2000:]}")
            if server_answers(url, timeout=2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local Prefect server did not answer on {url} within {timeout:.0f} s")
            time.sleep(0.1)
        if new_db and not seeded:
            _save_server_db_template(db)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=5)
        if command and default_db:
            _checkpoint(db)


def _checkpoint(db: Path) -> None:
    """The server's write-ahead log folded into its database and removed (the API app leaves it behind when it
    stops: megabytes of a command's records beside the file). Another command's server on the same home may
    still hold it: then it stays for that one."""
    if not db.exists():
        return
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db, timeout=1)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def ui_url(api_url: str) -> str:
    """The address of the UI a server with ``ui`` serves beside its API at ``api_url``."""
    return api_url.removesuffix("/api").rstrip("/") + "/"


def prefect_command() -> str:
    """Prefect's command as it runs from any terminal: the one installed beside this interpreter."""
    import shlex

    exe = Path(sys.executable).with_name("prefect")
    return shlex.quote(str(exe)) if exe.exists() else f"{shlex.quote(sys.executable)} -m prefect"


def run_hints(deployments: list, api_url: str) -> list[str]:
    """For each served deployment, the command that starts a run of it now, from any terminal (it needs the API's
    address, which only this process knows when it started its own server)."""
    return [f"transit-release serve: to start a run of {d.name} now: PREFECT_API_URL={api_url} "
            f"{prefect_command()} deployment run '{d.flow_name}/{d.name}'" for d in deployments]


def server_answers(url: str, timeout: float = 1.0) -> bool:
    """Does the Prefect API at ``url`` answer its health check (within ``timeout`` seconds)?"""
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def upcoming_scheduled_runs(client, flow_name: str, deployment_name: str) -> list:
    """The future runs of a deployment that Prefect's scheduler created (state Scheduled), soonest first."""
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterDeploymentId, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    deployment = client.read_deployment_by_name(f"{flow_name}/{deployment_name}")
    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))))
    now = datetime.now(timezone.utc)
    return sorted((r for r in runs if r.auto_scheduled and r.created_by and r.created_by.type == "SCHEDULE"
                   and r.expected_start_time and r.expected_start_time > now), key=lambda r: r.expected_start_time)


def _check_scheduler(deployments: list, health: SchedulerHealth, timeout: float) -> str | None:
    """Wait until the scheduler has created upcoming runs for every deployment with an active schedule;
    print the next run of each. Returns why not, or None."""
    from prefect.client.orchestration import get_client

    expected = {d.name: d for d in deployments if any(s.active is not False for s in d.schedules or [])}
    deadline = time.monotonic() + timeout
    missing = sorted(expected)
    with get_client(sync_client=True) as client:
        while True:
            if health.errors:
                return f"the Prefect scheduler failed: {health.errors[0]}"
            found = {}
            for name, d in expected.items():
                with contextlib.suppress(Exception):  # not registered yet, or the server is busy
                    runs = upcoming_scheduled_runs(client, d.flow_name, name)
                    if runs:
                        found[name] = runs[0]
            missing = sorted(set(expected) - set(found))
            if not missing:
                nexts = []
                for name, run in sorted(found.items()):
                    tz = expected[name].schedules[0].schedule.timezone or "UTC"
                    nexts.append(f"{name} {run.expected_start_time.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M %Z}")
                print(f"transit-release serve: scheduler OK, next runs: {'; '.join(nexts)}", flush=True)
                return None
            if time.monotonic() > deadline:
                break
            time.sleep(1)
    return (f"the Prefect scheduler created no scheduled run for {', '.join(missing)} within {timeout:.0f} s "
            "(is the server's scheduler service running? see the server's log)")


def check_run_now(deployments: list, names) -> None:
    """Refuse (``ConfigError``) a ``run_now`` name that is none of ``deployments``' (as read or served)."""
    known = sorted(d["name"] if isinstance(d, dict) else d.name for d in deployments)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--run-now {unknown[0]}: no such deployment served (they are: {', '.join(known)})")


def _run_now(deployments: list, names) -> None:
    """Create a run of each deployment named, to start now."""
    from prefect.client.orchestration import get_client

    by_name = {d.name: d for d in deployments}
    with get_client(sync_client=True) as client:
        for name in names:
            d = by_name[name]
            deployment = client.read_deployment_by_name(f"{d.flow_name}/{name}")
            run = client.create_flow_run_from_deployment(deployment.id, tags=["run-now"])
            print(f"transit-release serve: {name}: run {run.name} created, to start now", flush=True)


class OutcomeWatch:
    """Prints one line for each run of the served deployments that finishes while serving: the full line the run
    kept in its home's private run log (the server has its short form, :mod:`transit_release.runtime.disclosure`), else the
    outcome the run reported (its ``outcome-…`` artifact), else its final state and message."""

    def __init__(self, deployments: list, out=None, interval: float = 2.0):
        self.names = {d.name for d in deployments}
        self.out = out
        self.interval = interval
        self.started = datetime.now(timezone.utc)
        self.seen: set = set()

    def follow(self) -> None:
        """Poll until the process ends (a daemon thread)."""
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            ids = {}
            while True:
                with contextlib.suppress(Exception):  # the server busy, or stopping: try again
                    if len(ids) < len(self.names):
                        ids = {dep.id: dep.name for dep in client.read_deployments() if dep.name in self.names}
                    for line in self.finished_lines(client, ids):
                        print(line, file=self.out or sys.stdout, flush=True)
                time.sleep(self.interval)

    @staticmethod
    def full_line(run) -> str | None:
        """The line the run kept in its home's private run log, if any."""
        from transit_release.runtime.disclosure import read_run_log

        home = (run.parameters or {}).get("home")
        return read_run_log(Path(home).resolve()).get(str(run.id)) if home else None

    def finished_lines(self, client, ids: dict) -> list[str]:
        """The lines of runs of the deployments ``ids`` (id → name) finished since serving began, not yet said."""
        from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter,
                                                    FlowRunFilterDeploymentId, FlowRunFilterEndTime,
                                                    FlowRunFilterState, FlowRunFilterStateType)
        from prefect.client.schemas.objects import StateType

        if not ids:
            return []
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            deployment_id=FlowRunFilterDeploymentId(any_=list(ids)),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.COMPLETED, StateType.FAILED, StateType.CRASHED,
                                                         StateType.CANCELLED])),
            end_time=FlowRunFilterEndTime(after_=self.started)))
        lines = []
        for run in sorted((r for r in runs if r.id not in self.seen), key=lambda r: r.end_time):
            artifacts = [a for a in client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))) if (a.key or "").startswith("outcome-")]
            if not artifacts and datetime.now(timezone.utc) - run.end_time < timedelta(seconds=10):
                continue  # the run says its outcome just after its final state: it may be on its way
            self.seen.add(run.id)
            what = self.full_line(run) or (artifacts[-1].description if artifacts else
                                           f"{run.state.name}: {' '.join((run.state.message or '').split())}")
            lines.append(f"transit-release serve: {ids.get(run.deployment_id, '?')} run {run.name}: {what}")
        return lines


def serve(path: str | Path = DEFAULT_FILE, api_url: str | None = None, health: SchedulerHealth | None = None,
          startup_timeout: float = 120.0, run_now: tuple[str, ...] = (), out=None, only: Sequence[str] = ()) -> None:
    """Serve every deployment of ``path`` (those named in ``only``, if any) until interrupted, against ``api_url``
    or the configured API.

    Once the scheduler is seen working, the command that starts a run of each deployment from another terminal is
    printed, a run of each deployment named in ``run_now`` is created (executed here at once, as a scheduled one),
    and each finished run of a served deployment is printed as one line: its outcome (:mod:`transit_release.runtime.outcome`),
    or its final state.

    Raises ``SchedulerError`` if, at start-up, the scheduler does not create the upcoming runs of every
    scheduled deployment within ``startup_timeout`` seconds, or fails (as ``health`` reports) before then.
    """
    from prefect import serve as prefect_serve
    from prefect.settings import PREFECT_API_URL, temporary_settings

    path = Path(path).resolve()
    health = health or SchedulerHealth()
    # entrypoints are recorded relative to the working directory when the deployments are made, and the runs
    # resolve them (and their relative paths: config, policy) from the project's, as for a worker: work from the
    # project directory before they are made (made from elsewhere, "../../flows/…" only worked from deep enough)
    os.chdir(PROJECT)
    deployments = runner_deployments(path, only)
    check_run_now(deployments, run_now)
    failure: list[str] = []

    def watchdog() -> None:
        reason = _check_scheduler(deployments, health, startup_timeout)
        if reason:
            failure.append(reason)
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C (a real signal wakes the event loop at once)
            return
        from prefect.settings import get_current_settings

        for line in run_hints(deployments, str(api_url or get_current_settings().api.url)):
            print(line, file=out or sys.stdout, flush=True)
        _run_now(deployments, run_now)
        OutcomeWatch(deployments, out=out).follow()

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell script, which ignores SIGINT: the watchdog stops serve with it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with temporary_settings(updates={PREFECT_API_URL: api_url} if api_url else {}):
        context = contextvars.copy_context()  # the watchdog's client sees these settings
        threading.Thread(target=context.run, args=(watchdog,), name="scheduler-check", daemon=True).start()
        try:
            # not Prefect's own starting message: its `prefect deployment run` hint needs an API address the user's
            # terminal does not have, and its UI link is the configured one's (the hints above run as printed)
            prefect_serve(*deployments, print_starting_message=False)
        except KeyboardInterrupt:
            if not failure:  # the user's Ctrl-C before Prefect's serve took over
                raise
    if failure:
        raise SchedulerError(failure[0])
