"""Operations a custodian leaves running, at unit level: one run at a time per release (and what "the other run
is dead" means), what reaches a Prefect server other than the command's own, the home's private run log, the
clean-up a second Ctrl-C must not cut short, exact option names and a synthetic week of any Monday. The served
runs themselves: tests/test_deployments.py."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import pytest

from transit_release.errors import BudgetExceededError, ConfigError, InputDataError, ReleaseExistsError, full_message
from transit_release.runtime import disclosure
from transit_release.runtime.release_lock import charged_by_a_dead_run, is_held, lock_path, release_lock

HOLD = """
import sys, time
from pathlib import Path
from transit_release.runtime.release_lock import release_lock
with release_lock(Path(sys.argv[1]), "r1"):
    Path(sys.argv[2]).write_text("held")
    time.sleep(600)
"""


def _holder(tmp_path: Path) -> subprocess.Popen:
    """Another process holding release r1's lock (a run of it, alive)."""
    cue = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), str(cue)])
    deadline = time.monotonic() + 60
    while not cue.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def test_a_run_of_a_release_waits_for_the_live_run_that_holds_it_and_not_for_a_dead_one(tmp_path):
    """The other run's liveness is its lock: held while its process lives, released by the kernel when it is
    killed (no timeout), so the waiting run goes on at once."""
    proc = _holder(tmp_path)
    assert is_held(tmp_path, "r1") and not is_held(tmp_path, "r2")
    waits: list[str] = []

    @contextmanager
    def waiting(holder: str):
        waits.append(holder)
        yield

    with release_lock(tmp_path, "r2", waiting) as other:  # another release: no wait
        assert not other.waited
    got = {}

    def second_run():
        with release_lock(tmp_path, "r1", waiting) as held:
            got["held"] = held

    thread = threading.Thread(target=second_run)
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive() and waits == [f"process {proc.pid} on {os.uname().nodename}"]  # it waits, and says for whom
    proc.send_signal(signal.SIGKILL)  # the holder dies (a crash, an OOM kill): its lock goes with it
    proc.wait()
    thread.join(timeout=10)
    assert not thread.is_alive() and got["held"].waited
    assert not lock_path(tmp_path, "r1").parent.exists() and not is_held(tmp_path, "r1")  # removed by the last one


def test_runs_of_one_release_take_its_lock_one_after_the_other_even_when_the_file_is_removed_meanwhile(tmp_path):
    """Each holder removes the lock file as it ends; a waiter that had opened the removed file locks the new one,
    so two runs never hold the lock at once."""
    inside, overlaps = [0], []

    def run():
        for _ in range(20):
            with release_lock(tmp_path, "r1"):
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.001)
                inside[0] -= 1

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert overlaps == [1] * 80


def test_the_decision_after_the_wait_published_dead_or_interrupted():
    """Holding the release's lock, a run that finds its id charged knows the run that charged it is dead."""
    assert charged_by_a_dead_run("r", set(), set(), set()) is None  # nothing charged: go on
    assert charged_by_a_dead_run("r", {"r"}, {"r"}, set()) is None  # published (already, or by the run waited for)
    interrupted = charged_by_a_dead_run("r", {"r"}, set(), {"r"})
    assert interrupted.startswith("release 'r' was charged by a run that stopped while publishing it, and no run of "
                                  "it is alive now: run `transit-release repair`")
    dead = charged_by_a_dead_run("r", {"r", "q"}, {"q"}, set())
    assert dead == ("release 'r' was charged by a run that ended without publishing it, and no run of it is alive "
                    "now: its spends stay counted and the id cannot be charged again; choose another --release-id "
                    "(`transit-release repair` removes what that run left)")


def test_a_run_that_holds_the_lock_of_a_release_a_dead_run_charged_is_refused_with_what_repair_does(tmp_path):
    from tasks.budget import refuse_a_dead_runs_charge
    from tests.test_accounting import partition_events
    from transit_release.accounting.ledger import Ledger
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home")
    refuse_a_dead_runs_charge.fn(home, "r1")  # no ledger yet: nothing to say
    Ledger(home.ledger).charge(partition_events("r1", mode="ferry"))
    refuse_a_dead_runs_charge.fn(home, "r2")
    with pytest.raises(ReleaseExistsError, match=r"^release 'r1' was charged by a run that ended without publishing"):
        refuse_a_dead_runs_charge.fn(home, "r1")


# ---- what reaches a Prefect server other than the command's own ------------------------------------------------

def test_a_refusal_is_its_class_and_exit_code_inside_a_run_on_a_shared_server_and_whole_elsewhere(monkeypatch):
    exc = BudgetExceededError("card", 9.0, 8.0)
    monkeypatch.setattr(disclosure, "shared_api", lambda: True)
    assert disclosure.keep_private(exc) is exc and exc._kept_private
    monkeypatch.setattr(disclosure, "in_a_run", lambda: False)  # the command's printing, a test: the full message
    assert str(exc).startswith("Cannot release 'card' without exceeding the budget") and "9.000" in repr(exc)
    monkeypatch.setattr(disclosure, "in_a_run", lambda: True)  # Prefect's states, logs and tracebacks
    assert str(exc) == "refused: BudgetExceededError, exit 3"
    assert repr(exc) == "BudgetExceededError('refused: BudgetExceededError, exit 3')"
    assert full_message(exc).startswith("Cannot release 'card'")
    assert str(InputDataError("trips file t.csv: row 7")) == "trips file t.csv: row 7"  # not marked: whole
    monkeypatch.setattr(disclosure, "shared_api", lambda: False)  # the command's own server: nothing is marked
    assert not getattr(disclosure.keep_private(ConfigError("x")), "_kept_private", False)


def test_a_marked_refusal_read_where_the_disclosure_rule_was_never_imported_is_its_class_only(monkeypatch):
    """errors import nothing: the disclosure module installs its rule there when imported. A refusal marked in
    another process and read where that module was never imported says its class only, never its message."""
    from transit_release import errors

    exc, plain = BudgetExceededError("card", 9.0, 8.0), InputDataError("trips file t.csv: row 7")
    exc._kept_private = True
    assert errors.redaction is disclosure
    monkeypatch.setattr(errors, "redaction", None)
    assert str(exc) == "refused: BudgetExceededError" and "9.000" not in repr(exc)
    assert str(plain) == "trips file t.csv: row 7" and full_message(exc).startswith("Cannot release 'card'")


def test_the_command_s_own_server_is_told_everything_and_any_other_is_shared(monkeypatch):
    pytest.importorskip("prefect")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv(disclosure.PRIVATE_API_ENV, "http://127.0.0.1:4321/api")
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4321/api"}):
        assert disclosure.private_api() and not disclosure.shared_api()
    with temporary_settings(updates={PREFECT_API_URL: "https://prefect.agency.internal/api"}):
        assert not disclosure.private_api() and disclosure.shared_api()
    monkeypatch.delenv(disclosure.PRIVATE_API_ENV)
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4321/api"}):
        assert disclosure.shared_api()  # a loopback server the command did not start (serve's, a worker's)


def test_records_with_a_traceback_reach_a_shared_server_without_it(monkeypatch):
    sent: list[logging.LogRecord] = []

    class Server(logging.Handler):
        def emit(self, record):
            sent.append(record)

    handler = Server()
    handler.addFilter(disclosure._KeepTracebacksOff(handler))
    monkeypatch.setattr(disclosure, "private_api", lambda: False)

    def record_of(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            return logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1, "Task run failed: %r", (exc,),
                                     sys.exc_info())

    refusal = InputDataError("trips file t.csv: rows 3, 9")
    refusal._kept_private = True
    bug = ValueError("invalid literal for int(): '1234abc'")
    for exc in (refusal, bug):
        original = record_of(exc)
        handler.handle(original)
        assert original.exc_info is not None  # the terminal's handlers still get the whole record
    assert [r.exc_info for r in sent] == [None, None]
    assert sent[1].getMessage() == "ValueError (its message and traceback are kept off this Prefect server)"
    assert "1234abc" not in logging.Formatter().format(sent[1])
    monkeypatch.setattr(disclosure, "private_api", lambda: True)  # the command's own server: as it is
    handler.handle(record_of(bug))
    assert sent[2].exc_info is not None


def test_internal_figures_stay_off_a_shared_server(monkeypatch):
    records: list[tuple[str, dict]] = []

    class Logger:
        def log(self, level, msg, *args, **kwargs):
            records.append((msg % args, kwargs.get("extra", {})))

    monkeypatch.setattr(disclosure, "shared_api", lambda: True)
    disclosure.log_internal(Logger(), logging.INFO, "rows screened", "screened %d rows: %d quarantined", 26958, 3)
    assert records == [("rows screened: true counts kept off this Prefect server (the release's internal report has them)", {}),
                       ("internal, true counts: screened 26958 rows: 3 quarantined", {"send_to_api": False})]
    records.clear()
    monkeypatch.setattr(disclosure, "shared_api", lambda: False)
    disclosure.log_internal(Logger(), logging.INFO, "rows screened", "screened %d rows", 26958)
    assert records == [("internal, true counts: screened 26958 rows", {})]


def test_the_private_run_log_keeps_each_runs_full_line_for_its_retention(tmp_path):
    home = tmp_path / "home"
    assert disclosure.write_run_log(home, "id0", "f", "r", "x") is None  # no home: nothing made
    home.mkdir()
    now = time.time()
    old = now - (disclosure.RUN_LOG_RETENTION_DAYS + 1) * 86400
    disclosure.write_run_log(home, "id1", "weekly-opal-release", "old-run", "refused: an old line (exit 2)", now=old)
    path = disclosure.write_run_log(home, "id2", "weekly-opal-release", "new-run", "refused: t.csv: row 7 (exit 2)",
                                    now=now)
    assert path == home / "private" / "run-log.jsonl"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert disclosure.read_run_log(home) == {"id2": "refused: t.csv: row 7 (exit 2)"}  # the old line dropped
    (entry,) = map(json.loads, path.read_text(encoding="utf-8").splitlines())
    assert entry["flow"] == "weekly-opal-release" and entry["run"] == "new-run"


# ---- the clean-up after a refusal is never cut short ------------------------------------------------------------

def test_a_second_ctrl_c_during_the_clean_up_does_not_leave_it_half_done(tmp_path, monkeypatch, capsys):
    """A refusal's clean-up (what the command created in the home) runs with further Ctrl-Cs ignored; the command
    then exits with the refusal's code."""
    from transit_release.cli import aftermath, main

    done = []
    real = aftermath.remove_what_a_refusal_created

    def interrupted_twice(home, before):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        real(home, before)
        done.append(True)

    monkeypatch.setattr(aftermath, "remove_what_a_refusal_created", interrupted_twice)
    bad = tmp_path / "policy.yaml"
    bad.write_text("policy: [", encoding="utf-8")
    assert main(["budget", "--home", str(tmp_path / "home"), "--policy", str(bad)]) == 2
    assert done == [True] and "transit-release: error: " in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored afterwards


# ---- exact option names; a synthetic week of any Monday ----------------------------------------------------------

def test_an_option_is_taken_only_by_its_exact_name(capsys):
    from transit_release.cli.parser import build_parser, parse

    with pytest.raises(SystemExit) as refused:  # before the missing --trips is said
        parse(["release", "--trip", "t.csv", "--stops", "s.csv"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.startswith("usage: transit-release release ")
    assert err.strip().endswith("transit-release release: error: unrecognized arguments: --trip t.csv")
    with pytest.raises(SystemExit):
        parse(["--verb", "budget"])
    assert "transit-release: error: unrecognized arguments: --verb" in capsys.readouterr().err
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():  # no prefix of any long option is taken for it
        for option in command._option_string_actions:
            if option.startswith("--") and len(option) > 4:
                with pytest.raises(SystemExit):
                    parse([name, option[:-1], "x"])
                assert f"unrecognized arguments: {option[:-1]}" in capsys.readouterr().err
    args = parse(["release", "--trips", "t.csv", "--stops", "s.csv", "--epsilons=1,1,1,1,2,2", "--workers", "0"])
    assert args.trips == "t.csv" and args.epsilons == [1, 1, 1, 1, 2, 2]


def test_synth_writes_the_week_of_the_monday_it_is_given(tmp_path, capsys):
    import pandas as pd

    from transit_release.cli import main

    assert main(["synth", "--out", str(tmp_path), "--scale", "0.0005", "--week-start", "2016-08-15", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ("period: 2016-08-15 .. 2016-08-21 (release it with "
                                                         "--period-start 2016-08-15 --period-end 2016-08-21)")
    taps = pd.read_csv(tmp_path / "trips.csv", parse_dates=["tap_on_time"])["tap_on_time"]
    assert taps.dt.date.min() == date(2016, 8, 15) and taps.dt.date.max() == date(2016, 8, 21)
    with pytest.raises(SystemExit):
        main(["synth", "--out", str(tmp_path), "--week-start", "2016-08-16"])
    assert "2016-08-16 is a Tuesday: a week starts on a Monday" in capsys.readouterr().err


# ---- the Dask workers' late logs of a refused run do not outlive its clean-up --------------------------------------

def test_a_late_log_of_a_forgotten_run_is_removed_with_the_runs_records(tmp_path):
    """A Dask worker's last batch of logs (sent every 2 s, and at its exit) could reach the command's server after
    the refused run's records were deleted: a log row whose flow run is gone. The scrub after the server stops
    removes such rows with the deleted pages; here a real server receives one through its API."""
    import sqlite3
    import uuid
    from contextlib import closing

    import httpx

    from flows.deployments import local_server
    from transit_release.cli.server import scrub_database
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home")
    with local_server(home.prefect_home) as url:
        def post(path: str, body) -> httpx.Response:
            # Prefect's own server (with its services) answered 5xx now and then under load (SQLite busy) in the
            # suite: once in about a dozen runs, the flow run came back without an id; a client retries those
            for _ in range(5):
                answer = httpx.post(f"{url}/{path}", json=body, timeout=30)
                if answer.status_code < 500:
                    break
                time.sleep(0.5)
            assert answer.status_code in (200, 201), (path, answer.status_code, answer.text[:500])
            return answer

        flow = post("flows/", {"name": "kept"}).json()
        kept = post("flow_runs/", {"flow_id": flow["id"], "name": "kept-run"}).json()
        logs = [{"name": "prefect.task_runs", "level": 20, "message": message, "timestamp": "2026-01-01T00:00:00Z",
                 "flow_run_id": run_id} for message, run_id in (("late worker log: rows 3, 9", str(uuid.uuid4())),
                                                                  ("a kept run's log", kept["id"]))]
        assert post("logs/", logs).status_code == 201
    scrub_database(home)
    assert [p.name for p in home.prefect_home.rglob("*") if p.is_file() and b"late worker log" in p.read_bytes()] == []
    with closing(sqlite3.connect(home.prefect_home / "prefect.db")) as db:
        assert [m for (m,) in db.execute("SELECT message FROM log")] == ["a kept run's log"]
