"""The end-of-run summaries the command prints (no raw value, no true count)."""

from __future__ import annotations

from tasks import data_task
from transit_release.files.home import Home
from transit_release.runtime import outcome


@data_task(name="summarize-release")
def summarize(home: Home, manifest: dict, status: str, mlflow_run_id: str | None = None,
              report: str | None = None, quarantine: dict | None = None) -> dict:
    return outcome.release_summary(home, manifest, status, mlflow_run_id, report, quarantine)


@data_task(name="summarize-dry-run")
def summarize_dry_run(release_id: str, period, period_declared: bool, events: list, verdict: dict,
                      quarantine: dict | None) -> dict:
    """What a dry run would spend, and whether the policy allows it; nothing was charged or written."""
    from transit_release.accounting.accountant import compose

    spends = []
    for (unit, relation), report in compose(events).items():
        for label, loss in report.per_partition.items():
            spends.append({"unit_of_privacy": unit, "scope": label, "epsilon": loss.epsilon, "delta": loss.delta})
    return {"release_id": release_id, "status": "dry run: nothing charged, drawn or written",
            "period": f"{period.start.isoformat()} .. {period.end.isoformat()}",
            "period_declared": period_declared, "spends": spends, "events": len(events),
            "allowed": verdict["allowed"], "reason": verdict["reason"], "exit": verdict.get("exit", 0),
            "quarantine": quarantine}


def _report(flow, flow_run, state) -> None:
    """Say a run's outcome (see :mod:`transit_release.runtime.outcome`): one line at INFO in the run's log, and a Markdown
    artifact on the run. Only the outermost run says it: a scheduled run's release flow is its subflow, and its
    outcome is the scheduled run's. On a Prefect server other than the command's own, a refusal is said as its
    class and exit code only, and the full line goes to the home's private run log
    (:mod:`transit_release.runtime.disclosure`)."""
    if flow_run.parent_task_run_id is not None:
        _discard_pickled_exception(state)
        return
    from prefect.artifacts import MarkdownArtifact
    from prefect.logging.loggers import flow_run_logger

    from transit_release.runtime import disclosure

    shared = disclosure.shared_api()
    summary = None
    if state.is_completed():
        result = state.result(raise_on_failure=False)
        if isinstance(result, dict):
            summary = result
            line, public = outcome.summary_line(result), outcome.summary_line(result, shared=shared)
        else:
            line = public = "completed (exit 0)"
    else:
        try:
            result = state.result(raise_on_failure=False)
        except Exception as exc:  # a crashed run's result may be unreadable
            result = exc
        _discard_pickled_exception(state)
        failure = result if isinstance(result, BaseException) else (state.message or state.name)
        line = outcome.failure_line(failure)
        public = outcome.shared_failure_line(failure) if shared else line
    logger = flow_run_logger(flow_run, flow)
    if shared:
        params = flow_run.parameters or {}
        where = Home.at(params.get("home") or ".", params.get("ledger"))
        kept = disclosure.write_run_log(where.root, str(flow_run.id), flow.name, flow_run.name, line)
        if public != line:  # the full line on this process's terminal only
            logger.info("transit-release outcome: %s", line, extra={"send_to_api": False})
            public += f" (the full line: {kept})" if kept else ""
    logger.info("transit-release outcome: %s", public)
    MarkdownArtifact(markdown=outcome.markdown(f"{flow.name}: {flow_run.name}", public, summary),
                     key=OUTCOME_KEY_PREFIX + flow.name, description=public, flow_run_id=flow_run.id).create()


def _discard_pickled_exception(state) -> None:
    """Prefect's engine pickles a failed run's exception (its full message: counts, row numbers) into the local
    result storage whatever the flow's ``persist_result``; the tool keeps no result, so the file goes (a served or
    a worker's run; a command also removes what its run left, :mod:`transit_release.cli.aftermath`)."""
    from pathlib import Path

    from prefect.settings import get_current_settings

    data = getattr(state, "data", None)
    meta = getattr(data, "metadata", data)
    key, block = getattr(meta, "storage_key", None), getattr(meta, "storage_block_id", None)
    storage = get_current_settings().results.local_storage_path
    if key and block is None and storage and Path(key).parent == Path(storage).expanduser():
        Path(key).unlink(missing_ok=True)


#: the key of a flow's outcome artifacts is this prefix and the flow's name (its history in Prefect's UI)
OUTCOME_KEY_PREFIX = "outcome-"
#: The outermost flow runs this process has started, by id, in order: what a command that stops short forgets
#: (:func:`transit_release.cli.server.forget_refused_runs`, with their subflows).
RUNS_HERE: list = []


def _remember(flow, flow_run, state) -> None:
    """Note the run's id as it starts (an outermost run: a scheduled run's release flow is its subflow)."""
    if flow_run.parent_task_run_id is None:
        RUNS_HERE.append(flow_run.id)


#: the hooks a flow that reports its outcome declares: ``@flow(..., **REPORTS_OUTCOME)``
REPORTS_OUTCOME = {"on_running": [_remember], "on_completion": [_report], "on_failure": [_report],
                   "on_crashed": [_report]}
