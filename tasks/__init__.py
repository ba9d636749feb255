"""Thin Prefect tasks: each wraps one library call or one I/O.

Every task that touches data runs with ``cache_policy=NO_CACHE`` and
``persist_result=False``: Prefect never hashes or stores a frame, so raw rows
cannot land in Prefect's result storage. Tasks that draw noise or charge the
ledger have ``retries=0``: a retry could otherwise redraw noise.
"""

from transit_release.runtime.telemetry import telemetry_off

telemetry_off()  # before Prefect and MLflow are imported (see transit_release.runtime.telemetry)

from prefect import task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

import functools  # noqa: E402

from transit_release.runtime.disclosure import install_log_filter, refusals_kept_private  # noqa: E402

install_log_filter()  # Prefect's logging is configured once imported (again: at each flow's start)


def data_task(fn=None, **options):
    """The decorator every task here uses: no cache, no stored result, no retry, and a refusal leaving it kept off a
    shared Prefect server (:mod:`transit_release.runtime.disclosure`). ``@data_task(name=...)`` or ``@data_task``."""
    if fn is None:
        return lambda f: data_task(f, **options)
    return task(refusals_kept_private(fn), **{"cache_policy": NO_CACHE, "persist_result": False, "retries": 0,
                                                **options})


def bulk_task(**options):
    """:data:`data_task` for a step that builds millions of small objects (a passenger file's records, a release,
    its evaluation): Python's cyclic collector pauses while it runs (:func:`transit_release.runtime.collector.bulk`)."""
    from functools import wraps

    from transit_release.runtime.collector import bulk

    def decorate(fn):
        @wraps(fn)
        def run(*args, **kwargs):
            with bulk():
                return fn(*args, **kwargs)

        return data_task(**options)(run)

    return decorate


class EvaluationFailed(RuntimeError):
    """An evaluation task's failure, said by the class of its error only (its message could quote the records):
    what Prefect's states and logs then hold. ``cause`` is that class's name."""

    def __init__(self, cause: str):
        super().__init__(f"utility evaluation failed ({cause})")
        self.cause = cause


def evaluation_task(fn=None, **options):
    """:func:`data_task` for a utility evaluation against the raw records, which runs after the charge: any error
    leaves it as :class:`EvaluationFailed` (its class only, without its message or the chain), and the tail
    publishes without the evaluation (:func:`flows.tail._evaluate_after_charge`). Python's cyclic collector pauses
    while it runs, as in :func:`bulk_task`."""
    from transit_release.runtime.collector import bulk

    if fn is None:
        return lambda f: evaluation_task(f, **options)

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        try:
            with bulk():
                return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 — MemoryError and bugs alike: said by their class only
            cause = type(exc).__name__
        raise EvaluationFailed(cause)  # outside the handler: no chained exception carries the message

    return data_task(guarded, **options)
