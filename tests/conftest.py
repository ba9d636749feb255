"""Shared fixtures: one Prefect test server per session, small synthetic inputs."""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
# No flow runs outside the session's harness (:func:`prefect_harness`) or a command's own server: a flow started
# without an API fails at once instead of starting Prefect's own temporary server, which on a loaded machine can
# exceed its start-up timeout (20 s) and outlive the test.
os.environ.setdefault("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")

import pytest  # noqa: E402


def _compile_project() -> None:
    """Bytecode for the project's modules, once: the suite starts ~100 subprocesses and Dask workers that import
    them, and where ``PYTHONDONTWRITEBYTECODE`` is set (as on the machines this project is built on) each would compile them again (~1 s)."""
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in ("flows", "tasks", "schemas", "transit_release"):
        compileall.compile_dir(root / package, quiet=1)


def pytest_configure(config):
    """The ``long`` tests (further stages of the kill and Ctrl-C tests, a second ordering of the mixed week, the
    full-scale synthetic week, Prefect's deploy with a worker, two comparisons whose paths other tests run) are part
    of every run, CI's included; ``-m "not long"`` leaves them out."""
    if not hasattr(config, "workerinput"):  # once, in the controlling process (not in each xdist worker)
        _compile_project()


def _descendants(root: int) -> dict[int, str]:
    """The processes below ``root`` (pid → command line), from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
                parents[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as fh:
                        found[child] = fh.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    found[child] = ""
                frontier.append(child)
    return found


#: Processes a test process keeps for later tests: multiprocessing's forkserver (the Dask workers are forked from
#: it) and resource tracker.
_KEPT = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


@pytest.fixture(autouse=True)
def _no_process_left():
    """No process a test started outlives it, whether it passed or failed (a command's server, a served
    deployment, MLflow's server, a browser): what is left is killed after the test. Processes that were running
    before it (the session's Prefect server) and multiprocessing's helpers stay."""
    import signal

    if not os.path.isdir("/proc"):
        yield
        return
    before = set(_descendants(os.getpid()))
    yield
    left = [pid for pid, cmd in _descendants(os.getpid()).items()
            if pid not in before and not any(k in cmd for k in _KEPT)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in left:  # reap our own children (the others are their parents' to reap, or init's)
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass

from transit_release.noise import TEST_SEED_ENV  # noqa: E402


@pytest.fixture(autouse=True)
def _signal_dispositions_restored():
    """What a test leaves of the process's SIGINT and SIGTERM dispositions is undone after it: a command a later
    test starts inherits an ignored SIGINT (a terminal's Ctrl-C would then not reach it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in before.items():
        if signal.getsignal(s) is not handler and handler is not None:
            signal.signal(s, handler)


@pytest.fixture(autouse=True)
def _environment_restored():
    """What a test leaves in the process environment is undone after it. A command run in-process sets what
    Prefect and MLflow read when first imported (``PREFECT_HOME``, the console log level, ...) and a later test's
    subprocess would inherit it: a server's flow-run process with its console logs off crashed without a word."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


SMALL_SCALE = 0.01
#: The synthetic week's period, declared as a publishing run must (flow keyword arguments and CLI flags).
WEEK = {"period_start": "2016-08-08", "period_end": "2016-08-14"}
WEEK_FLAGS = ["--period-start", "2016-08-08", "--period-end", "2016-08-14"]


def _week_period():
    from datetime import date

    from transit_release.inputs.screening import Period

    return Period(date(2016, 8, 8), date(2016, 8, 14))


WEEK_PERIOD = _week_period()


@pytest.fixture(scope="session", autouse=True)
def _store_cache(tmp_path_factory):
    """The empty MLflow store new homes copy is made once per session, in the session's temporary directory
    (not in the user's ~/.cache); subprocesses inherit the setting."""
    from transit_release.files.home import CACHE_ENV

    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("transit-release-cache"))


@pytest.fixture(scope="session")
def trip_policy(tmp_path_factory) -> str:
    """The shipped budget policy with ``allow_unbounded_person_loss: true``: a trip-level release leaves a
    passenger's loss unbounded, which the shipped policy refuses; tests of the trip level (the Opal paper's) say so
    explicitly."""
    import yaml

    from transit_release.accounting.policy import default_policy_path

    data = yaml.safe_load(default_policy_path().read_text(encoding="utf-8"))
    data["policy"]["allow_unbounded_person_loss"] = True
    path = tmp_path_factory.mktemp("trip-policy") / "trip_policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's own engine on a temporary server, started once per session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def small_week(tmp_path_factory):
    """A synthetic week at scale 0.01 (about 135,000 trips) as CSV files."""
    from transit_release.synth.opal_week import write_synthetic_week

    out = tmp_path_factory.mktemp("small-week")
    return write_synthetic_week(out, scale=SMALL_SCALE, seed=7, show_progress=False)


@pytest.fixture(scope="session")
def tiny_week(tmp_path_factory):
    """About 27,000 trips: enough for every partition, cheap enough to publish many times."""
    from transit_release.synth.opal_week import write_synthetic_week

    return write_synthetic_week(tmp_path_factory.mktemp("tiny-week"), scale=0.002, seed=11, show_progress=False)


@pytest.fixture
def test_seed(monkeypatch):
    """Deterministic noise for one test (never used outside tests)."""
    monkeypatch.setenv(TEST_SEED_ENV, "20250101")
    return 20250101
