"""The end-of-run summary (no raw value, no true count)."""

from __future__ import annotations

from tasks import data_task
from transit_release.home import Home


@data_task(name="summarize-release")
def summarize(home: Home, manifest: dict, status: str, mlflow_run_id: str | None = None,
              report: str | None = None, quarantine: dict | None = None) -> dict:
    rid = manifest["release_id"]
    files = {k: v["rows"] for k, v in manifest["files"].items() if k.endswith(".csv")}
    return {
        "release_id": rid,
        "status": status,
        "period": f"{manifest['period']['start']} .. {manifest['period']['end']}",
        "epsilon": manifest["privacy"]["epsilon"],
        "delta": manifest["privacy"]["delta"],
        "unit_of_privacy": manifest["privacy"]["unit_of_privacy"],
        "rows": files,
        "thresholds": {k: v["threshold"] for k, v in manifest["privacy"]["marginals"].items()},
        "release_dir": str(home.releases / rid),
        "report": report or str(home.reports / rid / "report.html"),
        "mlflow_run_id": mlflow_run_id,
        "mlflow_ui": home.mlflow_ui_command(),
        "quarantine": quarantine,
    }
