"""Import, in a background thread, the libraries a release needs only later, while the flow's first steps
hash and read the input (and, in a thread of its own, the code version, which asks git).

Hashing (``hashlib``) and Arrow's CSV reader run without the GIL, so on a 2-core machine the other core is
idle for those seconds; Great Expectations and MLflow take about 4 s to import, which the flow would otherwise
pay when it first validates and tracks. Imports only: nothing here reads a
file of the release, opens a store or touches data, so a run that is refused later leaves nothing behind
that it would not have left anyway. A module the flow needs before the thread has imported it is simply
imported by the flow (Python's import lock makes the two wait for each other, not import twice).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading

from transit_release.version import code_version

#: What the Opal release imports after its input pass: the validations' and Data Docs' library (and the
#: partition steps', without a cluster) and the tracking store's. (The report's figures are drawn in a process
#: of their own: matplotlib is not imported here.)
RELEASE_MODULES = ("great_expectations", "schemas.expectations", "mlflow.tracking",
                   "mlflow.store.tracking.sqlalchemy_store")


def start(modules: tuple[str, ...] = RELEASE_MODULES) -> threading.Thread:
    """A daemon thread importing ``modules`` (each failure is left for the flow's own import to raise, with
    its own traceback, where the module is used)."""

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 — the flow's own import raises it where it matters
                return
        if "sqlalchemy.orm" in sys.modules:  # MLflow's store classes, mapped once per process (~0.4 s)
            with contextlib.suppress(Exception):
                sys.modules["sqlalchemy.orm"].configure_mappers()
        from transit_release.runtime import collector

        collector.settle_again()  # a command's process: these libraries out of the collector's way too

    thread = threading.Thread(target=run, name="release-warm-up", daemon=True)
    thread.start()
    # the code version the spends and the manifest record asks git twice (subprocesses: no GIL), once per process
    threading.Thread(target=code_version, name="code-version", daemon=True).start()
    return thread
