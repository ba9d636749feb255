"""The tail every kind of release shares, and what a kind offers it.

A kind of release (Opal marginals, passenger sequences, trajectories, station sets) is a value, a
:class:`ReleaseKind` its flow builds from public inputs alone (the declared period, the public universe, the
budget or setup), offering the few steps that differ. :func:`publish_release` runs any kind through the one tail:

    fingerprint the inputs → hold the release's lock (another run of it is waited for) → resolve the id
    (published before, or by the run waited for, from the same input: nothing drawn or spent; charged by a run
    that is dead: refused, see :mod:`transit_release.runtime.release_lock`) → read the records → plan the spends
    → (a dry run: what to expect, the policy's verdict, and stop) → pre-check the budget → check the MLflow
    store and the free space → record what the records are (the overlap check between populations:
    :mod:`transit_release.accounting.claims`) → what to expect → charge → anchor the ledger → sanitize → evaluate
    → the public outputs → stage → the report → track, commit, anchor, index, DCAT catalogue
    (:func:`publish_staged`)

and, when a run fails once its charge was attempted, waits for the kind's work in the background and removes
what the run made under ``release_reports/<id>/``. The tail is no subflow: its steps are tasks of the calling
flow's run, so the Prefect UI shows each kind's own named tasks and subflows.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import pandas as pd
from prefect import get_run_logger
from prefect.utilities.annotations import quote

from tasks import EvaluationFailed
from tasks.budget import (charge_budget, check_budget, forget_claim, precheck_budget, record_claim,
                          refuse_a_dead_runs_charge, resolve_release)
from tasks.home import check_free_space, discard_run, records_space_needed
from tasks.inputs import fingerprint_inputs
from tasks.publish import commit_release, load_manifest, stage_release, update_catalog
from tasks.report import update_index
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store, mark_published, track_release
from transit_release.accounting.events import population_ignored
from transit_release.accounting.policy import BudgetPolicy
from transit_release.errors import ReleaseExistsError
from transit_release.files.home import Home, check_release_id
from transit_release.files.publish import StagedRelease
from transit_release.inputs.screening import Period
from transit_release.integrity.recovery import work_dir
from transit_release.runtime import custodian, progress
from transit_release.runtime.faults import crash_point
from transit_release.runtime.outcome import PUBLISHED_BY_ANOTHER_RUN
from transit_release.runtime.release_lock import release_lock


@dataclass(frozen=True)
class ReleaseRun:
    """One run of the tail: the home, the release id it resolved to, and whether it is a dry run."""

    where: Home
    release_id: str
    dry_run: bool


@dataclass(frozen=True)
class Records:
    """What a kind read: its records (``data``, never a Prefect parameter as such), the quarantine figures
    (counts by reason: what a dry run and the report show) and ``content``, what its private inputs hold (an
    :class:`~transit_release.inputs.content.InputContent`, or the folder the partition steps left it in), which
    the overlap check between populations keys and compares."""

    data: Any
    quarantine: dict
    content: Any = None


@dataclass(frozen=True)
class PublicOutputs:
    """A release's public files before staging: tables (CSV and Parquet), texts and the manifest, and
    ``extra``, what else the kind's report and tracking record need of this step."""

    tables: dict[str, pd.DataFrame]
    texts: dict[str, str]
    manifest: dict
    extra: Any = None


class ReleaseKind:
    """What a kind of release offers the tail (see the module's docstring): attributes from public inputs, and
    the steps that differ. A kind is built per run, by its flow, from public inputs only.

    Subclasses give ``period``, ``inputs``, ``default_release_id``, ``render_datacard`` and the steps marked
    below; the other members have defaults that suit a kind read in the flow's own process.
    """

    period: Period
    #: the input files: fingerprinted (home-keyed), and compared when an id is reused
    inputs: list[str]
    default_release_id: str
    #: whether the period was declared (a dry run may show one the data suggest)
    period_declared: bool = True
    #: ids an earlier version gave this release by default (:func:`tasks.budget.resolve_release`)
    earlier_release_ids: tuple[str, ...] = ()
    render_datacard: Callable[[dict], str]
    #: progress labels of the steps (None: the step shows its own progress, or none; evaluating None: the
    #: evaluation is part of the publishing step)
    reading: str | None = None
    sanitizing: str | None = None
    evaluating: str | None = "evaluating"
    publishing: str = "publishing"

    def fingerprint(self, where: Home):
        """The inputs' fingerprint, or a future of it (a kind may hash while it reads)."""
        return fingerprint_inputs(where, self.inputs)

    def same_release(self, fingerprint) -> Callable[[list], bool]:
        """Do earlier spends describe this very release (same inputs, same public parameters)?"""
        raise NotImplementedError

    def same_earlier_release(self, fingerprint) -> Callable[[list], bool]:
        """Do the spends of an earlier default id (:attr:`earlier_release_ids`) describe this release? As
        :meth:`same_release`, unless the kind's default mechanism changed: then the former default's spends."""
        return self.same_release(fingerprint)

    def workspace(self, run: ReleaseRun):
        """A context for reading through publishing (e.g. a working directory, a cluster); what it yields is given
        to :meth:`read`. By default the run's own working directory, locked while it lives: an audit meanwhile
        knows the release is in flight (:func:`transit_release.files.home.live_release_ids`)."""
        return work_dir(run.where, run.release_id)

    def read(self, run: ReleaseRun, workspace) -> Records:
        """Read and screen the records over the public universe (quarantine figures as counts only)."""
        raise NotImplementedError

    def plan(self, run: ReleaseRun, records: Records, fingerprint: str, population: str) -> list:
        """The spends, as events, from public parameters (never from the records)."""
        raise NotImplementedError

    def space_needed(self, records: Records) -> dict[str, int]:
        """Bytes the release still writes once charged (public: never from the records)."""
        return records_space_needed()

    def expectation(self, run: ReleaseRun, records: Records):
        """What the release can be expected to publish, said to the custodian's terminal before the charge
        (:mod:`transit_release.runtime.custodian`): public rules and internal figures of the records; None if the kind
        says nothing."""
        return None

    def sanitize(self, run: ReleaseRun, records: Records, charged: list):
        """The noisy release, drawn only after ``charged`` (the ledger's entries of this run) holds its spends."""
        raise NotImplementedError

    def published_differs(self, manifest: dict) -> str | None:
        """What makes the published release ``manifest`` of the id this run resolved to (same input files, same
        spends) another release than this run's, in words; None if nothing does. Public parameters only."""
        return None

    def evaluate(self, records: Records, sanitized):
        """Utility figures of the release against the records (internal: for the report and MLflow), within
        :func:`evaluation_timeout` seconds."""
        raise NotImplementedError

    def not_evaluated(self, reason: str):
        """The evaluation to publish with when :meth:`evaluate` failed or ran out of time after the charge (its
        figures marked as not computed, ``reason`` said in the report, MLflow and the summary); None: the kind
        cannot publish without it (the failure stands)."""
        return None

    def outputs(self, run: ReleaseRun, events: list, records: Records, sanitized, evaluation,
                in_flight: list) -> PublicOutputs:
        """The public files and manifest. Work started in the background (e.g. drawing the report's figures) is
        added to ``in_flight``: a failed run waits for it before the report's folder is removed."""
        raise NotImplementedError

    def report(self, run: ReleaseRun, manifest: dict, records: Records, evaluation, outputs: PublicOutputs) -> str:
        """Write the internal report of the staged ``manifest``; its folder."""
        raise NotImplementedError

    def tracking_record(self, manifest: dict, records: Records, evaluation, outputs: PublicOutputs) -> dict:
        """What MLflow records of the release (parameters, metrics, tags, artifacts)."""
        raise NotImplementedError

    def summary(self, run: ReleaseRun, manifest: dict, mlflow_run_id: str, report: str, records: Records,
                evaluation) -> dict:
        """What the command prints of a published release."""
        return summarize(run.where, manifest, "published", mlflow_run_id, f"{report}/report.html")


#: The seconds a release's utility evaluation may take (``TRANSIT_RELEASE_EVALUATION_TIMEOUT``; a public
#: setting): past them the release, already charged, is published with its evaluation marked as not computed.
EVALUATION_TIMEOUT_ENV = "TRANSIT_RELEASE_EVALUATION_TIMEOUT"
DEFAULT_EVALUATION_TIMEOUT = 1800.0


def evaluation_timeout() -> float:
    """The seconds an evaluation task may run (:data:`EVALUATION_TIMEOUT_ENV`, default 30 minutes)."""
    import os

    raw = os.environ.get(EVALUATION_TIMEOUT_ENV, "")
    try:
        seconds = float(raw) if raw else DEFAULT_EVALUATION_TIMEOUT
    except ValueError:
        seconds = DEFAULT_EVALUATION_TIMEOUT
    return seconds if seconds > 0 else DEFAULT_EVALUATION_TIMEOUT


def not_computed_reason(exc: BaseException) -> str:
    """Why an evaluation was not computed, in words that hold no data: the timeout, or the error's class only
    (an exception's message could quote the records)."""
    if isinstance(exc, TimeoutError):
        return f"it did not finish within {evaluation_timeout():g} s ({EVALUATION_TIMEOUT_ENV})"
    return f"it failed ({exc.cause if isinstance(exc, EvaluationFailed) else type(exc).__name__})"


def _evaluate_after_charge(kind: ReleaseKind, records: Records, sanitized):
    """The kind's evaluation, which is no part of the privacy promise: once the release is charged and drawn, its
    failure or timeout (the time and memory it takes depend on the raw records, atk40 C1) must not decide whether
    the release is published. The kind then publishes with its evaluation marked as not computed
    (:meth:`ReleaseKind.not_evaluated`), and the run's log says why, without the error's message."""
    try:
        return kind.evaluate(records, sanitized)
    except Exception as exc:  # noqa: BLE001 — MemoryError, a timeout, a bug: none may withhold a charged release
        reason = not_computed_reason(exc)
        fallback = kind.not_evaluated(reason)
        if fallback is None:
            raise
        get_run_logger().warning("utility evaluation not computed: %s; the release, already charged, is published "
                                 "without it", reason)
        return fallback


def _stage(label: str | None):
    return progress.stage(label) if label else nullcontext()


def _value(fingerprint) -> str:
    return fingerprint.result() if hasattr(fingerprint, "result") else fingerprint


def _tell_expectation(kind: ReleaseKind, run: ReleaseRun, records: Records) -> None:
    """Before the charge (or a dry run's verdict): what the release can be expected to publish, to the custodian's
    terminal only, and computed only when one listens (its internal figures are of the data)."""
    if custodian.listening():
        expectation = kind.expectation(run, records)
        if expectation is not None:
            custodian.tell(expectation)


def publish_release(kind: ReleaseKind, where: Home, policy: BudgetPolicy, population: str, release_id: str | None,
                    dry_run: bool) -> dict:
    """Run ``kind`` through the tail (see the module's docstring); the summary the command prints.

    ``release_id``: the id asked for (default: the kind's). Nothing is charged before every check has passed;
    nothing is visible under ``releases/`` before the commit; a run refused at its charge removes nothing of the
    report folder of its id (it is another run's)."""
    wanted = check_release_id(release_id or kind.default_release_id)
    fingerprint = kind.fingerprint(where)
    with nullcontext() if dry_run else _one_run_of(where, wanted) as held:
        # quoted: Prefect would wait for a future given as a task's parameter; it is waited for only when there are
        # earlier spends to compare with
        target = resolve_release(where, wanted, kind.same_release(fingerprint), quote(fingerprint), kind.inputs,
                                 [] if release_id else list(kind.earlier_release_ids),
                                 kind.same_earlier_release(fingerprint) if kind.earlier_release_ids else None)
        if target.already_published:
            status = (f"{PUBLISHED_BY_ANOTHER_RUN} while this one waited: nothing drawn or spent" if held and held.waited
                      else "already published: nothing drawn or spent")
            manifest = load_manifest(where, target.release_id)
            differs = kind.published_differs(manifest)
            if differs:  # the same files and ε, another release (atk40 m2: --mode bus after the train sets)
                raise ReleaseExistsError(
                    f"release '{target.release_id}' is already published from the same input files but {differs}; "
                    "it is never overwritten: give this release its own --release-id; nothing was drawn or spent")
            summary = summarize(where, manifest, status)
            note = population_ignored(manifest, target.release_id, population)
            if note:  # the same release: the population it was published about stands
                get_run_logger().warning(note)
                summary = {**summary, "warnings": [*summary.get("warnings", []), note]}
            return summary
        if not dry_run:
            refuse_a_dead_runs_charge(where, target.release_id)
        return _publish(kind, where, policy, population, fingerprint, ReleaseRun(where, target.release_id, dry_run))


@contextmanager
def _one_run_of(where: Home, release_id: str):
    """This run alone of ``release_id`` in the home, from its resolution to its end
    (:mod:`transit_release.runtime.release_lock`); another run of it is waited for, and said so."""
    from prefect import get_run_logger

    @contextmanager
    def waiting(holder: str):
        get_run_logger().info("release %s: waiting for another run of it to end (%s holds its lock)", release_id,
                              holder or "a run")
        with progress.stage(f"waiting for another run of {release_id} to end ({holder or 'a run'})"):
            yield

    with release_lock(where.root, release_id, waiting) as held:
        yield held


def _publish(kind: ReleaseKind, where: Home, policy: BudgetPolicy, population: str, fingerprint,
             run: ReleaseRun) -> dict:
    """The tail from reading the records to the summary (or a dry run's verdict), for a release id not yet published
    (see :func:`publish_release`)."""
    rid = run.release_id
    with kind.workspace(run) as workspace:
        with _stage(kind.reading):
            records = kind.read(run, workspace)
        events = kind.plan(run, records, _value(fingerprint), population)
        if run.dry_run:
            _tell_expectation(kind, run, records)
            return summarize_dry_run(rid, kind.period, kind.period_declared, quote(events),
                                     check_budget(where, quote(events), policy, quote(records.content)),
                                     records.quarantine)
        with progress.stage("checking the budget, MLflow and the free space"):
            # the spends (168 of a card-level week) and the ledger's entries for them are quoted: Prefect would
            # walk every one's fields at every task they are given to
            precheck_budget(where, quote(events), policy)
            check_store(where)  # MLflow must work before anything is spent
            check_free_space(where, kind.space_needed(records), rid)  # room to finish once charged
        # what the records are, keyed, privately: refused at once if another population's release read them
        attempt = record_claim(where, quote(records.content), quote(events))
        _tell_expectation(kind, run, records)
        charged = None
        in_flight: list = []
        try:
            with progress.stage("charging the privacy ledger"):
                charged = charge_budget(where, quote(events), policy, attempt)
                anchor_ledger(where, rid, "charge")
            with _stage(kind.sanitizing):
                sanitized = kind.sanitize(run, records, charged)
            if kind.evaluating:
                with progress.stage(kind.evaluating):
                    evaluation = _evaluate_after_charge(kind, records, sanitized)
            with progress.stage(kind.publishing):
                if not kind.evaluating:  # the kind evaluates as it publishes
                    evaluation = _evaluate_after_charge(kind, records, sanitized)
                public = kind.outputs(run, events, records, sanitized, evaluation, in_flight)
                staged = stage_release(where, rid, public.tables, public.texts, public.manifest, kind.render_datacard,
                                       quote(charged), policy)
                report = kind.report(run, staged.manifest, records, evaluation, public)
                mlflow_run_id, notes = publish_staged(where, staged, charged,
                                                      kind.tracking_record(staged.manifest, records, evaluation,
                                                                           public),
                                                      report, policy)
        except BaseException:
            try:
                for work in in_flight:
                    work.wait()  # it writes into the report's folder, which is removed next
            finally:  # also when the wait is interrupted
                # refused at its charge, a run wrote no report: a folder there is another run's (of the same id)
                discard_run(where, rid, keep_reports=charged is None)
                if charged is None:  # never charged: its claim would be ignored; remove it
                    forget_claim(where, attempt, rid)
            raise
    summary = kind.summary(run, staged.manifest, mlflow_run_id, report, records, evaluation)
    return {**summary, "warnings": [*summary.get("warnings", []), *notes]} if notes else summary


def publish_staged(where: Home, staged: StagedRelease, charged: list, record: dict, report_dir: str,
                   policy: BudgetPolicy | None = None) -> tuple[str, list[str]]:
    """Make a staged release public and recorded: track in MLflow → commit (intent, rename, ledger) → anchor the
    ledger head → mark the run published → index → DCAT catalogue. Returns the MLflow run id and warnings: an index
    or catalogue that could not be rewritten after the commit (the release is published: the run succeeds, and
    `repair` or the next run rewrites them)."""
    run_id = track_release(where, staged.manifest, quote(charged), quote(record), report_dir)
    crash_point("after-mlflow-run")
    commit_release(where, staged, run_id)  # the release becomes visible here, and only here
    anchor_ledger(where, staged.manifest["release_id"], "publication")
    mark_published(where, run_id)
    crash_point("after-published-tag")
    notes = [update_index(where, policy, after_publication=True),  # the caps of the policy it was charged under
             update_catalog(where, str(staged.final_dir))]
    notes = [n for n in notes if n]
    for note in notes:
        get_run_logger().warning(note)
    return run_id, notes
