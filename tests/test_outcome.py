"""Every run says its outcome: one line (published / already published / a dry run / refused or failed, with the
command's exit code) in its log and as a Markdown artifact on the outermost flow run."""

from __future__ import annotations

import json

import pytest

from transit_release.cli import main
from transit_release.errors import BudgetError, ConfigError, LedgerIntegrityError
from transit_release.runtime import outcome

PUBLISHED = {"release_id": "sets-x", "status": "published", "epsilon": 1.0, "delta": 0.0, "unit_of_privacy": "passenger-set",
             "rows": {"sets.csv": 1200, "counts.txt": 34}, "release_dir": "/h/releases/sets-x", "report": "/h/r.html",
             "period": "2026-01-01 .. 2026-01-31", "mlflow_run_id": "abc"}


def test_the_lines_of_each_outcome_name_what_was_done_and_the_exit_code():
    assert outcome.summary_line(PUBLISHED) == ("published sets-x: 1,234 rows in 2 file(s), ε=1, δ=0 per passenger-set; "
                                               "/h/releases/sets-x (exit 0)")
    again = {**PUBLISHED, "status": "already published: nothing drawn or spent"}
    assert outcome.summary_line(again) == "already published sets-x (ε=1, δ=0 per passenger-set): nothing drawn or spent (exit 0)"
    dry = {"release_id": "sets-x", "spends": [{"unit_of_privacy": "u", "scope": "all", "epsilon": 0.5, "delta": 0.0}] * 2,
           "events": 2, "allowed": False, "reason": "over the cap"}
    assert outcome.summary_line(dry).startswith("dry run of sets-x: 2 spend(s), ε=1 in all; the policy refuses it: "
                                                "over the cap")
    assert outcome.failure_line(BudgetError("over\n the cap")) == "refused: over the cap (exit 3)"
    assert outcome.failure_line(ConfigError("no input file x.txt")) == "refused: no input file x.txt (exit 2)"
    assert outcome.failure_line(LedgerIntegrityError("chain broken")) == "refused: chain broken (exit 4)"
    assert outcome.failure_line(RuntimeError("boom")) == "failed: RuntimeError: boom (exit 1)"
    page = outcome.markdown("set-release: run", outcome.summary_line(PUBLISHED), PUBLISHED)
    assert "| sets.csv | 1,200 |" in page and "- report: `/h/r.html`" in page


@pytest.fixture(scope="module")
def metro(tmp_path_factory):
    data = tmp_path_factory.mktemp("metro")
    assert main(["synth-metro", "--out", str(data), "--passengers", "3000", "--seed", "3"]) == 0
    return data


def _outcome_artifacts(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return [a for a in client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))) if (a.key or "").startswith("outcome-")]


@pytest.mark.flow
def test_a_scheduled_run_reports_published_already_published_and_refused_on_its_own_run(prefect_harness, metro,
                                                                                         tmp_path, test_seed):
    import logging
    import shutil

    from flows.scheduled import monthly_set_release

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(metro / "sequences.txt", inbox / "sets-2026-01.txt")
    params = dict(input_pattern=str(inbox / "sets-{year}-{month}.txt"), locations=str(metro / "locations.txt"),
                  fanout=6, home=str(tmp_path / "home"), month_of="2026-01-20")
    # the run logger's records themselves: Prefect's console handler may write to an older stream than this
    # test's (the one of the test that configured it first)
    logged: list[tuple[str, str]] = []

    class Collect(logging.Handler):
        def emit(self, record):
            logged.append((record.levelname, record.getMessage()))

    collector = Collect(level=logging.INFO)
    logging.getLogger("prefect.flow_runs").addHandler(collector)
    try:
        descriptions = []
        other_home = str(tmp_path / "other-home")
        for epsilon, month_of, home in ((1.0, "2026-01-20", params["home"]), (1.0, "2026-01-20", params["home"]),
                                        (1.0, "2026-02-03", params["home"]), (3.0, "2026-01-20", other_home)):
            state = monthly_set_release(**{**params, "epsilon": epsilon, "month_of": month_of, "home": home},
                                        return_state=True)
            (artifact,) = _outcome_artifacts(state.state_details.flow_run_id)  # one, on the scheduled run itself (none on its subflow)
            assert artifact.key == "outcome-monthly-set-release" and artifact.type == "markdown"
            assert artifact.description in artifact.data
            descriptions.append((state.type.value, artifact.description))
    finally:
        logging.getLogger("prefect.flow_runs").removeHandler(collector)
    (published, again, missing, over_cap) = descriptions
    assert published[0] == "COMPLETED" and published[1].startswith("published sets-diffpart-20260101-20260131: ")
    assert published[1].endswith("(exit 0)") and "ε=1, δ=1.01e-14 per passenger-set" in published[1]
    assert again[0] == "COMPLETED" and again[1].startswith("already published sets-diffpart-20260101-20260131 (ε=1")
    assert again[1].endswith("): nothing drawn or spent (exit 0)")
    # the session's server is not the command's own: a refusal is its class and exit code there, the full line is
    # in the home's private run log
    run_log = tmp_path / "home" / "private" / "run-log.jsonl"
    assert missing[0] == "FAILED" and missing[1] == f"refused: InputDataError, exit 2 (the full line: {run_log})"
    assert over_cap[0] == "FAILED" and over_cap[1] == ("refused: BudgetExceededError, exit 3 (the full line: "
                                                       f"{tmp_path / 'other-home' / 'private' / 'run-log.jsonl'})")
    full = {line["run"]: line["line"] for path in (run_log, tmp_path / "other-home" / "private" / "run-log.jsonl")
            for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    assert len(full) == 4 and oct(run_log.stat().st_mode & 0o777) == "0o600"
    (missing_line,) = [line for line in full.values() if "sets-2026-02.txt" in line]
    assert missing_line.startswith("refused: no input for the period 2026-02-01..2026-02-28: ") and \
        missing_line.endswith("sets-2026-02.txt does not exist (exit 2)")
    (over_cap_line,) = [line for line in full.values() if line.startswith("refused: Cannot release ")]
    assert "Requested: ε=3.000; remaining: ε=2.000" in over_cap_line and over_cap_line.endswith("(exit 3)")
    # the same line in the run's log (INFO)
    logged = [(level, line) for level, line in logged if line.startswith("transit-release outcome: ")]
    assert [line.split("outcome: ", 1)[1] for _, line in logged if line.split("outcome: ", 1)[1] in
            [d for _, d in descriptions]] == [d for _, d in descriptions]
    assert {level for level, _ in logged} == {"INFO"}


@pytest.mark.flow
def test_a_scheduled_audit_replaces_its_report_and_the_index_keeps_every_audits_figures(prefect_harness, tmp_path):
    from flows.audit import privacy_audit
    from transit_release.errors import ConfigError
    from transit_release.reports.release_index import audit_history, latest_audit

    home = tmp_path / "home"
    for _ in range(3):
        assert privacy_audit(home=str(home), report_folder="audit-scheduled")["ok"]
    reports = home / "release_reports"
    assert sorted(p.name for p in reports.iterdir() if p.name.startswith(("audit-", ".audit"))) == ["audit-scheduled"]
    assert (reports / "audit-scheduled" / "audit.html").exists()
    assert len(audit_history(reports)) == 3
    privacy_audit(home=str(home))  # a dated report, newer than the scheduled one: the latest
    assert latest_audit(reports)[0].startswith("audit-20")
    index = (reports / "index.html").read_text(encoding="utf-8")
    assert index.count("<td class=w>audit-scheduled</td>") == 3 and "Earlier audits" in index
    with pytest.raises(ConfigError, match="report folder '../x'"):
        privacy_audit(home=str(home), report_folder="../x")
