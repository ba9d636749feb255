"""What a run did, in one line and as a short Markdown page: published (rows, ε, δ), already published (nothing
spent), a dry run's verdict, an audit's result, or refused or failed (the reason and the exit code the command
gives it). Built from a run's summary or its exception only: public figures, never a raw value. Prefect-free."""

from __future__ import annotations

from transit_release.errors import (BudgetError, LedgerBusyError, LedgerIntegrityError, LedgerStorageError,
                                   TransitReleaseError, full_message)

#: the status of a run that waited for another run of the same release, which published it
PUBLISHED_BY_ANOTHER_RUN = "published by another run"
#: the exit codes of the ``transit-release`` command (:mod:`transit_release.cli.exits`)
EXIT_UNEXPECTED = 1
EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_AUDIT_FAILED = 4
EXIT_INTERRUPTED = 130


def exit_code(exc: BaseException) -> int:
    """The exit code the command gives a run that raised ``exc``."""
    if isinstance(exc, LedgerIntegrityError):
        return EXIT_AUDIT_FAILED
    if isinstance(exc, (LedgerBusyError, LedgerStorageError)):  # try again later: a storage failure, not bad input
        return EXIT_UNEXPECTED
    if isinstance(exc, BudgetError):
        return EXIT_BUDGET
    if isinstance(exc, TransitReleaseError):
        return EXIT_INPUT
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_UNEXPECTED


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def failure_line(exc: BaseException | str) -> str:
    """A refused run (a :class:`TransitReleaseError`: the command's one-line refusal) or a failed one."""
    if isinstance(exc, str):
        return f"failed: {_one_line(exc)} (exit {EXIT_UNEXPECTED})"
    verb = "refused" if isinstance(exc, TransitReleaseError) else "failed"
    reason = (_one_line(full_message(exc)) if isinstance(exc, TransitReleaseError)
              else f"{type(exc).__name__}: {_one_line(exc)}")
    return f"{verb}: {reason or type(exc).__name__} (exit {exit_code(exc)})"


def shared_failure_line(exc: BaseException | str) -> str:
    """What a Prefect server other than the command's own is told of a refused or failed run: the error's class
    and the exit code (the full line stays on the terminal and in the home's private run log)."""
    if isinstance(exc, str):
        return f"failed, exit {EXIT_UNEXPECTED}"
    verb = "refused" if isinstance(exc, TransitReleaseError) else "failed"
    return f"{verb}: {type(exc).__name__}, exit {exit_code(exc)}"


def summary_line(summary: dict, shared: bool = False) -> str:
    """The line of a run that returned ``summary`` (a release's, a dry run's or an audit's); ``shared``: as a Prefect
    server other than the command's own is told (a dry run's refusal without its reason)."""
    if "spends" in summary:  # a dry run
        eps = sum(s["epsilon"] for s in summary["spends"])
        verdict = ("the policy allows it" if summary["allowed"] else "the policy refuses it (the reason is in the "
                   "home's private run log)" if shared else f"the policy refuses it: {summary['reason']}")
        code = 0 if summary["allowed"] else int(summary.get("exit") or EXIT_BUDGET)
        return (f"dry run of {summary['release_id']}: {summary['events']} spend(s), ε={eps:g} in all; {verdict}; "
                f"nothing charged, drawn or written (exit {code})")
    if "entries" in summary and "ok" in summary:  # an audit
        verdict = "PASSED" if summary["ok"] else "FAILED"
        code = 0 if summary["ok"] else EXIT_AUDIT_FAILED
        if summary.get("ledger_unreadable"):
            return (f"audit FAILED: the privacy ledger could not be opened, nothing else checked; report "
                    f"{summary.get('report')} (exit {code})")
        return (f"audit {verdict}: {summary['entries']} ledger entries, "
                f"{len(summary.get('releases_published') or [])} published release(s), "
                f"{len(summary.get('discrepancies') or [])} discrepancy(ies); report {summary.get('report')} "
                f"(exit {code})")
    rows = sum((summary.get("rows") or {}).values())
    privacy = f"ε={summary['epsilon']:g}, δ={summary['delta']:.3g} per {summary['unit_of_privacy']}"
    if str(summary.get("status", "")).startswith("already published"):
        return f"already published {summary['release_id']} ({privacy}): nothing drawn or spent (exit 0)"
    if str(summary.get("status", "")).startswith(PUBLISHED_BY_ANOTHER_RUN):
        return (f"{PUBLISHED_BY_ANOTHER_RUN}: {summary['release_id']} ({privacy}), while this run waited for it; "
                "nothing drawn or spent (exit 0)")
    return (f"published {summary['release_id']}: {rows:,} rows in {len(summary.get('rows') or {})} file(s), "
            f"{privacy}; {summary['release_dir']} (exit 0)")


def markdown(title: str, line: str, summary: dict | None = None) -> str:
    """The outcome as a Markdown page: the title, the line, and a release's files and report."""
    out = [f"# {title}", "", line, ""]
    if summary and summary.get("rows") and "spends" not in summary:
        out += ["| file | rows |", "|---|---:|"] + [f"| {f} | {n:,} |" for f, n in summary["rows"].items()] + [""]
    if summary and summary.get("spends"):
        out += ["| unit of privacy | scope | ε | δ |", "|---|---|---:|---:|"]
        out += [f"| {s['unit_of_privacy']} | {s['scope']} | {s['epsilon']:g} | {s['delta']:.3g} |"
                for s in summary["spends"]] + [""]
    for label, key in (("period", "period"), ("release folder", "release_dir"), ("report", "report"),
                       ("MLflow run", "mlflow_run_id")):
        if summary and summary.get(key):
            out.append(f"- {label}: `{summary[key]}`")
    return "\n".join(out).rstrip() + "\n"


def release_summary(home, manifest: dict, status: str, mlflow_run_id: str | None = None,
                    report: str | None = None, quarantine: dict | None = None) -> dict:
    """What the command prints of a release (published, or already published): public figures, never a raw
    value."""
    rid = manifest["release_id"]
    files = {k: v["rows"] for k, v in manifest["files"].items() if "rows" in v and k.endswith((".csv", ".txt"))}
    p = manifest["privacy"]
    return {
        "release_id": rid,
        "kind": manifest.get("kind", ""),
        "status": status,
        "period": f"{manifest['period']['start']} .. {manifest['period']['end']}",
        "epsilon": p["epsilon"],
        "delta": p["delta"],
        "unit_of_privacy": p["unit_of_privacy"],
        "neighbouring": p["neighbouring_relation"],
        "cumulative": p.get("cumulative_at_publication"),
        "person": p.get("person_at_publication"),
        "rows": files,
        "thresholds": _thresholds(p),
        "release_dir": str(home.release_dir(rid)),
        "noise_source": manifest["noise_source"],
        "report": report or str(home.reports / rid / "report.html"),
        "mlflow_run_id": mlflow_run_id,
        "mlflow_ui": home.mlflow_ui_command(),
        "quarantine": quarantine,
    }


def _thresholds(p: dict) -> dict:
    """The public thresholds: per marginal (Opal), generalized and station (sequences), per taxonomy step
    (trajectories)."""
    if "marginals" in p:
        return {k: v["threshold"] for k, v in p["marginals"].items()}
    steps = {k[: -len("_taxonomy")]: "/".join(map(str, p[k]["thresholds"]))
             for k in ("location_taxonomy", "time_taxonomy") if isinstance(p.get(k), dict) and "thresholds" in p[k]}
    return steps or {k: p[k] for k in ("generalized_threshold", "station_threshold", "level1_threshold",
                                       "pair_threshold", "day_threshold") if p.get(k) is not None}
