"""What of a run reaches a Prefect server, and the home's private run log that keeps the rest.

A refusal's message names files, columns, counts and row numbers (never a value from the data, but figures of
it), and the flows log internal figures (rows screened and quarantined). Prefect repeats a failed run's
exception in its states, its logs (with the traceback) and its events, and the tool's outcome artifact says the
run's line. Who reads them depends on the server:

- the **command's own server** (a loopback server the command starts in ``<home>/.prefect`` and stops when it
  ends; it deletes a refused run's records, :mod:`transit_release.cli.server`): everything, as on the terminal;
- **any other server** (the one ``PREFECT_API_URL`` names, ``serve``'s, the one a Prefect worker reports to),
  which a wider group may read than the home's owner: a refusal is its class and exit code only
  (``refused: ConfigError, exit 2``) in the states, logs, events and artifact; tracebacks and internal figures
  are not sent; the run's full line goes to the home's private run log (:data:`RUN_LOG`) and to the terminal of
  the command or of ``serve``.

How: a :class:`~transit_release.errors.TransitReleaseError` leaving a task or a flow of this project on such a
server is marked (:func:`keep_private`, by :func:`refusals_kept_private` around every task and flow function);
inside a Prefect run its ``str``/``repr`` are then the short form (Prefect builds its state messages, log lines
and tracebacks from them there), outside one (the command's printing, a test) the full message. A filter on
Prefect's API log handler drops tracebacks (:func:`install_log_filter`), and :func:`log_internal` keeps internal
figures off. The decision is made from the API the run reports to, compared with the one the command started
(:data:`PRIVATE_API_ENV`), never from the data. Prefect-free unless Prefect is already imported.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

#: The API URL of the Prefect server the command started for itself (set by :mod:`transit_release.cli.server`
#: while it runs): runs reporting there may say everything; any other server gets the short forms.
PRIVATE_API_ENV = "TRANSIT_RELEASE_PRIVATE_API"
#: The home's private run log, relative to the home: one JSON line per run that reported to a server other than
#: the command's own (time, flow run id, flow, run name, the full outcome line); mode 0600 inside ``private/``.
RUN_LOG = Path("private") / "run-log.jsonl"
#: Lines older than this are dropped whenever a line is added (refusal lines hold counts and row numbers).
RUN_LOG_RETENTION_DAYS = 30


def _api_url() -> str | None:
    if "prefect" in sys.modules:
        try:
            from prefect.settings import get_current_settings

            url = get_current_settings().api.url
            return str(url) if url else None
        except Exception:  # noqa: BLE001 — settings unreadable: treat the server as shared
            return None
    return os.environ.get("PREFECT_API_URL")


def private_api() -> bool:
    """Does this process report to the Prefect server its command started for itself?"""
    own = os.environ.get(PRIVATE_API_ENV)
    return bool(own) and _api_url() == own


def in_a_run() -> bool:
    """Inside a Prefect flow or task run (where Prefect turns exceptions into states and logs)?"""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def shared_api() -> bool:
    """Does this process run flows that report to a server other than its command's own?"""
    return "prefect" in sys.modules and not private_api()


def short_form(exc: BaseException) -> str:
    """What a server other than the command's own learns of a refusal: its class and exit code."""
    from transit_release.runtime.outcome import exit_code

    return f"refused: {type(exc).__name__}, exit {exit_code(exc)}"


def keep_private(exc: BaseException) -> BaseException:
    """Mark a refusal leaving a task or flow that reports to a shared server: inside Prefect runs its text is then
    :func:`short_form` (see :class:`~transit_release.errors.TransitReleaseError`)."""
    from transit_release.errors import TransitReleaseError

    if isinstance(exc, TransitReleaseError) and shared_api():
        exc._kept_private = True  # travels with the exception when pickled (a Dask worker's, a result)
    return exc


def redacted(exc: BaseException) -> bool:
    """Is ``exc``'s text the short form here and now (marked, and inside a run on a shared server)?"""
    return getattr(exc, "_kept_private", False) and in_a_run() and not private_api()


def refusals_kept_private(fn):
    """Wrap a task's or flow's function: a refusal leaving it is marked (:func:`keep_private`); Prefect's API log
    handler gets the filter (:func:`install_log_filter`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        install_log_filter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            keep_private(exc)
            raise

    return wrapper


class _KeepTracebacksOff(logging.Filter):
    """On Prefect's API log handler: on a shared server, a record with a traceback is sent without it (a refusal's
    frames and chained exceptions, a library's message with a value in it), and a record about an exception that
    is not a marked refusal says the exception's class only. The record itself, which the terminal's handlers
    also get, is left whole."""

    def __init__(self, handler: logging.Handler):
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_transit_checked", False) or not (record.exc_info or record.stack_info) \
                or private_api():
            return True
        exc = record.exc_info[1] if record.exc_info else None
        copy = logging.makeLogRecord(record.__dict__)
        copy._transit_checked = True
        copy.exc_info = copy.exc_text = copy.stack_info = None
        if exc is not None and not getattr(exc, "_kept_private", False):
            copy.msg, copy.args = ("%s (its message and traceback are kept off this Prefect server)",
                                   (type(exc).__name__,))
        self.handler.handle(copy)
        return False


def install_log_filter() -> None:
    """Put :class:`_KeepTracebacksOff` on the API log handlers Prefect configured (idempotent; again after Prefect
    reconfigures its logging)."""
    if "prefect" not in sys.modules:
        return
    from prefect.logging.handlers import APILogHandler

    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.extra"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, APILogHandler) and not any(isinstance(f, _KeepTracebacksOff)
                                                              for f in handler.filters):
                handler.addFilter(_KeepTracebacksOff(handler))


def log_internal(logger, level: int, what: str, msg: str, *args) -> None:
    """Log internal figures (true counts: rows screened, quarantined): labelled internal on the command's own
    server; on a shared one only that they exist (the release's internal report and MLflow have them), the
    figures themselves only on this process's terminal."""
    if shared_api():
        logger.log(level, "%s: true counts kept off this Prefect server (the release's internal report has them)", what)
        logger.log(level, "internal, true counts: " + msg, *args, extra={"send_to_api": False})
    else:
        logger.log(level, "internal, true counts: " + msg, *args)


def run_log_path(home_root: Path) -> Path:
    return Path(home_root) / RUN_LOG


def write_run_log(home_root: Path, flow_run_id: str, flow: str, run: str, line: str,
                  now: float | None = None) -> Path | None:
    """Add a run's full line to the home's private run log (dropping lines older than the retention); None if
    the home does not exist (a run refused before it made it)."""
    private = Path(home_root) / RUN_LOG.parent
    if not Path(home_root).is_dir():
        return None
    private.mkdir(mode=0o700, exist_ok=True)
    path = private / RUN_LOG.name
    now = time.time() if now is None else now
    entry = {"at": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
             "flow_run_id": str(flow_run_id), "flow": flow, "run": run, "line": line}
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # concurrent runs (serve's, a worker's) append one whole line each
        fh.seek(0)
        kept = [l for l in fh.read().splitlines() if _recent(l, now)]
        fh.seek(0)
        fh.truncate()
        fh.write("".join(l + "\n" for l in kept) + json.dumps(entry, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return path


def _recent(line: str, now: float) -> bool:
    try:
        at = datetime.fromisoformat(json.loads(line)["at"]).timestamp()
    except (ValueError, KeyError, TypeError):
        return False
    return now - at < RUN_LOG_RETENTION_DAYS * 86400


def read_run_log(home_root: Path) -> dict[str, str]:
    """Flow run id → the full line the run logged (the latest)."""
    path = run_log_path(home_root)
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            out[entry["flow_run_id"]] = entry["line"]
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _install() -> None:
    """Make this module the rule :class:`~transit_release.errors.TransitReleaseError` asks (errors import nothing)."""
    from transit_release import errors

    errors.redaction = sys.modules[__name__]


_install()
