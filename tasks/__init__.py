"""Thin Prefect tasks: each wraps one library call or one I/O.

Every task that touches data runs with ``cache_policy=NO_CACHE`` and
``persist_result=False``: Prefect never hashes or stores a frame, so raw rows
cannot land in Prefect's result storage. Tasks that draw noise or charge the
ledger have ``retries=0``: a retry could otherwise redraw noise.
"""

from functools import partial

from transit_release.telemetry import telemetry_off

telemetry_off()  # before Prefect and MLflow are imported (see transit_release.telemetry)

from prefect import task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

#: The decorator every task here uses.
data_task = partial(task, cache_policy=NO_CACHE, persist_result=False, retries=0)


def bulk_task(**options):
    """:data:`data_task` for a step that builds millions of small objects (a passenger file's records, a release,
    its evaluation): Python's cyclic collector pauses while it runs (:func:`transit_release.collector.bulk`)."""
    from functools import wraps

    from transit_release.collector import bulk

    def decorate(fn):
        @wraps(fn)
        def run(*args, **kwargs):
            with bulk():
                return fn(*args, **kwargs)

        return data_task(**options)(run)

    return decorate
