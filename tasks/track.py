"""MLflow: one parent run per release, one nested run per partition.

The run mirrors the ledger (every spend's parameters and ledger sequence number)
and carries the internal utility metrics, the manifest and the report. MLflow
is for review; the ledger stays the source of truth.
"""

from __future__ import annotations

import fcntl
import json
import math
from contextlib import contextmanager
import tempfile
import time
from pathlib import Path

import pandas as pd

from tasks import data_task
from transit_release.config import MARGINALS
from transit_release.home import Home

EXPERIMENT = "transit-release"
AUDIT_EXPERIMENT = "transit-release-audit"
METRICS = ("kept_point_share", "trip_coverage", "mean_abs_error", "max_abs_error", "total_variation",
           "top_rank_correlation", "points", "points_released")


@contextmanager
def _store_lock(home: Home):
    """Serialise the creation of the MLflow store and experiments across processes: MLflow's
    SQLite migrations and ``create_experiment`` race when several releases start at once."""
    home.root.mkdir(parents=True, exist_ok=True)
    with open(home.root / ".mlflow.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def mlflow_client(home: Home):
    from mlflow.tracking import MlflowClient

    with _store_lock(home):
        client = MlflowClient(tracking_uri=home.mlflow_uri)
        client.search_experiments(max_results=1)  # creates and migrates the store under the lock
    return client


def _experiment(client, home: Home, name: str, artifacts: Path) -> str:
    with _store_lock(home):
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        return client.create_experiment(name, artifact_location=artifacts.as_uri())


def experiment_id(client, home: Home) -> str:
    return _experiment(client, home, EXPERIMENT, home.mlflow_artifacts)


def log_to_run(client, run_id: str, params: dict, metrics: dict, tags: dict | None = None) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    p = [Param(k, str(v)) for k, v in params.items()]
    m = [Metric(k, float(v), now, 0) for k, v in metrics.items() if v is not None and not math.isnan(float(v))]
    t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    for i in range(0, max(len(p), len(m), len(t)), 100):
        client.log_batch(run_id, metrics=m[i:i + 100], params=p[i:i + 100], tags=t[i:i + 100])


def _marginal_params(privacy: dict) -> dict:
    out = {}
    for name, mp in privacy["marginals"].items():
        out[f"{name}.epsilon"] = mp["epsilon"]
        out[f"{name}.delta"] = mp["delta"]
        out[f"{name}.threshold"] = mp["threshold"]
        out[f"{name}.noise_scale"] = mp["noise_scale"]
    return out


@data_task(name="track-in-mlflow")
def track_release(home: Home, manifest: dict, utility: pd.DataFrame, charged: list, report_path: str,
                  quarantine: dict, validations: dict, sanitizers: dict) -> str:
    """Log the release; returns the parent run id."""
    client = mlflow_client(home)
    exp = experiment_id(client, home)
    privacy = manifest["privacy"]
    rid = manifest["release_id"]
    tags = {"release_id": rid, "kind": "opal", "mechanism": "stability_histogram",
            "unit_of_privacy": privacy["unit_of_privacy"], "neighbouring": "replace-one",
            "period_start": manifest["period"]["start"], "period_end": manifest["period"]["end"],
            "modes": ",".join(manifest["modes"]), "mode_set": "+".join(sorted(manifest["modes"])),
            "period": f"{manifest['period']['start']}..{manifest['period']['end']}",
            "noise_source": manifest["noise_source"],
            "code_version": manifest["code_version"], "published": "false",
            "sanitize.runner": sanitizers["runner"]}
    parent = client.create_run(exp, run_name=rid, tags=tags).info.run_id
    seqs = [e.seq for e in charged]
    params = {"mechanism": "stability_histogram", "bin_minutes": manifest["parameters"]["bin_minutes"],
              "epsilon": privacy["epsilon"], "delta": privacy["delta"], "partitions": utility["partition"].nunique(),
              "ledger.first_seq": min(seqs), "ledger.last_seq": max(seqs), "ledger.spends": len(seqs),
              "sanitize.processes": sanitizers["processes"], **_marginal_params(privacy)}
    metrics = {"privacy.epsilon": privacy["epsilon"], "privacy.delta": privacy["delta"],
               "privacy.spends": len(seqs), "partitions": utility["partition"].nunique()}
    for f, meta in manifest["files"].items():
        if "rows" in meta and f.endswith(".csv"):
            metrics[f"rows.{f[:-4]}"] = meta["rows"]
    agg = utility.groupby("marginal")[list(METRICS)].mean(numeric_only=True)
    for name in agg.index:
        for k in METRICS:
            metrics[f"{name}.{k}"] = agg.loc[name, k]
    metrics["trip_coverage"] = utility["trip_coverage"].mean()
    metrics["rows.released"] = sum(meta["rows"] for f, meta in manifest["files"].items()
                                   if "rows" in meta and f.endswith(".csv"))
    metrics["input.rows"] = quarantine["rows"]
    metrics["input.quarantined"] = quarantine["quarantined"]
    metrics["input.quarantined_share"] = quarantine["quarantined_share"]
    for reason, count in quarantine["by_reason"].items():
        metrics[f"input.quarantined.{reason}"] = count
    for name, result in validations.items():
        metrics[f"validation.{name}.success"] = float(result["success"])
    log_to_run(client, parent, params, metrics)

    by_part = {}
    for e in charged:
        ev = e.event()
        by_part.setdefault(ev.partition, []).append((e, ev))
    for part, rows in utility.groupby("partition", sort=True):
        mode, date = part.split("/")
        child = client.create_run(exp, run_name=f"{rid}/{part}",
                                  tags={**tags, "mlflow.parentRunId": parent, "partition": part,
                                        "mode": mode, "date": date}).info.run_id
        p, m = {"mechanism": "stability_histogram"}, {}
        for entry, ev in by_part.get(part, []):
            p[f"{ev.marginal}.epsilon"] = ev.epsilon
            p[f"{ev.marginal}.delta"] = ev.delta
            p[f"{ev.marginal}.threshold"] = ev.threshold
            p[f"{ev.marginal}.ledger_seq"] = entry.seq
        for _, r in rows.iterrows():
            for k in METRICS:
                m[f"{r['marginal']}.{k}"] = r[k]
        m["privacy.epsilon"] = sum(ev.epsilon for _, ev in by_part.get(part, []))
        m["privacy.delta"] = sum(ev.delta for _, ev in by_part.get(part, []))
        log_to_run(client, child, p, m)
        client.set_terminated(child, "FINISHED")

    with tempfile.TemporaryDirectory() as tmp:
        ledger_json = Path(tmp) / "ledger_spends.json"
        ledger_json.write_text(json.dumps([{"seq": e.seq, "hash": e.hash, "event": e.data()} for e in charged],
                                          indent=1), encoding="utf-8")
        manifest_json = Path(tmp) / "manifest.json"
        manifest_json.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        client.log_artifact(parent, str(ledger_json))
        client.log_artifact(parent, str(manifest_json))
        quality_json = Path(tmp) / "input_quality.json"
        quality_json.write_text(json.dumps({"screen": quarantine, "validations": validations}, indent=2),
                                encoding="utf-8")
        client.log_artifact(parent, str(quality_json))
    client.log_artifacts(parent, str(Path(report_path).parent), artifact_path="report")
    client.set_terminated(parent, "FINISHED")
    return parent


@data_task(name="mark-published")
def mark_published(home: Home, run_id: str) -> None:
    """Tag the run once the release is visible (runs of failed publications stay ``false``)."""
    mlflow_client(home).set_tag(run_id, "published", "true")


__all__ = ["track_release", "experiment_id", "EXPERIMENT", "MARGINALS"]


@data_task(name="read-mlflow-mirror")
def read_mirror(home: Home) -> list:
    """Every run of the release experiment, deleted ones included, as the audit needs them."""
    from mlflow.entities import ViewType

    from transit_release.audit import MirrorRun

    if not home.mlflow_db.exists():
        return []
    client = mlflow_client(home)
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return []
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=1000,
                                  page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    out = []
    for r in runs:
        tags, params = r.data.tags, r.data.params
        if "release_id" not in tags:
            continue
        seqs = {}
        for k, v in params.items():
            if k.endswith(".ledger_seq"):
                marginal = k[: -len(".ledger_seq")]
                seqs[int(v)] = (marginal, float(params[f"{marginal}.epsilon"]), float(params[f"{marginal}.delta"]))
        out.append(MirrorRun(run_id=r.info.run_id, release_id=tags["release_id"],
                             parent="mlflow.parentRunId" not in tags,
                             deleted=r.info.lifecycle_stage == "deleted",
                             published_tag=tags.get("published"), ledger_seqs=seqs,
                             partition=tags.get("partition")))
    return out


@data_task(name="track-audit-in-mlflow")
def track_audit(home: Home, result: dict, report_path: str) -> str:
    """One run per audit in the ``transit-release-audit`` experiment."""
    client = mlflow_client(home)
    exp_id = _experiment(client, home, AUDIT_EXPERIMENT, home.mlflow_artifacts / "audit")
    tags = {"kind": "audit", "status": "passed" if result["ok"] else "failed"}
    run = client.create_run(exp_id, run_name=Path(report_path).parent.name, tags=tags).info.run_id
    metrics = {"entries": result["entries"], "releases_published": len(result["releases_published"]),
               "releases_charged_not_published": len(result["charged_not_published"]),
               "discrepancies": len(result["discrepancies"])}
    params = {}
    for unit, loss in result["loss"].items():
        metrics[f"{unit}.epsilon"] = loss["basic"]["epsilon"]
        metrics[f"{unit}.delta"] = loss["basic"]["delta"]
        metrics[f"{unit}.advanced_epsilon"] = loss["advanced"]["epsilon"]
        params[f"{unit}.advanced_delta_prime"] = loss["advanced"]["delta_prime"]
        for mode, x in loss["per_mode"].items():
            metrics[f"{unit}.{mode}.epsilon"] = x["epsilon"]
    log_to_run(client, run, params, metrics)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "audit.json"
        p.write_text(json.dumps(result, indent=2), encoding="utf-8")
        client.log_artifact(run, str(p))
    client.log_artifacts(run, str(Path(report_path).parent), artifact_path="report")
    client.set_terminated(run, "FINISHED")
    return run
