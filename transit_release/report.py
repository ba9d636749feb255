"""The internal release report: ``release_reports/<release-id>/report.html``.

Internal: it shows true counts next to released ones, so it lives outside
``releases/`` and is never published.
"""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from transit_release.config import MARGINALS  # noqa: E402

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}img{max-width:100%}
.note{color:#555;font-size:.9em}"""


def _scatter(points: dict[str, tuple[np.ndarray, np.ndarray]], thresholds: dict[str, int], path: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(13, 8))
    for ax, m in zip(axes.ravel(), MARGINALS):
        true, rel = points.get(m.name, (np.zeros(0), np.zeros(0)))
        ax.scatter(true, rel, s=4, alpha=0.35)
        hi = max(float(true.max()) if true.size else 10.0, 10.0)
        ax.plot([1, hi], [1, hi], color="k", lw=0.8)
        if m.name in thresholds:
            ax.axhline(thresholds[m.name], color="r", lw=0.8, ls="--", label=f"threshold {thresholds[m.name]}")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"j={m.j} {m.name}", fontsize=10)
        ax.set_xlabel("true count")
        ax.set_ylabel("released count")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _bars(df: pd.DataFrame, title: str, ylabel: str, path: Path, stacked: bool = False) -> None:
    fig, ax = plt.subplots(figsize=(13, 4.5))
    df.plot.bar(ax=ax, stacked=stacked, width=0.85)
    ax.set_title(title, pad=28)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, ncol=6, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _quarantine_html(q: dict | None) -> str:
    if not q:
        return "<p>No screening summary.</p>"
    rows = "".join(f"<tr><td>{html.escape(r)}</td><td>{c:,}</td></tr>" for r, c in q["by_reason"].items())
    return (f"<p>{q['rows']:,} rows read; {q['quarantined']:,} quarantined ({100 * q['quarantined_share']:.3f}%). "
            "Quarantined rows are kept privately under <code>private/quarantine/</code>.</p>"
            + (f"<table><tr><th>reason</th><th>rows</th></tr>{rows}</table>" if rows else ""))


def write_report(out_dir: Path, manifest: dict, utility: pd.DataFrame,
                 points: dict[str, tuple[np.ndarray, np.ndarray]], links: dict[str, str] | None = None,
                 quarantine: dict | None = None) -> Path:
    """Render the report. ``utility`` has one row per (partition, marginal)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    thresholds = {k: v["threshold"] for k, v in manifest["privacy"]["marginals"].items()}
    _scatter(points, thresholds, out_dir / "released_vs_true.png")
    coverage = utility.pivot(index="partition", columns="marginal", values="trip_coverage")[[m.name for m in MARGINALS]]
    _bars(coverage, "Share of trips on released points, per partition", "trip coverage", out_dir / "coverage.png")
    budget = utility.pivot(index="partition", columns="marginal", values="epsilon")[[m.name for m in MARGINALS]]
    _bars(budget, "Privacy budget ε per partition (stacked over the six marginals)", "ε",
          out_dir / "budget.png", stacked=True)

    per_marginal = utility.groupby("marginal", sort=False).agg(
        points=("points", "sum"), released=("points_released", "sum"),
        kept_share=("kept_point_share", "mean"), trip_coverage=("trip_coverage", "mean"),
        mean_abs_error=("mean_abs_error", "mean"), max_abs_error=("max_abs_error", "max"),
        total_variation=("total_variation", "mean")).reset_index()
    p = manifest["privacy"]
    links_html = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>'
                         for text, href in (links or {}).items())
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Report {html.escape(manifest['release_id'])}</title>
<style>{_CSS}</style></head><body>
<h1>Release report: {html.escape(manifest['release_id'])}</h1>
<p class="note">Internal document: it compares released counts with the true ones. Do not publish.</p>
<h2>What was released</h2>
<p>Period {manifest['period']['start']} to {manifest['period']['end']}; modes {', '.join(manifest['modes'])};
{utility['partition'].nunique()} partitions (mode × day) from {int(utility.groupby('partition')['trips'].first().sum()):,} trips.
Files: {', '.join(f"<code>{html.escape(k)}</code> ({v['rows']:,} rows)" for k, v in manifest['files'].items() if k.endswith('.csv'))}.</p>
<p>Privacy: ({p['epsilon']:g}, {p['delta']:.3g})-DP per {html.escape(p['unit_of_privacy'])}
({html.escape(p['neighbouring_relation'])}); {html.escape(p['composition'])}.</p>
<ul>{links_html}</ul>
<h2>Input quality</h2>
{_quarantine_html(quarantine)}
<h2>Utility per marginal</h2>
<p class="note">kept share: share of present points released; trip coverage: share of trips on released points
(mean over partitions); errors: |released − true| on released points; total variation: between the true and
released distributions.</p>
{per_marginal.to_html(index=False, float_format=lambda x: f"{x:.4g}")}
<h2>Released versus true counts</h2><img src="released_vs_true.png" alt="released vs true counts">
<h2>Coverage per partition</h2><img src="coverage.png" alt="coverage per partition">
<h2>Budget per partition</h2><img src="budget.png" alt="budget per partition">
<h2>All partitions</h2>
{utility.to_html(index=False, float_format=lambda x: f"{x:.4g}")}
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(body, encoding="utf-8")
    return path


def write_audit_report(out_dir: Path, result: dict) -> Path:
    """``audit.html``: integrity findings, cumulative loss per unit, mode and partition, with plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = []
    for unit, loss in result["loss"].items():
        tl = pd.DataFrame(loss["timeline"])
        img_time = img_heat = ""
        if not tl.empty:
            tl["recorded_at"] = pd.to_datetime(tl["recorded_at"], format="ISO8601")
            fig, ax = plt.subplots(figsize=(11, 4))
            for mode, g in tl.groupby("mode"):
                g = g.sort_values("recorded_at")
                ax.step(g["recorded_at"], g["cumulative_epsilon"].cummax(), where="post", label=mode)
            ax.set_title(f"Cumulative ε per {unit} over time (largest partition of each mode)")
            ax.set_ylabel("ε (basic composition)")
            ax.legend()
            fig.autofmt_xdate()
            fig.tight_layout()
            fig.savefig(out_dir / f"cumulative_{unit}.png", dpi=80)
            plt.close(fig)
            img_time = f'<img src="cumulative_{unit}.png" alt="cumulative epsilon over time">'
            heat = pd.DataFrame(loss["per_partition_marginal"]).T.fillna(0.0).sort_index()
            known = [m.name for m in MARGINALS if m.name in heat.columns]
            heat = heat[known + sorted(set(heat.columns) - set(known))]
            fig, ax = plt.subplots(figsize=(9, max(3.0, 0.22 * len(heat) + 1.5)))
            im = ax.imshow(heat.to_numpy(), aspect="auto", cmap="viridis")
            ax.set_xticks(range(heat.shape[1]), heat.columns, rotation=30, ha="right", fontsize=8)
            ax.set_yticks(range(heat.shape[0]), heat.index, fontsize=7)
            fig.colorbar(im, ax=ax, label="ε spent")
            ax.set_title(f"ε per partition × marginal ({unit})")
            fig.tight_layout()
            fig.savefig(out_dir / f"heatmap_{unit}.png", dpi=80)
            plt.close(fig)
            img_heat = f'<img src="heatmap_{unit}.png" alt="partition by marginal heatmap">'
        per_mode = pd.DataFrame(loss["per_mode"]).T
        per_part = pd.DataFrame(loss["per_partition"]).T
        sections.append(f"""<h2>Unit of privacy: {html.escape(unit)} ({html.escape(loss['neighbouring'])})</h2>
<p>Basic composition: <b>ε = {loss['basic']['epsilon']:g}, δ = {loss['basic']['delta']:.3g}</b> for one {html.escape(unit)}
(the largest over partitions). Advanced composition: ε = {loss['advanced']['epsilon']:.4g},
δ = {loss['advanced']['delta']:.3g} ({html.escape(loss['advanced']['theorem'])}, δ' = {loss['advanced']['delta_prime']:g}).</p>
{img_time}
<h3>Per mode</h3>{per_mode.to_html(float_format=lambda x: f"{x:.4g}")}
{img_heat}
<h3>Per partition</h3>{per_part.to_html(float_format=lambda x: f"{x:.4g}")}""")
    disc = "".join(f"<li>{html.escape(d)}</li>" for d in result["discrepancies"])
    charged = "".join(f"<li>{html.escape(r)}: {n} spend(s)</li>" for r, n in result["charged_not_published"].items())
    status = "PASSED" if result["ok"] else "FAILED"
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Privacy audit {status}</title>
<style>{_CSS}</style></head><body>
<h1>Privacy audit: {status}</h1>
<p>{result['entries']} ledger entries; {len(result['releases_published'])} published release(s).</p>
<h2>Discrepancies</h2>{f"<ul>{disc}</ul>" if disc else "<p>None: the ledger's hash chain is intact, every published file matches its manifest, and MLflow mirrors every spend.</p>"}
<h2>Charged, not published</h2>{f"<ul>{charged}</ul>" if charged else "<p>None.</p>"}
<p class="note">These spends count: noise may have been drawn before the run stopped.</p>
{''.join(sections)}
</body></html>"""
    path = out_dir / "audit.html"
    path.write_text(body, encoding="utf-8")
    return path
