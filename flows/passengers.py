"""What the passenger-level kinds (sequences, trajectories, station sets) share as kinds of release.

Their records cover one declared period and come from a record file over a public universe, or from tap data
(one record per card over the period, through the validation gate of :mod:`flows.taps`); each release is one
spend; its report is the passenger-level report (utility against the raw records); the command's summary
shows its utility figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import pandas as pd
from prefect.utilities.annotations import quote

from flows.tail import Records, ReleaseKind, ReleaseRun, evaluation_timeout
from flows.taps import clean_taps
from tasks.inputs import record_content, tap_content
from tasks.report import write_sequence_report
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import LocationUniverse
from transit_release.reports.passenger_report import NOT_COMPUTED


@dataclass(frozen=True)
class TapInput:
    """Tap data as a passenger-level kind's input: the trips and stops files and the validated stop table
    (whose stations are the public universe)."""

    trips: str
    stops: str
    stop_table: pd.DataFrame


@dataclass(frozen=True)
class PassengerKind(ReleaseKind):
    """A passenger-level kind: the fields below, the public inputs every such kind has; subclasses add their own
    (mechanism, budget or setup) and give ``tracking_task``, the steps :meth:`read_file`, :meth:`from_taps`,
    :meth:`plan_spend` and those of :class:`~flows.tail.ReleaseKind` left open."""

    period: Period
    #: the public universe (a locations or taxonomy file, or the stop table's stations: never read off the data)
    universe: LocationUniverse
    #: the record file, or None with ``taps``
    input: str | None
    taps: TapInput | None
    quarantine_limit: float
    #: the utility workload: count queries, and the top-k lists compared
    queries: int
    top_k: list[int]
    inputs: list[str]

    #: the kind's tracking-record task: ``(manifest, metrics, quarantine) -> dict``
    tracking_task: ClassVar[Callable[[dict, dict, dict], dict]]
    #: what its record file holds, among the private inputs (:data:`transit_release.inputs.content.ROLES`)
    record_role: ClassVar[str]

    def read(self, run: ReleaseRun, workspace=None) -> Records:
        """The records, and what the private input holds (the record file's valid records, or the tap file's
        clean trips and card ids) for the overlap check between populations."""
        if self.taps is None:
            records = self.read_file()
            return replace(records, content=record_content(self.record_role, quote(records.data), self.record_cut))
        clean, _, screen = clean_taps(run.where, run.release_id, self.taps.trips, self.taps.stops, self.period,
                                      self.quarantine_limit, run.dry_run)
        records = self.from_taps(clean, screen)
        # the tap file's clean trips and cards, and the records this kind built from them (issue #40)
        return replace(records, content=tap_content(quote(clean), quote(self.taps.stop_table), self.record_role,
                                                    quote(records.data), self.record_cut))

    @property
    def record_cut(self) -> int | None:
        """The points of each record the mechanism reads, its first ``record_cut`` (a public parameter; the overlap
        check claims the records cut so: :func:`~transit_release.inputs.content.of_cut_records`); None: whole
        records (station sets)."""
        return None

    def read_file(self) -> Records:
        """The records of the input file, screened against the public universe."""
        raise NotImplementedError

    def from_taps(self, clean: pd.DataFrame, screen: dict) -> Records:
        """One record per card over the period, from the clean trips (``screen``: the gate's quarantine
        summary)."""
        raise NotImplementedError

    def plan(self, run: ReleaseRun, records: Records, fingerprint: str, population: str) -> list:
        return [self.plan_spend(run.release_id, fingerprint, population)]

    def plan_spend(self, release_id: str, fingerprint: str, population: str):
        """The release's one spend."""
        raise NotImplementedError

    def published_differs(self, manifest: dict) -> str | None:
        """Another public universe: the same trips and stop table read for another ``--mode`` (the spends record
        the input files and ε, not the universe the mode picks)."""
        published = manifest.get("universe") or {}
        if published.get("sha256") and published["sha256"] != self.universe.sha256:
            return (f"over another universe ({published.get('source', 'unnamed')}; this run's: "
                    f"{self.universe.source})")
        return None

    def timed(self, evaluation_task):
        """The kind's evaluation task, stopped by Prefect after :func:`~flows.tail.evaluation_timeout` seconds."""
        return evaluation_task.with_options(timeout_seconds=evaluation_timeout())

    def not_evaluated(self, reason: str):
        """No metrics, and the reason under :data:`NOT_COMPUTED` among the figures (the report says it)."""
        return {}, {NOT_COMPUTED: reason}

    def report(self, run: ReleaseRun, manifest: dict, records: Records, evaluation, outputs) -> str:
        metrics, figures = evaluation
        return write_sequence_report(run.where, manifest, metrics, records.quarantine, quote(figures))

    def tracking_record(self, manifest: dict, records: Records, evaluation, outputs) -> dict:
        record = self.tracking_task(manifest, evaluation[0], records.quarantine)
        if NOT_COMPUTED in evaluation[1]:
            record = {**record, "tags": {**record.get("tags", {}),
                                         "utility_evaluation": f"not computed: {evaluation[1][NOT_COMPUTED]}"}}
        return record

    def summary(self, run: ReleaseRun, manifest: dict, mlflow_run_id: str, report: str, records: Records,
                evaluation) -> dict:
        summary = {**super().summary(run, manifest, mlflow_run_id, report, records, evaluation),
                   "metrics": evaluation[0]}
        if NOT_COMPUTED in evaluation[1]:
            note = f"utility evaluation not computed: {evaluation[1][NOT_COMPUTED]}; the release is published"
            summary["warnings"] = [*summary.get("warnings", []), note]
        return summary
