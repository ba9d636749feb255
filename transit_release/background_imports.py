"""Heavy libraries imported in a background thread while the flow waits on other work.

A release's flow process needs Great Expectations (about 3.5 s to import) and MLflow (about 0.7 s) only
after the input has been streamed and its partitions prepared on the workers; meanwhile the flow process mostly
waits. :func:`start` imports them, one after the other, in one daemon thread; :func:`ready` is called right
before a module is first used and waits until the background import of that module (if any) has finished, so
that the using thread never imports it at the same time (two threads importing one library's circular imports
at once could see a half-initialised module). A module already imported, or never asked for, costs nothing.

Nothing here changes what is imported or any result: an import that fails in the background is simply done
again by the caller, which then sees the error itself.
"""

from __future__ import annotations

import importlib
import sys
import threading

_lock = threading.Lock()
_pending: dict[str, threading.Event] = {}


def _import_all(modules: tuple[str, ...]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - the caller's own import reports it
            pass
        finally:
            _pending[module].set()


def start(*modules: str) -> None:
    """Import ``modules`` in order in one background thread (those not imported or asked for already)."""
    with _lock:
        todo = tuple(m for m in modules if m not in sys.modules and m not in _pending)
        for module in todo:
            _pending[module] = threading.Event()
    if todo:
        threading.Thread(target=_import_all, args=(todo,), name="background-imports", daemon=True).start()


def ready(module: str) -> None:
    """Wait until a background import of ``module`` (if one was started) has finished."""
    event = _pending.get(module)
    if event is not None:
        event.wait()
