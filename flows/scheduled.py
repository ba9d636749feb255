"""The flows the schedules run: each picks its period, finds its input, then runs the release flow.

``population`` names the people a release is about (default: the home's one population); releases of one home
about genuinely different people (another city's riders) name theirs, so that each person's loss composes only the
releases about them."""

from __future__ import annotations

from prefect import flow

from flows.opal_release import opal_release
from flows.sequence_release import sequence_release
from flows.sets_release import set_release
from flows.trajectory_release import trajectory_release
from tasks.schedule import locate_input, period_to_publish
from tasks.summary import REPORTS_OUTCOME
from transit_release.runtime.disclosure import refusals_kept_private


@flow(name="weekly-opal-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def weekly_opal_release(trips_pattern: str, stops: str, home: str = ".", config: str | None = None,
                        policy: str | None = None, timezone: str = "Australia/Sydney",
                        week_of: str | None = None, dask_address: str | None = None,
                        workers: int | None = None, population: str | None = None) -> dict:
    """Publish the previous full week (Monday–Sunday) before the scheduled time, or the week of ``week_of``.

    ``trips_pattern`` names the week's file, e.g. ``data/trips-{start}.csv``; ``dask_address`` or
    ``workers`` choose where the partitions are sanitized (default: a local Dask cluster of 2 workers on a machine
    with at least 4 cores, else none; 0: none, in the flow's process).
    """
    period = period_to_publish("weekly", timezone, week_of)
    trips = locate_input(trips_pattern, period)
    return opal_release(trips=trips, stops=stops, home=home, config=config, policy=policy,
                        period_start=period[0], period_end=period[1], dask_address=dask_address, workers=workers,
                        population=population)


@flow(name="monthly-sequence-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def monthly_sequence_release(input_pattern: str, epsilon: float, height: int | None = None,
                             variant: str | None = None, taxonomy: str | None = None,
                             locations: str | None = None, fanout: int | None = None, home: str = ".",
                             policy: str | None = None, timezone: str = "America/Montreal",
                             month_of: str | None = None, mechanism: str | None = None, lmax: int | None = None,
                             nmax: int | None = None, population: str | None = None) -> dict:
    """Publish the previous calendar month's passenger sequences (``input_pattern`` e.g. ``seq-{year}-{month}.txt``)
    over the public universe of ``taxonomy`` and/or ``locations``; the month is the declared period.

    ``mechanism`` chooses ``ngram`` (``lmax``, ``nmax``; the default) or ``prefix-tree`` (``height``, ``variant``,
    ``fanout``; chosen too by one of these without ``mechanism``, as when it was the default); a deployment naming
    its mechanism may list both mechanisms' parameters: only the chosen one's are passed on.
    """
    from transit_release.releases.sequences import resolve_mechanism

    period = period_to_publish("monthly", timezone, month_of)
    path = locate_input(input_pattern, period)
    mechanism = mechanism or resolve_mechanism(None, height, variant, fanout)
    own = (dict(lmax=lmax, nmax=nmax) if mechanism == "ngram"
           else dict(height=height, variant=variant, fanout=fanout))
    return sequence_release(input=path, epsilon=epsilon, period_start=period[0], period_end=period[1],
                            locations=locations, taxonomy=taxonomy, home=home, policy=policy, mechanism=mechanism,
                            population=population, **own)


@flow(name="weekly-trajectory-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def weekly_trajectory_release(input_pattern: str, epsilon: float, height: int | None = None,
                              location_taxonomy: str | None = None, locations: str | None = None,
                              location_fanout: int | None = None, time_fanout: int | None = None,
                              thresholds: str | None = None, home: str = ".", policy: str | None = None,
                              timezone: str = "America/Montreal", week_of: str | None = None,
                              population: str | None = None, mechanism: str | None = None,
                              budget: str | None = None, nmax: int | None = None) -> dict:
    """Publish the previous full week's (Monday–Sunday) passenger trajectories (``input_pattern`` e.g.
    ``traj-{start}.txt``, hours of that week) over the public universe of ``location_taxonomy`` and/or
    ``locations``; the week is the declared period (a trajectory release covers one week: hours of the week).

    ``mechanism``: ``markov`` (``nmax``; the default) or ``safepath`` (``budget``, ``thresholds``, the fan-outs;
    chosen too by one of these without ``mechanism``, as when it was the default); ``height`` default 6."""
    period = period_to_publish("weekly", timezone, week_of)
    path = locate_input(input_pattern, period)
    return trajectory_release(input=path, epsilon=epsilon, height=height, period_start=period[0],
                              period_end=period[1], locations=locations, location_taxonomy=location_taxonomy,
                              location_fanout=location_fanout, time_fanout=time_fanout, thresholds=thresholds,
                              home=home, policy=policy, population=population, mechanism=mechanism, budget=budget,
                              nmax=nmax)


@flow(name="monthly-set-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def monthly_set_release(input_pattern: str, epsilon: float, locations: str, fanout: int | None = None,
                        home: str = ".", policy: str | None = None, timezone: str = "America/Montreal",
                        month_of: str | None = None, population: str | None = None,
                        mechanism: str | None = None) -> dict:
    """Publish the previous calendar month's station sets (``input_pattern`` e.g. ``sets-{year}-{month}.txt``) over
    the public universe of the ``locations`` file; the month is the declared period. ``mechanism``: ``histogram``
    or ``diffpart``; default from the universe size (``fanout`` without it keeps DiffPart)."""
    period = period_to_publish("monthly", timezone, month_of)
    path = locate_input(input_pattern, period)
    return set_release(input=path, locations=locations, epsilon=epsilon, mechanism=mechanism, fanout=fanout,
                       period_start=period[0], period_end=period[1], home=home, policy=policy, population=population)
