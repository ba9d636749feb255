"""What the custodian's terminal alone is told while a release runs.

Some figures help the person running a release and must go nowhere else: before the charge, how many cells the
true counts put over the thresholds (:mod:`transit_release.releases.opal_expectation`) is a figure of the data.
A flow hands such a figure to :func:`tell`; what becomes of it depends on the listener the command installs:

* the ``release`` and ``demo`` commands install one that prints it on standard output, the custodian's terminal;
* everywhere else (a scheduled run, ``serve``, a deployment's worker, the tests' flows) nobody listens: nothing
  is printed or kept, and a flow that asks :func:`listening` skips computing it.

A listener writes with ``sys.stdout.write``, never ``print``: Prefect's ``log_prints`` (a flow's option, or
``PREFECT_LOGGING_LOG_PRINTS`` in the environment) turns a flow run's ``print`` calls into log records sent to its
API, and these figures must never reach Prefect's logs. Nothing here is a Prefect log, a task result that is
persisted, an MLflow field or a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_listener: Callable[[Any], None] | None = None


def install(listener: Callable[[Any], None] | None) -> None:
    """``listener(what)`` is called with what a flow tells the custodian (None: nobody listens)."""
    global _listener
    _listener = listener


def listening() -> bool:
    """Is there a custodian's terminal to tell (so that computing a figure for it is worth it)?"""
    return _listener is not None


def tell(what: Any) -> None:
    """Hand ``what`` to the installed listener, if any."""
    if _listener is not None:
        _listener(what)
