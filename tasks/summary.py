"""The end-of-run summaries the command prints (no raw value, no true count)."""

from __future__ import annotations

from tasks import data_task
from transit_release import outcome
from transit_release.home import Home


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
            "allowed": verdict["allowed"], "reason": verdict["reason"], "quarantine": quarantine}


def _report(flow, flow_run, state) -> None:
    """Say a run's outcome (see :mod:`transit_release.outcome`): one line at INFO in the run's log, and a Markdown
    artifact on the run. Only the outermost run says it: a scheduled run's release flow is its subflow, and its
    outcome is the scheduled run's."""
    if flow_run.parent_task_run_id is not None:
        return
    from prefect.artifacts import MarkdownArtifact
    from prefect.logging.loggers import flow_run_logger

    summary = None
    if state.is_completed():
        result = state.result(raise_on_failure=False)
        if isinstance(result, dict):
            summary = result
            line = outcome.summary_line(result)
        else:
            line = "completed (exit 0)"
    else:
        try:
            result = state.result(raise_on_failure=False)
        except Exception as exc:  # a crashed run's result may be unreadable
            result = exc
        line = outcome.failure_line(result if isinstance(result, BaseException) else (state.message or state.name))
    flow_run_logger(flow_run, flow).info("transit-release outcome: %s", line)
    MarkdownArtifact(markdown=outcome.markdown(f"{flow.name}: {flow_run.name}", line, summary),
                     key=OUTCOME_KEY_PREFIX + flow.name, description=line, flow_run_id=flow_run.id).create()


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
