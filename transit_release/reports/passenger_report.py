"""Words for the utility figures of the passenger-level releases (sequences, trajectories, sets).

The releases' evaluations produce metric keys (``count_query.relative_error.max_q5``,
``patterns.top100.tp``, …) that MLflow keeps as they are. A planner reads them here:
each key gets a name in words and one sentence on what it means (:func:`describe`),
keys sort naturally (``max_q5`` before ``max_q10``: :func:`natural_key`), five headline
figures sum a release up (:func:`headline`), and :func:`write_report` draws the internal
report with its plots (released against true counts of the most frequent patterns, the
length distributions, the error by query size).

Internal: the figures compare the release with the raw records.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

#: The key, among a release's figures, of the reason its utility evaluation was not computed (it failed or ran out
#: of time after the charge: the release was published without it, :func:`flows.tail._evaluate_after_charge`).
NOT_COMPUTED = "utility_not_computed"

#: what one record and one element of it are called, per release kind
NOUNS = {"sequences": ("sequence", "sequences", "station"), "trajectories": ("trajectory", "trajectories", "point"),
         "sets": ("set", "sets", "station")}

_PATTERNS: list[tuple[str, str, str]] = [
    # (regular expression over the key, name, sentence); {k} is the number in the key, {one}/{many}/{item} the nouns
    (r"(sequences|trajectories|sets)\.input", "records in",
     "How many passengers' {many} the release was made from."),
    (r"(sequences|trajectories|sets)\.released", "records released",
     "How many {many} the release holds (lines of its text file); noise makes it differ from the records in."),
    (r"(trajectories|sets)\.distinct_released|prefixes\.released", "distinct records released",
     "How many different {many} the release holds."),
    (r"tree\.nodes", "size of the noisy tree or models",
     "Nodes of the noisy tree (or grams of the models) the release was drawn from."),
    (r"records\.share_released", "records whose exact {one} is released",
     "Share of the passengers whose whole {one} (as the release can hold it) appears at least once in the release."),
    (r"points\.top(\d+)\.relative_error", "error of the {k} most frequent points",
     "Mean relative error of the number of trajectories through each of the {k} most frequent (station, hour) "
     "points."),
    (r"ordered_pairs\.top(\d+)\.relative_error", "error of the {k} most frequent ordered pairs",
     "Mean relative error of the number of trajectories that pass one (station, hour) point and later another, for "
     "the {k} most frequent such pairs."),
    (r"grams\.top(\d+)\.relative_error", "error of the {k} most frequent runs of stations",
     "Mean relative error of how often each of the {k} most frequent runs of two or more consecutive stations "
     "occurs."),
    (r"itemsets\.top(\d+)\.relative_error", "error of the {k} most frequent station sets",
     "Mean relative error of the number of passengers who used all stations of each of the {k} most frequent "
     "station combinations."),
    (r"lengths\.total_variation", "length distribution: difference",
     "Total variation distance between the true and the released distributions of {one} length (0 = identical, "
     "1 = disjoint)."),
    (r"sizes\.total_variation", "set size distribution: difference",
     "Total variation distance between the true and the released distributions of set sizes (0 = identical, "
     "1 = disjoint)."),
    (r"count_query\.relative_error\.max_q(\d+)", "count queries of up to {k} {items}: error",
     "Mean relative error of the literature's random count queries of {span} {items} (most are rare or empty; "
     "errors are measured against at least 0.1% of the records)."),
    (r"nonempty_query\.relative_error\.max_q(\d+)", "queries that occur, up to {k} {items}: error",
     "Mean relative error of count queries of {span} {items} taken from real trajectories (so none is empty)."),
    (r"gram_query\.relative_error\.max_q(\d+)", "runs of up to {k} {items}: error",
     "Mean relative error of random queries for runs of {span} consecutive {items} (the n-gram thesis's "
     "workload)."),
    (r"patterns\.top(\d+)\.tp", "frequent patterns found (of {k})",
     "How many of the {k} most frequent patterns of two or more {item}s in order (not necessarily consecutive) "
     "are also among the release's {k} most frequent."),
    (r"patterns\.top(\d+)\.fp", "frequent patterns invented (of {k})",
     "How many of the release's {k} most frequent patterns are not among the true {k} most frequent."),
    (r"patterns\.top(\d+)\.fd", "frequent patterns lost (of {k})",
     "How many of the true {k} most frequent patterns are missing from the release's {k} most frequent."),
    (r"pairs\.top(\d+)\.tp", "frequent points found (of {k})",
     "How many of the {k} (station, hour) points most trajectories pass are also the release's {k} most "
     "frequent."),
    (r"pairs\.top(\d+)\.fp", "frequent points invented (of {k})",
     "How many of the release's {k} most frequent (station, hour) points are not among the true {k}."),
    (r"grams\.top(\d+)\.tp", "frequent runs of stations found (of {k})",
     "How many of the {k} most frequent runs of two or more consecutive stations are also the release's {k} most "
     "frequent."),
    (r"grams\.top(\d+)\.loss", "frequent runs of stations: count loss (top {k})",
     "The n-gram thesis's loss: mean relative error of the {k} most frequent runs' counts, a run missing from the "
     "release's top {k} counting as 0."),
    (r"itemsets\.top(\d+)\.tp", "frequent station sets found (of {k})",
     "How many of the {k} most frequent station combinations are also the release's {k} most frequent."),
    (r"itemsets\.top(\d+)\.loss", "frequent station sets: count loss (top {k})",
     "The DiffPart thesis's loss: mean relative error of the {k} most frequent combinations' counts, one missing "
     "from the release's top {k} counting as 0."),
    (r"itemsets\.top(\d+)\.loss_share", "frequent station sets: share loss (top {k})",
     "The same loss on shares of the data set instead of counts (the release's size is noisy)."),
]


def natural_key(text: str) -> tuple:
    """Sort key that orders the numbers inside a text by value: ``max_q5`` before ``max_q10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def describe(key: str, kind: str) -> tuple[str, str]:
    """``(name in words, one sentence)`` of a metric key; unknown keys get their key and no sentence."""
    one, many, item = NOUNS.get(kind, ("record", "records", "item"))
    for pattern, name, sentence in _PATTERNS:
        m = re.fullmatch(pattern, key)
        if m:
            k = next((g for g in m.groups() if g and g.isdigit()), "")
            words = dict(k=k, one=one, many=many, item=item, items=item if k == "1" else f"{item}s",
                         span="1" if k == "1" else f"1 to {k}")
            return name.format(**words), sentence.format(**words)
    return key, ""


def _share(x: float) -> str:
    return f"{100 * x:.1f}%"


def headline(kind: str, metrics: dict, epsilon: float) -> list[tuple[str, str]]:
    """Five figures in plain words: records in, released, share of records whose pattern survives, error of the
    frequent queries, ε. ``(label, value)`` pairs; a figure the run did not compute reads "not measured"."""
    one, many, _ = NOUNS.get(kind, ("record", "records", "item"))
    n_in, n_out = metrics.get(f"{kind}.input"), metrics.get(f"{kind}.released")
    survive = metrics.get("records.share_released")
    frequent = {"trajectories": [("points", "points.top100.relative_error"),
                                 ("ordered pairs", "ordered_pairs.top100.relative_error")],
                "sequences": [("runs of stations", "grams.top100.relative_error")],
                "sets": [("station sets", "itemsets.top100.relative_error")]}.get(kind, [])
    errors = [f"{name} {_share(metrics[key])}" for name, key in frequent if key in metrics]
    return [
        (f"{many} in", f"{int(n_in):,}" if n_in is not None else "not measured"),
        (f"{many} released", f"{int(n_out):,}" if n_out is not None else "not measured"),
        (f"passengers whose exact {one} is released", _share(survive) if survive is not None else "not measured"),
        ("error of the 100 most frequent queries", ", ".join(errors) + " (mean relative error)" if errors
         else "not measured"),
        ("privacy", f"ε = {epsilon:g} per passenger's {one} over the period"),
    ]


def metric_rows(kind: str, metrics: dict) -> list[tuple[str, float, str]]:
    """``(name, value, sentence)`` of every metric, sorted naturally by key."""
    out = []
    for key, value in sorted(metrics.items(), key=lambda kv: natural_key(kv[0])):
        name, sentence = describe(key, kind)
        out.append((name, value, sentence))
    return out


def _value(key_name: str, v: float) -> str:
    if any(w in key_name for w in ("error", "difference", "loss", "whose exact")):
        return _share(v)
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.4g}"


# ---- the report --------------------------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _released_vs_true(figures: dict, path: Path, kind: str) -> bool:
    pairs = [(name, figures.get(f"top_{name}.true"), figures.get(f"top_{name}.released"))
             for name in ("points", "ordered_pairs", "patterns")]
    pairs = [(n, t, r) for n, t, r in pairs if t is not None and len(t)]
    if not pairs:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 4.2), squeeze=False)
    titles = {"points": "the 100 most frequent (station, hour) points", "ordered_pairs": "the 100 most frequent "
              "ordered pairs of points", "patterns": {"sequences": "the 100 most frequent runs of stations",
                                                      "sets": "the 100 most frequent station sets"}.get(kind, "")}
    for ax, (name, true, rel) in zip(axes[0], pairs):
        hi = max(max(true), max(rel, default=0), 1)
        ax.plot(true, rel, "o", ms=3, alpha=0.6)
        ax.plot([0, hi], [0, hi], color="k", lw=0.8, label="released = true")
        ax.set_xlim(0, hi * 1.05)
        ax.set_ylim(0, hi * 1.05)
        ax.set_xlabel("true count")
        ax.set_ylabel("released count")
        ax.set_title(titles[name], fontsize=10)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _lengths(figures: dict, path: Path, kind: str) -> bool:
    true, rel = figures.get("lengths.true"), figures.get("lengths.released")
    if not true:
        return False
    import numpy as np

    plt = _pyplot()
    n = max(len(true), len(rel or []))
    x = np.arange(n)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(x - 0.2, np.pad(true, (0, n - len(true))), width=0.4, label="true")
    ax.bar(x + 0.2, np.pad(rel or [], (0, n - len(rel or []))), width=0.4, label="released")
    ax.set_xlabel({"sets": "stations per set"}.get(kind, f"{NOUNS.get(kind, ('record',))[0]} length"))
    ax.set_ylabel("share of records")
    ax.set_title("How long the records are: true and released")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _error_by_size(metrics: dict, path: Path, kind: str) -> bool:
    series = {}
    for prefix in ("count_query", "nonempty_query", "gram_query"):
        pts = sorted((int(k.rsplit("max_q", 1)[1]), v) for k, v in metrics.items()
                     if k.startswith(f"{prefix}.relative_error.max_q"))
        if pts:
            series[prefix] = pts
    if not series:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for prefix, pts in series.items():
        # the name of a size above 1 (plural nouns), its size made k
        name = describe(f"{prefix}.relative_error.max_q2", kind)[0].replace(" up to 2 ", " up to k ")
        ax.plot([k for k, _ in pts], [100 * v for _, v in pts], "o-", label=name)
    ax.set_xlabel("largest query size k")
    ax.set_ylabel("mean relative error (%)")
    ax.set_title("Error of count queries by query size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f2f2f2}td.v{text-align:right;white-space:nowrap}img{max-width:100%}.note{color:#555;font-size:.9em}
dl.h{display:grid;grid-template-columns:minmax(12em,22em) 1fr;gap:.25em 1em}dl.h dt{font-weight:600}dl.h dd{margin:0}
.scroll{max-width:100%;overflow-x:auto}"""


def write_report(out_dir: Path, manifest: dict, metrics: dict, quarantine: dict, links: dict[str, str] | None = None,
                 figures: dict | None = None) -> Path:
    """``report.html`` of a passenger-level release: headline figures, plots, every metric in words. Internal."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kind = manifest.get("kind", "")
    figures = figures or {}
    p = manifest["privacy"]
    imgs = []
    if _released_vs_true(figures, out_dir / "released_vs_true.png", kind):
        imgs.append(("Released against true counts of the most frequent patterns", "released_vs_true.png",
                     "Each dot is one of the most frequent true patterns; on the diagonal the release has it at its "
                     "true count, below it the release has fewer."))
    if _lengths(figures, out_dir / "lengths.png", kind):
        imgs.append(("Length distributions", "lengths.png", "The share of records of each length, in the data as "
                     "the release can hold it and in the release."))
    if _error_by_size(metrics, out_dir / "error_by_query_size.png", kind):
        imgs.append(("Error by query size", "error_by_query_size.png", "Mean relative error of count queries, by the "
                     "largest number of elements a query may have."))
    heads = "".join(f"<dt>{html.escape(a)}</dt><dd>{html.escape(b)}</dd>" for a, b in headline(kind, metrics,
                                                                                             p["epsilon"]))
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td class=v>{_value(name, v)}</td><td>{html.escape(text)}</td>"
                   "</tr>" for name, v, text in metric_rows(kind, metrics))
    plots = "".join(f"<h3>{html.escape(t)}</h3><p class=note>{html.escape(n)}</p><img src=\"{f}\" alt=\"{html.escape(t)}\">"
                    for t, f, n in imgs)
    qrows = "".join(f"<tr><td>{html.escape(r)}</td><td class=v>{c:,}</td></tr>" for r, c in quarantine.items())
    links_html = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>'
                         for text, href in (links or {}).items())
    missing = (f'<p class="warn"><b>Utility evaluation not computed</b>: {html.escape(figures[NOT_COMPUTED])}. The '
               "release was charged and published without it: its figures are internal and no part of the privacy "
               "promise.</p>" if NOT_COMPUTED in figures else "")
    period = manifest.get("period", {})
    files = ", ".join(f"<code>{html.escape(k)}</code> ({v['rows']:,} rows)" for k, v in manifest.get("files", {}).items()
                      if "rows" in v)
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Report {html.escape(manifest['release_id'])}</title>
<style>{_CSS}</style></head><body>
<h1>Release report: {html.escape(manifest['release_id'])}</h1>
<p class="note">Internal document: it compares the release with the raw records. Do not publish.</p>
<h2>What was released</h2>
<p>{html.escape(manifest.get('product', '')[:1].upper() + manifest.get('product', '')[1:])}; period {html.escape(period.get('start', ''))} to
{html.escape(period.get('end', ''))}; universe of {manifest.get('universe', {}).get('locations', '—')} locations.
Files: {files}.</p>
<p>Privacy: ε = {p['epsilon']:g} (δ = {p['delta']:.2g}) per {html.escape(p['unit_of_privacy'])}
({html.escape(p['neighbouring_relation'])}); {html.escape(p['mechanism'])}.</p>
<ul>{links_html}</ul>
{missing}<h2>In five figures</h2><dl class="h">{heads}</dl>
<h2>Input quality</h2>{f"<table><tr><th>quarantined because</th><th>lines</th></tr>{qrows}</table>" if qrows else "<p>Nothing quarantined.</p>"}
<h2>Plots</h2>{plots or "<p>No figures were measured for this run.</p>"}
<h2>Every figure</h2>
<p class="note">Measured against the raw records (internal). The same figures are in the release's MLflow run under
their keys.</p>
<table><tr><th>figure</th><th>value</th><th>what it means</th></tr>{rows}</table>
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(body, encoding="utf-8")
    return path
