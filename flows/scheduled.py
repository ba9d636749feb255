"""The flows the schedules run: each picks its period, finds its input, then runs the release flow."""

from __future__ import annotations

from prefect import flow

from flows.opal_release import opal_release
from flows.sequence_release import sequence_release
from tasks.schedule import locate_input, period_to_publish


@flow(name="weekly-opal-release")
def weekly_opal_release(trips_pattern: str, stops: str, home: str = ".", config: str | None = None,
                        policy: str | None = None, timezone: str = "Australia/Sydney",
                        week_of: str | None = None, dask_address: str | None = None,
                        workers: int | None = None) -> dict:
    """Publish the previous full week (Monday–Sunday) before the scheduled time, or the week of ``week_of``.

    ``trips_pattern`` names the week's file, e.g. ``data/trips-{start}.csv``; ``dask_address`` or
    ``workers`` choose where the partitions are sanitized (default: a local Dask cluster of 2 workers).
    """
    period = period_to_publish("weekly", timezone, week_of)
    trips = locate_input(trips_pattern, period)
    return opal_release(trips=trips, stops=stops, home=home, config=config, policy=policy,
                        period_start=period[0], period_end=period[1], dask_address=dask_address, workers=workers)


@flow(name="monthly-sequence-release")
def monthly_sequence_release(input_pattern: str, epsilon: float, height: int, variant: str = "hybrid",
                             taxonomy: str | None = None, fanout: int | None = None, home: str = ".",
                             policy: str | None = None, timezone: str = "America/Montreal",
                             month_of: str | None = None) -> dict:
    """Publish the previous calendar month's passenger sequences (``input_pattern`` e.g. ``seq-{year}-{month}.txt``)."""
    period = period_to_publish("monthly", timezone, month_of)
    path = locate_input(input_pattern, period)
    return sequence_release(input=path, epsilon=epsilon, height=height, variant=variant, taxonomy=taxonomy,
                            fanout=fanout, home=home, policy=policy, scope=f"{period[0]}..{period[1]}")
