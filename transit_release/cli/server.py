"""The Prefect API a command runs its flow on, and the settings before it: the environment Prefect and MLflow read
when imported, the libraries' logging, and the loopback server's lifecycle (start, the invocation's checks and
warm-up while it starts, stop). May touch the process environment, logging, ``<home>/.prefect`` (removed again when
the checks refuse a new one) and :meth:`Home.prepare`; runs the checks it is given, never a flow."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

from transit_release.cli.aftermath import forgettable, uninterruptible
from transit_release.files.home import Home
from transit_release.runtime.disclosure import PRIVATE_API_ENV
from transit_release.runtime.telemetry import telemetry_off


#: The servers the tool starts in a home (a command's, serve's) keep no event feed: Prefect's events repeat every
#: state's message (a refusal's, with its counts and row numbers) and no API deletes them; nothing of the tool
#: reads them (runs, task runs, logs and artifacts are kept as usual; a command deletes its refused run's).
HOME_SERVER_SETTINGS = {"PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false"}


def scrub_database(home: Home) -> None:
    """After :func:`forget_refused_runs`, once the server has stopped: logs whose run is gone (late ones, such as a
    Dask worker's last batch, sent after the run was deleted) deleted, then the database file rewritten without the
    pages the deleted rows were in (``VACUUM``) and its write-ahead log emptied, so that no byte of them stays
    under ``<home>/.prefect``. Another command's server on the same home holds the file: then one warning."""
    import sqlite3
    from contextlib import closing

    db = home.prefect_home / "prefect.db"
    try:
        with closing(sqlite3.connect(db, timeout=5, isolation_level=None)) as con:
            con.execute("PRAGMA secure_delete = ON")
            # a log that reached the server after its run was deleted (a Dask worker's last batch) has no run left
            con.execute("DELETE FROM log WHERE flow_run_id IS NOT NULL AND flow_run_id NOT IN (SELECT id FROM flow_run)")
            con.execute("VACUUM")
            busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise sqlite3.OperationalError("another process holds the database")
    except sqlite3.Error as exc:
        print(f"transit-release: warning: the refused run's deleted records may stay in the free pages of {db} "
              f"until another command's server stops ({exc})", file=sys.stderr)


def runs_here() -> list:
    """The ids of the outermost flow runs this process has started (none before a flow has run in it)."""
    summary = sys.modules.get("tasks.summary")  # imported by every flow the commands run, in this process
    return list(getattr(summary, "RUNS_HERE", ()))


def forget_refused_runs(ids: list, home: Home, wait_s: float = 15.0) -> bool:
    """A refused command leaves nothing in ``<home>/.prefect``: the flow runs ``ids`` (the runs this command
    started) and their subflows go, with what the server deletes with them (task runs, states), their artifacts
    (an outcome's) and their logs (which the server deletes after the run, in the background: waited for, up to
    ``wait_s``). A failure to forget is one warning, never in place of the refusal. True when runs were deleted
    (the file is then scrubbed: :func:`scrub_database`).

    The runs are found by id, not by a tag: a tag on the command's runs is a tag on every task run too, and
    Prefect's engine then asks the server for the tag's concurrency slots before each task starts."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId
    from prefect.exceptions import ObjectNotFound

    if not ids:
        return False
    try:
        with get_client(sync_client=True) as client:
            ids = _with_subflows(client, ids)
            for artifact in client.read_artifacts(artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=ids))):
                client.delete_artifact(artifact.id)
            for run_id in reversed(ids):  # subflows first
                with contextlib.suppress(ObjectNotFound):  # gone already: nothing to forget
                    client.delete_flow_run(run_id)
            logs = LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids))
            deadline = time.monotonic() + wait_s
            while client.read_logs(log_filter=logs, limit=1):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the server had not deleted their logs after {wait_s:g} s")
                time.sleep(0.1)
        return True
    except Exception as exc:  # the refusal is what the operator must read: this only warns beside it
        print(f"transit-release: warning: the refused run's records stay in {home.prefect_home} "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return False


def _with_subflows(client, ids: list) -> list:
    """The flow runs ``ids`` and their subflows (and theirs), by id."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    ids, parents = list(ids), list(ids)
    while parents:
        parents = [r.id for r in client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=parents))) if r.id not in ids]
        ids += parents
    return ids


def record_before_stopping(ids: list, timeout_s: float = 5.0) -> None:
    """Before a command's server stops: the run's last events (task runs' states, which the client sends in the
    background) are sent, and recorded by the server's task-run recorder (it writes each as it arrives: waited
    for until the task runs of ``ids`` and their subflows stop changing, up to ``timeout_s``). A server stopped
    at once lost the last task run of a release now and then. Never raises: the command's outcome stands."""
    from prefect.events.worker import EventsWorker

    try:
        EventsWorker.drain_all(timeout=timeout_s)
        if not ids:
            return
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        deadline = time.monotonic() + timeout_s
        with get_client(sync_client=True) as client:
            runs = FlowRunFilter(id=FlowRunFilterId(any_=_with_subflows(client, ids)))
            seen, since = None, time.monotonic()
            while time.monotonic() < deadline:
                now = sorted((str(r.id), r.state_type) for r in client.read_task_runs(flow_run_filter=runs))
                if now != seen:
                    seen, since = now, time.monotonic()
                elif all(state is not None and state.value in FINAL for _, state in now) or \
                        time.monotonic() - since > STILL_S:  # (a refused run's tasks that never ran stay pending)
                    return
                time.sleep(0.05)
    except Exception:  # noqa: BLE001 — what the server has not recorded only misses from its records
        return


#: Task run states that end a task run.
FINAL = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
#: Task runs unchanged this long, some not ended, are taken as recorded.
STILL_S = 0.5


def prepare_environment(home: Home, verbose: bool) -> None:
    """Settings that must be in place before Prefect or MLflow is imported. Without ``--verbose`` Prefect's console
    logs are off (its API logs stay, for the server's UI); a terminal shows progress instead."""
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_HOME", str(home.prefect_home))
    # a failed run's pickled exception lands in the home, where the command removes it, whatever PREFECT_HOME says
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(home.prefect_home / "storage")
    telemetry_off()  # no library reports usage to its maker
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


def quiet_logging(verbose: bool) -> None:
    """Other libraries' chatter only with ``--verbose``; on a terminal, progress is shown instead."""
    for name in ("alembic", "mlflow", "distributed", "great_expectations"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    show_progress(verbose)


def show_progress(verbose: bool) -> None:
    """On a terminal, without ``--verbose``, the steps' progress on standard error (the first line at once)."""
    from transit_release.runtime import progress

    if not verbose and sys.stderr.isatty() and not isinstance(progress.current(), progress.RichReporter):
        progress.install(progress.RichReporter())


@contextmanager
def prefect_api(home: Home, verbose: bool, preload: tuple[str, ...] = (), prewarm_workers: bool = False,
                checks: Callable[[], None] | None = None, warm: tuple[str, ...] = ()):
    """The Prefect API for this command: the configured one (``PREFECT_API_URL``, or the settings of a process that
    already runs Prefect) if any, else a loopback server that dies with us. Prefect is not imported before the
    choice is made: its settings are read once, when it is imported.

    ``checks()`` is the invocation's own checks (files, headers, period, configuration): with a configured API
    they run first; with a loopback server they run while it starts (seconds), and a refusal stops the server
    at once (it has done nothing but start) and removes its new folder; the home is prepared only once they
    have passed (what else a refusal created is removed by :func:`transit_release.cli.command.main`). After
    them, while the server goes on starting, the ``preload`` modules are imported and, with ``prewarm_workers``,
    the forkserver of the local Dask workers starts importing their libraries; then the ``warm`` modules, one
    after the other until the server answers (the flow imports the others later, see
    :mod:`transit_release.runtime.warmup`)."""
    configured = os.environ.get("PREFECT_API_URL")
    if not configured and "prefect" in sys.modules:
        from prefect.settings import get_current_settings

        configured = get_current_settings().api.url

    def start_forkserver() -> None:
        if prewarm_workers:  # its own process imports the workers' libraries while this one imports Prefect
            from flows.scale_out import prewarm_workers as start

            start()

    import threading

    from transit_release.runtime import collector, progress
    from transit_release.version import code_version

    show_progress(verbose)
    # the code version a run records asks git (subprocesses: no GIL), once per process: meanwhile
    threading.Thread(target=code_version, name="code-version", daemon=True).start()
    if configured:
        if checks is not None:
            with progress.stage("checking the inputs"):
                checks()
        home.prepare()  # Prefect makes its home (<home>/.prefect) as soon as it is imported
        start_forkserver()
        quiet_logging(verbose)
        collector.settle()  # the libraries imported so far: out of the collector's way (a command's process)
        progress.open_stage("starting the run")
        try:
            yield
        finally:
            progress.close_stage()
        return
    from flows.deployments import local_server, server_answers

    checked = False

    def while_starting(url: str) -> None:  # the command's checks, then the modules of its flow, meanwhile
        nonlocal checked
        if checks is not None:
            checks()
        checked = True
        home.prepare()  # only once the invocation has passed its checks
        os.environ["PREFECT_API_URL"] = url  # before Prefect is imported, and for the flows' own processes
        os.environ[PRIVATE_API_ENV] = url  # this command's own: its runs may say everything there
        start_forkserver()
        for module in preload:
            importlib.import_module(module)
        for module in warm:
            if server_answers(url):
                break
            importlib.import_module(module)

    server_home_existed = home.prefect_home.exists()
    forgot = False
    starting = "checking the inputs and starting Prefect's server" if checks is not None else \
        "starting Prefect's server"
    try:
        with contextlib.ExitStack() as server:
            with progress.stage(starting):
                url = server.enter_context(local_server(home.prefect_home, while_starting=while_starting,
                                                        settings=HOME_SERVER_SETTINGS, command=True))
            os.environ["PREFECT_API_URL"] = url
            from prefect.logging.handlers import APILogHandler
            from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

            before = len(runs_here())  # this command's runs, among the home's others: the ones started from here on
            try:
                # no heartbeats: they let a long-lived server find crashed runs, and this server dies with the
                # command; a flow run's end joins its heartbeat thread, which sleeps in 1 s steps (up to 1 s per
                # release, and per stop after a Ctrl-C)
                with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
                    quiet_logging(verbose)
                    collector.settle()  # the libraries imported so far: out of the collector's way
                    progress.open_stage("starting the run")  # until the flow's first step shows itself
                    try:
                        yield
                    except BaseException as exc:
                        with uninterruptible():  # a Ctrl-C meanwhile does not leave the run half forgotten
                            APILogHandler().flush()
                            if not isinstance(exc, KeyboardInterrupt):  # (a Ctrl-C stops at once)
                                record_before_stopping(runs_here()[before:])  # (also: nothing recorded after a forget)
                            if forgettable(exc):
                                forgot = forget_refused_runs(runs_here()[before:], home)
                        raise
                    else:
                        record_before_stopping(runs_here()[before:])
                    finally:
                        progress.close_stage()
                        APILogHandler().flush()  # the run's last logs (a refusal's too) before the server stops
            finally:
                os.environ.pop("PREFECT_API_URL", None)
                os.environ.pop(PRIVATE_API_ENV, None)
    except BaseException:
        if not checked and not server_home_existed:  # refused by its checks: the server it started only started
            shutil.rmtree(home.prefect_home, ignore_errors=True)
        elif forgot:  # the server has stopped: what the deleted rows held goes from the file too
            with uninterruptible():
                scrub_database(home)
        raise
