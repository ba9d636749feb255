"""MLflow: one parent run per release, one nested run per partition.

The run mirrors the ledger (every spend's parameters and ledger sequence number)
and carries the internal utility metrics, the manifest and the report. MLflow
is for review; the ledger stays the source of truth.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

import pandas as pd

from tasks import data_task
from transit_release.config import MARGINALS
from transit_release.home import Home

EXPERIMENT = "transit-release"
METRICS = ("kept_point_share", "trip_coverage", "mean_abs_error", "max_abs_error", "total_variation",
           "top_rank_correlation", "points", "points_released")


def _client(home: Home):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=home.mlflow_uri)


def experiment_id(client, home: Home) -> str:
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    return client.create_experiment(EXPERIMENT, artifact_location=home.mlflow_artifacts.as_uri())


def _log(client, run_id: str, params: dict, metrics: dict, tags: dict | None = None) -> None:
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
def track_release(home: Home, manifest: dict, utility: pd.DataFrame, charged: list, report_path: str) -> str:
    """Log the release; returns the parent run id."""
    client = _client(home)
    exp = experiment_id(client, home)
    privacy = manifest["privacy"]
    rid = manifest["release_id"]
    tags = {"release_id": rid, "kind": "opal", "mechanism": "stability_histogram",
            "unit_of_privacy": privacy["unit_of_privacy"], "neighbouring": "replace-one",
            "period_start": manifest["period"]["start"], "period_end": manifest["period"]["end"],
            "modes": ",".join(manifest["modes"]), "noise_source": manifest["noise_source"],
            "code_version": manifest["code_version"], "published": "false"}
    parent = client.create_run(exp, run_name=rid, tags=tags).info.run_id
    seqs = [e.seq for e in charged]
    params = {"mechanism": "stability_histogram", "bin_minutes": manifest["parameters"]["bin_minutes"],
              "epsilon": privacy["epsilon"], "delta": privacy["delta"], "partitions": utility["partition"].nunique(),
              "ledger.first_seq": min(seqs), "ledger.last_seq": max(seqs), "ledger.spends": len(seqs),
              **_marginal_params(privacy)}
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
    _log(client, parent, params, metrics)

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
        _log(client, child, p, m)
        client.set_terminated(child, "FINISHED")

    with tempfile.TemporaryDirectory() as tmp:
        ledger_json = Path(tmp) / "ledger_spends.json"
        ledger_json.write_text(json.dumps([{"seq": e.seq, "hash": e.hash, "event": e.data()} for e in charged],
                                          indent=1), encoding="utf-8")
        manifest_json = Path(tmp) / "manifest.json"
        manifest_json.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        client.log_artifact(parent, str(ledger_json))
        client.log_artifact(parent, str(manifest_json))
    client.log_artifacts(parent, str(Path(report_path).parent), artifact_path="report")
    client.set_terminated(parent, "FINISHED")
    return parent


@data_task(name="mark-published")
def mark_published(home: Home, run_id: str) -> None:
    """Tag the run once the release is visible (runs of failed publications stay ``false``)."""
    _client(home).set_tag(run_id, "published", "true")


__all__ = ["track_release", "experiment_id", "EXPERIMENT", "MARGINALS"]
