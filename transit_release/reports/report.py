"""The internal release report: ``release_reports/<release-id>/report.html``.

Internal: it shows true counts next to released ones, so it lives outside
``releases/`` and is never published.

The Opal release draws its figures (:func:`draw_figures`) in a process of its own while the flow checks and
stages the release (:mod:`transit_release.reports.report_process`), then writes the page (:func:`write_report` with
``figures_drawn``); matplotlib is imported only by what draws.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.config import MARGINALS

#: The Opal report's figures (and, at the card level, ``card_level_curve.png``).
FIGURES = ("released_vs_true.png", "coverage.png", "budget.png")


def _pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (half a second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td{white-space:nowrap}th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}img{max-width:100%}
.scroll{max-width:100%;overflow-x:auto}.scroll.tall{max-height:75vh;overflow-y:auto}figure{margin:1em 0}figcaption{color:#555;font-size:.9em;margin:.3em 0 1em}
.note{color:#555;font-size:.9em}"""


def _number(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:.4g}"


#: Column headers in words (the utility table's keys are MLflow's metric names).
HEADERS = {"epsilon": "ε", "delta": "δ", "points": "cells present", "released": "cells released",
           "points_released": "cells released", "kept_share": "share of cells released",
           "kept_point_share": "share of cells released", "trip_coverage": "trips covered",
           "mean_abs_error": "mean abs. error", "max_abs_error": "max abs. error", "mean_rel_error": "mean rel. error",
           "total_variation": "total variation", "top_rank_correlation": "rank correlation (top)"}


def _cell(x) -> str:
    """A number of a table: whole numbers with thousands separators, others to 4 significant digits, "—" for a
    figure that cannot be measured."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return _number(float(x))


def _table(df: pd.DataFrame, tall: str = "", **kwargs) -> str:
    """A data frame as an HTML table in a box of its own that scrolls sideways when the table is wider than the
    page (numbers never wrap inside a cell); ``tall=" tall"`` also bounds its height (a long table scrolls in a
    box that fits the window). Headers in words; every number as :func:`_cell` writes it (a figure that cannot be
    measured, no released cell, reads "—")."""
    df = df.rename(columns=lambda c: HEADERS.get(c, str(c).replace("_", " ")))
    numeric = {c: _cell for c in df.columns
               if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])}
    return f'<div class="scroll{tall}">{df.to_html(formatters=numeric, na_rep="—", **kwargs)}</div>'


def _figure(src: str, alt: str, caption: str) -> str:
    return (f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}"><figcaption>{caption}</figcaption>'
            "</figure>")


def _scatter(points: dict[str, tuple[np.ndarray, np.ndarray]], thresholds: dict[str, int], path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(13, 8))
    for ax, m in zip(axes.ravel(), MARGINALS):
        true, rel = points.get(m.name, (np.zeros(0), np.zeros(0)))
        few = true.size <= 2000  # a few points: large enough to see
        ax.plot(true, rel, "o", ms=4 if few else 2, mew=0, alpha=0.7 if few else 0.35)  # one line: faster than scatter
        if true.size:
            hi = max(float(true.max()), 10.0)
            ax.plot([1, hi], [1, hi], color="k", lw=0.8)
        else:  # say why the panel is empty, on axes that reach past the threshold
            ax.text(0.5, 0.5, "no cell of this marginal reached\nits threshold: nothing released", ha="center",
                    va="center", transform=ax.transAxes, color="tab:red", fontsize=9)
            top = 2.0 * thresholds.get(m.name, 10)
            ax.set_xlim(1, top)
            ax.set_ylim(1, top)
        if m.name in thresholds:
            ax.axhline(thresholds[m.name], color="r", lw=0.8, ls="--", label=f"threshold {thresholds[m.name]}")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.minorticks_off()  # a log axis's minor ticks are most of the figure's drawing time (about 2 s of 3)
        ax.set_title(f"j={m.j} {m.name}", fontsize=10)
        ax.set_xlabel("true count")
        ax.set_ylabel("released count")
    # fixed margins for this fixed grid and fixed labels (tight_layout draws the whole figure once more: 0.35 s)
    fig.subplots_adjust(left=0.06, right=0.985, bottom=0.07, top=0.96, wspace=0.22, hspace=0.3)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _bars(df: pd.DataFrame, title: str, ylabel: str, path: Path, stacked: bool = False) -> None:
    """One bar per (row, column) of ``df``, grouped by row (or stacked), one colour per column.

    Each column's bars are one collection and the margins are computed, not laid out: pandas' bar plot adds
    each bar as an artist of its own (its data limits updated bar by bar) and ``tight_layout`` draws the figure
    once more; with the week's 28 partitions × 6 marginals that was 0.48 s per figure, this is 0.22 s."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    plt = _pyplot()
    n, k = df.shape
    fig, ax = plt.subplots(figsize=(13, 4.5))
    x = np.arange(n, dtype=float)
    width = 0.85
    base = np.zeros(n)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles = []
    for i, name in enumerate(df.columns):
        v = np.nan_to_num(df[name].to_numpy(dtype=float))
        if stacked:
            left, w, lo = x - width / 2, width, base
            base = base + v
        else:
            left, w, lo = x - width / 2 + i * width / k, width / k, np.zeros(n)
        hi = lo + v
        corners = [(left, lo), (left + w, lo), (left + w, hi), (left, hi)]
        colour = colours[i % len(colours)]
        ax.add_collection(PolyCollection(np.stack([np.stack(c, axis=1) for c in corners], axis=1),
                                         facecolors=colour, edgecolors="none"))
        handles.append(Patch(facecolor=colour, label=str(name)))
    top = float(base.max(initial=0.0)) if stacked else float(np.nan_to_num(df.to_numpy(dtype=float)).max(initial=0.0))
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(0, (top or 1.0) * 1.05)
    labels = [str(i) for i in df.index]
    ax.set_xticks(x, labels, rotation=90)
    ax.set_xlabel(df.index.name or "")
    ax.set_title(title, pad=28)
    ax.set_ylabel(ylabel)
    ax.legend(handles=handles, fontsize=8, ncol=6, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    # room below for the rotated labels (about 0.075 in per character at the default size) and the axis name
    longest = max((len(t) for t in labels), default=0)
    fig.subplots_adjust(left=0.06, right=0.99, top=0.86, bottom=min(0.6, (0.5 + 0.075 * longest) / 4.5))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _bounding_html(q: dict | None) -> str:
    b = (q or {}).get("bounding")
    if not b:
        return ""
    share = b["rows_dropped"] / b["rows_in"] if b["rows_in"] else 0.0
    return (f"<p>Contribution bounding (card level): {b['rows_kept']:,} of {b['rows_in']:,} trips kept "
            f"({100 * (1 - share):.2f}%); {b['cards_truncated']:,} of {b['cards']:,} cards lost at least one trip "
            f"({b['rows_dropped_per_partition_cap']:,} trips beyond the per-partition cap, "
            f"{b['rows_dropped_partitions_cap']:,} in partitions beyond the partition cap). Internal figures: the "
            "public files do not state them.</p>")


def card_level_curve() -> pd.DataFrame:
    """The experiment's utility-against-privacy curve of card-level releases (package data)."""
    from importlib import resources

    with resources.files("transit_release").joinpath("defaults", "card_level_curve.csv").open("r") as fh:
        return pd.read_csv(fh, comment="#")


def _curve_plot(manifest: dict, utility: pd.DataFrame, path: Path) -> bool:
    """A card-level release's own point (card-week ε, trips covered, mean relative error) on the experiment's
    curves for its bounds; False when the release is not card-level."""
    p = manifest["privacy"]
    if p.get("unit_of_privacy") != "card":
        return False
    curve = card_level_curve()
    k, P = p["bounds"]["max_trips_per_partition"], p["bounds"]["max_partitions"]
    mine = curve[(curve["k"] == k) & (curve["P"] == P)].sort_values("card_week_eps_basic")
    released = utility["points_released"].sum()
    mre = float((utility["mean_rel_error"].fillna(0) * utility["points_released"]).sum() / released) if released else 0
    coverage = float(utility["trip_coverage"].mean())
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ticks = sorted({float(e) for e in mine["card_week_eps_basic"]} | {float(p["epsilon"])})
    if len(ticks) > 8:  # at most eight labels on the axis
        ticks = ticks[:: -(-len(ticks) // 8)]
    for ax, col, value, label in ((axes[0], "trip_coverage", coverage, "trips covered"),
                                  (axes[1], "mre", mre, "mean relative error of released cells")):
        ax.plot(mine["card_week_eps_basic"], mine[col], "o-", color="tab:blue",
                label=f"full-size synthetic week (13.5 M trips), k={k}, P={P}")
        if col == "mre" and not released:  # no released cell: the error is undefined, not 0
            ax.text(0.5, 0.5, "this release released no cell:\nno error to compare", transform=ax.transAxes,
                    ha="center", va="center", color="tab:red")
        else:
            ax.plot([p["epsilon"]], [value], "*", ms=14, color="tab:red", label="this release")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel("card-week ε (basic composition)")
        ax.set_ylabel(label)
        top = max([float(mine[col].max()) if len(mine) else 0.0] + ([value] if col != "mre" or released else []))
        ax.set_ylim(0, (1.0 if col == "trip_coverage" else top * 1.25) or 1.0)  # from 0: a 0.024–0.028 axis misleads
        ax.set_title(f"{label}: this release against the full-size week", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _quarantine_html(q: dict | None) -> str:
    if not q:
        return "<p>No screening summary.</p>"
    rows = "".join(f"<tr><td>{html.escape(r)}</td><td>{c:,}</td></tr>" for r, c in q["by_reason"].items())
    return (f"<p>{q['rows']:,} rows read; {q['quarantined']:,} quarantined ({100 * q['quarantined_share']:.3f}%). "
            "Quarantined rows are kept privately under <code>private/quarantine/</code>.</p>"
            + (f"<table><tr><th>reason</th><th>rows</th></tr>{rows}</table>" if rows else ""))


def draw_figures(out_dir: Path, privacy: dict, utility: pd.DataFrame,
                 points: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """The Opal report's figures (:data:`FIGURES`, and the card-level curve) in ``out_dir``, which exists.
    ``privacy`` is the manifest's section of that name."""
    thresholds = {k: v["threshold"] for k, v in privacy["marginals"].items()}
    _scatter(points, thresholds, out_dir / "released_vs_true.png")
    coverage = utility.pivot(index="partition", columns="marginal", values="trip_coverage")[[m.name for m in MARGINALS]]
    _bars(coverage, "Share of trips on released points, per partition", "trip coverage", out_dir / "coverage.png")
    budget = utility.pivot(index="partition", columns="marginal", values="epsilon")[[m.name for m in MARGINALS]]
    _bars(budget, "Privacy budget ε per partition (stacked over the six marginals)", "ε",
          out_dir / "budget.png", stacked=True)
    _curve_plot({"privacy": privacy}, utility, out_dir / "card_level_curve.png")


def write_report(out_dir: Path, manifest: dict, utility: pd.DataFrame,
                 points: dict[str, tuple[np.ndarray, np.ndarray]] | None = None, links: dict[str, str] | None = None,
                 quarantine: dict | None = None, figures_drawn: bool = False) -> Path:
    """Render the report. ``utility`` has one row per (partition, marginal). The figures are drawn from
    ``points`` here unless ``figures_drawn`` (by :func:`draw_figures`, in ``out_dir``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not figures_drawn:
        draw_figures(out_dir, manifest["privacy"], utility, points)
    curve_html = ""
    if manifest["privacy"].get("unit_of_privacy") == "card":
        curve_html = "<h2>Utility against privacy</h2>" + _figure(
            "card_level_curve.png", "utility against privacy",
            "What it compares: this release (red star: its card-week ε, the mean share of trips on released cells "
            "and the mean relative error of released cells) with the same figures measured on the "
            "<b>full-size synthetic week</b> (13.5 M trips) at this release's bounds k and P, by "
            "<code>benchmarks/experiment_card_level.py</code> (<code>transit_release/defaults/card_level_curve.csv"
            "</code>). The curve is not drawn from this release's data: a week with fewer trips per cell (a smaller "
            "network, or the demo's scale 0.1) covers fewer trips and has larger relative errors at the same ε, so "
            "its star lies below and above the curves. Trips covered are counted against all trips before bounding.")
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
Files: {', '.join(f"<code>{html.escape(k)}</code> ({v['rows']:,} rows)" for k, v in manifest['files'].items() if k.endswith('.csv') and 'rows' in v)}.</p>
<p>Privacy: ({p['epsilon']:g}, {p['delta']:.3g})-DP per {html.escape(p['unit_of_privacy'])}
({html.escape(p['neighbouring_relation'])}); {html.escape(p['composition'])}.</p>
<ul>{links_html}</ul>
<h2>Input quality</h2>
{_quarantine_html(quarantine)}
{_bounding_html(quarantine)}
{curve_html}
<h2>Utility per marginal</h2>
<p class="note">kept share: share of present points released; trip coverage: share of trips on released points
(mean over partitions); errors: |released − true| on released points; total variation: between the true and
released distributions.</p>
{_table(per_marginal, index=False)}
<h2>Released versus true counts</h2>
{_figure("released_vs_true.png", "released vs true counts", "What it compares: for each of the six marginals, the "
         "released count of every released point against its true count (log scales; the black diagonal is released "
         "= true; the dashed red line is the marginal's threshold, below which nothing is published).")}
<h2>Coverage per partition</h2>
{_figure("coverage.png", "coverage per partition", "What it compares: for each (mode, day) partition, the share of "
         "its trips that lie on released points, one bar per marginal. A low bar means many of the partition's trips "
         "were in cells too small to clear the threshold.")}
<h2>Budget per partition</h2>
{_figure("budget.png", "budget per partition", "What it compares: the ε charged to each (mode, day) partition, "
         "stacked over the six marginals. Every partition of the declared period is charged, whether or not the "
         "data hold trips for it.")}
<h2>All partitions</h2>
<p class="note">One row per (mode, date) partition and marginal; the table scrolls inside its box. ε and δ of each marginal are
in the privacy line above; "—": no cell released, nothing to measure.</p>
{_table(utility.drop(columns=[c for c in ("partition", "epsilon", "delta", "j") if c in utility.columns]), " tall",
        index=False)}
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(body, encoding="utf-8")
    return path


def _cap_of(cap) -> dict | None:
    """A cap as the audit's charts draw it: ``{"epsilon", "delta", "measure", "name"}`` (a bare number: a cap by basic
    composition)."""
    if cap is None:
        return None
    if isinstance(cap, (int, float)):
        return {"epsilon": float(cap), "delta": None, "measure": "basic", "name": ""}
    return {"measure": "basic", "name": "", "delta": None, **cap}


def _cap_label(cap: dict) -> str:
    name = f"cap '{cap['name']}': " if cap.get("name") else "cap "
    if cap["measure"] == "pld":
        return f"{name}ε ≤ {cap['epsilon']:g} by privacy-loss distributions (δ = {cap['delta']:g})"
    return f"{name}ε ≤ {cap['epsilon']:g} by basic composition"


def _cumulative_chart(tl: pd.DataFrame, unit: str, cap, path: Path, pld: float | None = None) -> None:
    """One panel per mode (lines of equal height would hide one another), each with the cap. The time axis spans
    the recorded spends (a few days around a single one), with dates labelled concisely.

    The line is the audit's own figures (:func:`transit_release.integrity.audit.cumulative_loss`'s timeline): the loss by
    basic composition, whose last point is the total the page states; ``pld``, the unit's stated figure by
    privacy-loss distributions, is marked at the last release. The cap is drawn in its own measure's words."""
    import matplotlib.dates as mdates

    plt = _pyplot()
    cap = _cap_of(cap)
    modes = sorted(tl["mode"].unique())
    fig, axes = plt.subplots(1, len(modes), figsize=(min(max(4 * len(modes), 7), 16), 3.6), sharey=True,
                             squeeze=False)
    # room above the data and the cap for the legend (a legend over the points hid a single release's point)
    top = max(float(tl["cumulative_epsilon"].max()), cap["epsilon"] if cap else 0.0) * 1.45 or 1.0
    first, last = tl["recorded_at"].min(), tl["recorded_at"].max()
    pad = max((last - first) * 0.05, pd.Timedelta(days=3))
    for ax, mode in zip(axes[0], modes):
        g = tl[tl["mode"] == mode].sort_values("recorded_at", kind="stable")
        basic = g["cumulative_epsilon"].cummax()
        ax.step(g["recorded_at"], basic, where="post", color="tab:blue")
        ax.plot(g["recorded_at"], basic, "o", ms=5, color="tab:blue",
                label=f"basic composition: ε = {float(basic.iloc[-1]):.4g}")
        if pld is not None:  # hollow: a basic point at the same height shows through
            ax.plot([g["recorded_at"].iloc[-1]], [pld], "D", ms=8, mfc="none", mew=1.5, color="tab:green",
                    label=f"privacy-loss distributions: ε = {pld:.4g}")
        if cap is not None:
            ax.axhline(cap["epsilon"], color="tab:red", ls="--", lw=1, label=_cap_label(cap))
        ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
        ax.set_ylim(0, top)
        ax.set_xlim(first - pad, last + pad)
        locator = mdates.AutoDateLocator(minticks=2, maxticks=5)
        ax.xaxis.set_major_locator(locator)
        # the offset names the year only ("2026", not the last tick's month, "2026-Dec", beside "27, 29, Dec")
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(
            locator, offset_formats=["", "%Y", "%Y", "%Y", "%Y-%b-%d", "%Y-%b-%d %H:%M"]))
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(mode, fontsize=10)
        ax.set_xlabel("recorded at (UTC)")
    axes[0][0].set_ylabel(f"cumulative ε per {unit}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


#: Why a unit's loss has no per-mode figures (its scopes span every mode).
_NO_PER_MODE = {
    "card": "No per-mode figures: one card-level release covers every mode, and a card may ride several, so a "
            "card's loss is stated for all modes together, per release period (below).",
}
_NO_PER_MODE_OTHER = ("No per-mode figures: a {unit} record spans every station of the release's "
                      "universe, so its loss is stated per period (below), not per mode.")


def write_audit_report(out_dir: Path, result: dict, caps: dict[str, dict | float] | None = None) -> Path:
    """``audit.html``: integrity findings, threat model, cumulative loss per unit, mode and scope, with plots; ``caps``:
    the budget policy's cap of each unit (``{"name", "epsilon", "delta", "measure"}``, or ε alone: basic)."""
    from transit_release.integrity.audit import PERSON, unit_losses

    out_dir.mkdir(parents=True, exist_ok=True)
    sections = [_person_section(p, x) for p, x in result["loss"].get(PERSON, {}).items()]
    for unit, loss in unit_losses(result["loss"]).items():
        tl = pd.DataFrame(loss["timeline"])
        img_time = img_heat = ""
        if not tl.empty:
            tl["recorded_at"] = pd.to_datetime(tl["recorded_at"], format="ISO8601")
            _cumulative_chart(tl, unit, (caps or {}).get(unit), out_dir / f"cumulative_{unit}.png",
                              (loss.get("pld") or {}).get("epsilon") if unit == "card" else None)
            cap = _cap_of((caps or {}).get(unit))
            if unit == "card":
                what = ("the cumulative ε of one card after each card-level release (a card is in every release), "
                        "by basic composition (blue line, ending at the figure stated above), and the stated figure "
                        "by privacy-loss distributions for all of them (green diamond)")
            else:
                what = (f"the cumulative ε of one {html.escape(unit)} over the time the spends were recorded, for "
                        "the worst partition or period of each mode (one panel per mode), by basic composition; the "
                        "highest last point is the figure stated above")
            measured = ("" if cap is None else
                        " The budget policy's cap (dashed red line) is measured by privacy-loss distributions at "
                        f"δ = {cap['delta']:g}: compare it with the green diamond (stated at the audit's δ; "
                        "<code>transit-release budget</code> states the loss at the cap's δ)." if cap["measure"] == "pld" else
                        " The budget policy's cap (dashed red line) is measured by basic composition.")
            img_time = _figure(f"cumulative_{unit}.png", "cumulative epsilon over time per mode",
                               f"What it compares: {what}.{measured}")
            heat = pd.DataFrame(loss["per_partition_marginal"]).T.fillna(0.0).sort_index()
            known = [m.name for m in MARGINALS if m.name in heat.columns]
            heat = heat[known + sorted(set(heat.columns) - set(known))]
            plt = _pyplot()
            fig, ax = plt.subplots(figsize=(9, max(3.0, 0.22 * len(heat) + 1.5)))
            im = ax.imshow(heat.to_numpy(), aspect="auto", cmap="viridis")
            ax.set_xticks(range(heat.shape[1]), heat.columns, rotation=30, ha="right", fontsize=8)
            ax.set_yticks(range(heat.shape[0]), heat.index, fontsize=7)
            fig.colorbar(im, ax=ax, label="ε spent")
            ax.set_title(f"ε per partition × component ({unit})")
            fig.tight_layout()
            fig.savefig(out_dir / f"heatmap_{unit}.png", dpi=80)
            plt.close(fig)
            img_heat = _figure(f"heatmap_{unit}.png", "partition by component heatmap",
                               f"What it compares: the ε spent on each partition or period (rows) by each component "
                               f"of its releases (columns), for one {html.escape(unit)}.")
        per_mode = pd.DataFrame(loss["per_mode"]).T
        per_part = pd.DataFrame(loss["per_partition"]).T
        adv = loss.get("advanced")
        adv_text = (f" Advanced composition: ε = {adv['epsilon']:.4g}, δ = {adv['delta']:.3g} "
                    f"({html.escape(adv['theorem'])}, δ' = {adv['delta_prime']:g})." if adv else "")
        pld = loss.get("pld")
        pld_text = (f" Privacy-loss-distribution accounting: <b>ε = {pld['epsilon']:.4g} at δ = {pld['delta']:.3g}</b> "
                    f"({html.escape(pld.get('method', ''))})." if pld else "")
        year = loss.get("year_projection")
        year_text = (f"<p>A year of {year['releases']} weekly releases like <code>{html.escape(year['like_release'])}"
                     f"</code> would cost a card ε = {year['basic']['epsilon']:g} (δ = {year['basic']['delta']:.3g}) "
                     f"by basic composition and <b>ε = {year['pld']['epsilon']:.4g} at δ = {year['pld']['delta']:.3g}"
                     "</b> by privacy-loss distributions.</p>" if year else "")
        sections.append(f"""<h2>Unit of privacy: {html.escape(unit)} ({html.escape(loss['neighbouring'])})</h2>
<p>Basic composition: <b>ε = {loss['basic']['epsilon']:g}, δ = {loss['basic']['delta']:.3g}</b> for one {html.escape(unit)}
(the worst partition or period).{pld_text}{adv_text}</p>{year_text}
{img_time}
<h3>Per mode</h3>{_table(per_mode) if not per_mode.empty else
                    f'<p class="note">{html.escape(_NO_PER_MODE.get(unit, _NO_PER_MODE_OTHER.format(unit=unit)))}</p>'}
{img_heat}
<h3>Per partition or period</h3>{_table(per_part)}""")
    disc = "".join(f"<li>{html.escape(d)}</li>" for d in result["discrepancies"])
    charged = "".join(f"<li>{html.escape(r)}: {n} spend(s)</li>" for r, n in result["charged_not_published"].items())
    threat = "".join(f"<li>{html.escape(t)}</li>" for t in result.get("threat_model", []))
    leftovers = "".join(f"<li><code>{html.escape(x)}</code></li>" for x in result.get("leftovers", []))
    pending = "".join(f"<li>{html.escape(x)}</li>" for x in result.get("pending_publications", []))
    flying = "".join(f"<li>{html.escape(x)}</li>" for x in result.get("in_flight", []))
    status = "PASSED" if result["ok"] else "FAILED"
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Privacy audit {status}</title>
<style>{_CSS}</style></head><body>
<h1>Privacy audit: {status}</h1>
<p>{"The privacy ledger could not be opened: nothing else was checked." if result.get("ledger_unreadable") else f"{result['entries']} ledger entries; {len(result['releases_published'])} published release(s)."}</p>
<h2>Discrepancies</h2>{f"<ul>{disc}</ul>" if disc else "<p>None: the ledger's hash chain is intact, every published file matches its manifest, the ledger's anchors match, and MLflow mirrors every spend.</p>"}
<h2>What this audit can vouch for</h2><ul>{threat}</ul>
<h2>Charged, not published</h2>{f"<ul>{charged}</ul>" if charged else "<p>None.</p>"}
<p class="note">These spends count: noise may have been drawn before the run stopped.</p>
{f"<h2>In flight, not checked</h2><ul>{flying}</ul><p>A live run was making these while the audit read the home; the next audit checks them in full.</p>" if flying else ""}
{f"<h2>Interrupted publications</h2><ul>{pending}</ul><p>Run <code>transit-release repair</code>.</p>" if pending else ""}
{f"<h2>Left behind by runs that stopped</h2><ul>{leftovers}</ul><p>Run <code>transit-release repair</code> to remove them.</p>" if leftovers else ""}
{''.join(sections)}
</body></html>"""
    path = out_dir / "audit.html"
    path.write_text(body, encoding="utf-8")
    return path


def _person_section(population: str, person: dict) -> str:
    """The audit page's first figures: one passenger of ``population`` across every kind of release."""
    basic, pld = person["basic"], person["pld"]
    figures = (f"<b>ε = {basic['epsilon']:.4g}, δ = {basic['delta']:.3g}</b> by basic composition"
               + (f", <b>ε = {pld['epsilon']:.4g} at δ = {pld['delta']:.3g}</b> by privacy-loss distributions"
                  if pld else ""))
    if person["bounded"]:
        head = f"<p>One passenger's loss over every release of the population: {figures}.</p>"
    else:
        trips = ", ".join(f"<code>{html.escape(u['release_id'])}</code> ({html.escape(u['period'])})"
                          for u in person["unbounded_by"])
        head = (f"<p><b class=\"bad\">Unbounded</b>: the trip-level release(s) {trips} bound a trip, not a "
                f"passenger. For a passenger with no trip in those periods, the other releases add up to {figures}."
                "</p>")
    rows = "".join(f"<tr><td>{html.escape(kind)}</td><td>{len(share['releases'])}</td><td>"
                   + ("unbounded" if share["basic"] is None else
                      f"{share['basic']['epsilon']:.4g}</td><td>{share['basic']['delta']:.3g}") + "</td></tr>"
                   for kind, share in person["per_kind"].items())
    return (f"<h2>One passenger of population {html.escape(population)} ({person['releases']} release(s), every "
            f"kind)</h2>{head}<table><tr><th>kind of release</th><th>releases</th><th>ε (basic)</th>"
            f"<th>δ (basic)</th></tr>{rows}</table>")


def write_sequence_report(out_dir: Path, manifest: dict, metrics: dict, quarantine: dict,
                          links: dict[str, str] | None = None, figures: dict | None = None) -> Path:
    """``report.html`` of a passenger-level release (sequences, n-grams, trajectories, sets): headline figures, plots
    and every utility figure in words (:mod:`transit_release.reports.passenger_report`). Internal."""
    from transit_release.reports import passenger_report

    return passenger_report.write_report(out_dir, manifest, metrics, quarantine, links, figures)
