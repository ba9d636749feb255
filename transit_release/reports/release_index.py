"""``release_reports/index.html``: the reviewer's dashboard of every published release and the latest audit.

Per kind of release, four small plots of the releases over time (ε spent, rows released, the kind's utility
figure, and where one passenger stood at each publication against each cap of the budget policy on a passenger),
kinds with the newest publication first; below them one table of every release, newest publication first, that
fits a 1400 px window with its links (utility in one short line, every figure one click away; the data card
rendered as HTML on the release's landing page). The plots are inline SVG drawn here: no plotting library, no
file beside the page. Built only from what is already on disk under the home directory:
published manifests (``releases/<id>/manifest.json``), the small internal
summaries the flows leave next to their reports
(``release_reports/<id>/summary.json``), the newest audit's
``audit_summary.json`` and the audits' history (``audit_history.jsonl``). It is internal (it sits with the reports), but holds
nothing finer than the reports' own aggregates; where a passenger stands now under each cap is the budget
policy's own reading of the ledger (:meth:`~transit_release.accounting.policy.BudgetPolicy.status`). Releases
are listed newest publication first, then by id, whatever order the folders are read in.
"""

from __future__ import annotations

import html
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from transit_release.files import publish
from transit_release.integrity.audit import PERSON, unit_losses
from transit_release.reports.tracking import EXPERIMENT, RELEASE_ROLE, ROLE_TAG

INDEX = "index.html"
SUMMARY = "summary.json"
AUDIT_SUMMARY = "audit_summary.json"
#: every audit's figures, one JSON line each, oldest first (a replaced report's history stays here)
AUDIT_HISTORY = "audit_history.jsonl"
#: the earlier audits the index lists
HISTORY_SHOWN = 24
#: Where ``mlflow ui`` serves by default; the index's MLflow links assume it runs on this machine.
MLFLOW_UI = "http://127.0.0.1:5000"


@dataclass(frozen=True)
class ReleaseRow:
    release_id: str
    kind: str  # "opal", "sequences", ...
    period: str  # "start – end" of the declared period
    sort_key: str  # the publication time (the manifest's created_at), then the id
    mechanism: str
    unit_of_privacy: str
    epsilon: float
    delta: float
    rows: int
    utility: str  # one short line
    links: dict[str, str]  # label -> path relative to the index
    published: str = ""  # the manifest's created_at
    group: str = ""  # the kind as the dashboard groups it ("Opal tap counts, card level", ...)
    utility_value: float | None = None  # the kind's utility figure (a share), for its plot
    utility_name: str = ""  # what that figure is
    figures: tuple[tuple[str, str], ...] = ()  # every utility figure in words: (name, value)
    person: dict | None = None  # where one passenger stood at publication (the manifest's person_at_publication)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pct(x) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def _utility(kind: str, summary: dict | None) -> str:
    """The kind's utility in one short line."""
    if not summary:
        return "—"
    if kind == "opal":
        return f"trips covered {_pct(summary.get('trip_coverage'))}"
    name, value = _headline_figure(kind, summary)
    if value is not None:
        return f"{name} {_pct(value)}"
    errors = sorted((k for k in summary if k.startswith("count_query.relative_error.max_q")),
                    key=lambda k: int(k.rsplit("max_q", 1)[1]))
    if errors:
        size = errors[0].rsplit("max_q", 1)[1]
        return f"count-query error (|Q| ≤ {size}) {_pct(summary[errors[0]])}"
    return "—"


#: The figure of each kind the dashboard plots over time (a share): (key in the summary, name in words).
HEADLINE = {"opal": ("trip_coverage", "trips covered"),
            "sequences": ("grams.top100.relative_error", "error of the 100 most frequent runs"),
            "trajectories": ("points.top100.relative_error", "error of the 100 most frequent points"),
            "sets": ("itemsets.top100.relative_error", "error of the 100 most frequent station sets")}


def _headline_figure(kind: str, summary: dict | None) -> tuple[str, float | None]:
    key, name = HEADLINE.get(kind, ("", ""))
    value = (summary or {}).get(key)
    return name, (None if value is None else float(value))


def _figures(kind: str, summary: dict | None) -> tuple[tuple[str, str], ...]:
    """Every utility figure of the release's summary in words (the report's names and formats)."""
    if not summary:
        return ()
    if kind == "opal":
        return tuple((name, _pct(summary[k]) if k == "trip_coverage" else f"{summary[k]:g}")
                     for k, name in (("trip_coverage", "trips covered (mean over partitions)"),)
                     if summary.get(k) is not None)
    from transit_release.reports.passenger_report import _value, metric_rows

    return tuple((name, _value(name, value)) for name, value, _ in metric_rows(kind, summary))


def _group(kind: str, manifest: dict) -> str:
    unit = (manifest.get("privacy") or {}).get("unit_of_privacy", "")
    return {"opal": f"Opal tap counts, {unit} level", "sequences": "Passenger sequences",
            "trajectories": "Passenger trajectories", "sets": "Station sets"}.get(kind, kind)


#: The MLflow experiment that holds the releases' own runs (the ledger's anchor runs and the audits' runs live in
#: experiments of their own and are never a release's run).
RELEASE_EXPERIMENT = EXPERIMENT
#: The tag that says what a run is (:data:`~transit_release.reports.tracking.ROLE_TAG`) and its value on a release's
#: own run: a run of :data:`RELEASE_EXPERIMENT` tagged with another role is never a release's run; one without the
#: tag (tracked before runs said their role) is found by its name and ``release_id`` tag alone.
RELEASE_RUN_TAG: tuple[str, str] | None = (ROLE_TAG, RELEASE_ROLE)


def release_runs(mlflow_db: Path, run_tag: tuple[str, str] | None = RELEASE_RUN_TAG) -> dict[str, tuple[str, str]]:
    """``{release id: (experiment id, run id)}`` of each release's own MLflow run, read-only from the home's store
    (SQLite, no MLflow import); empty when there is no store yet or it cannot be read.

    A release's own run is an active top-level run of :data:`RELEASE_EXPERIMENT` whose name is the release id and
    whose ``release_id`` tag says the same (and, with ``run_tag``, no other value of that tag): never a ledger anchor run
    (``transit-release-ledger``) or an audit run, which are tagged with release ids too. Of several (a failed
    publication's run, then the published one), the run tagged ``published = true`` wins, then the newest."""
    if not mlflow_db.is_file():
        return {}
    wanted = ("AND NOT EXISTS (SELECT 1 FROM tags m WHERE m.run_uuid = r.run_uuid AND m.key = ? AND m.value != ?) "
              if run_tag else "")
    try:
        db = sqlite3.connect(f"{mlflow_db.as_uri()}?mode=ro", uri=True)
        try:
            rows = db.execute(
                "SELECT r.experiment_id, r.run_uuid, t.value, COALESCE((SELECT p.value FROM tags p WHERE "
                "p.run_uuid = r.run_uuid AND p.key = 'published'), '') = 'true', r.start_time "
                "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
                "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'release_id' "
                "WHERE e.name = ? AND r.lifecycle_stage = 'active' AND r.name = t.value "
                "AND NOT EXISTS (SELECT 1 FROM tags p WHERE p.run_uuid = r.run_uuid AND p.key = 'mlflow.parentRunId') "
                + wanted, (RELEASE_EXPERIMENT, *(run_tag or ()))).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return {}
    best: dict[str, tuple] = {}
    for exp, run, rid, published, start in rows:
        key = (bool(published), start or 0, run)
        if rid not in best or key > best[rid][0]:
            best[rid] = (key, (str(exp), run))
    return {rid: v[1] for rid, v in best.items()}


def mlflow_runs(mlflow_db: Path) -> dict[str, str]:
    """``{release id: MLflow UI address of its own run}`` (:func:`release_runs`) and ``{"": address of the runs
    view}``. The addresses open the experiment's runs tab (``#/experiments/<id>/runs``), not MLflow 3's default
    view."""
    runs = release_runs(mlflow_db)
    out = {rid: f"{MLFLOW_UI}/#/experiments/{exp}/runs/{run}" for rid, (exp, run) in runs.items()}
    if runs:
        out[""] = f"{MLFLOW_UI}/#/experiments/{next(iter(runs.values()))[0]}/runs"
    return out


def collect_releases(releases_dir: Path, reports_dir: Path, mlflow: dict[str, str] | None = None) -> list[ReleaseRow]:
    """One row per published release (a folder with a manifest; staging folders are skipped); ``mlflow`` maps
    release ids to their MLflow run's address (:func:`mlflow_runs`)."""
    rows = []
    if not releases_dir.is_dir():
        return rows
    for d in releases_dir.iterdir():
        manifest = _read_json(d / "manifest.json") if d.is_dir() and not d.name.startswith(".") else None
        if not manifest or "release_id" not in manifest:
            continue
        rid = manifest["release_id"]
        privacy = manifest.get("privacy", {})
        kind = manifest.get("kind") or ("opal" if "modes" in manifest else "sequences")
        if "period" in manifest:
            period = f"{manifest['period']['start']} – {manifest['period']['end']}"
        else:  # sequence releases made before periods were declared
            period = f"scope: {manifest.get('scope', '—')}"
        published = str(manifest.get("created_at") or "")
        mechanism = ("stability-based histogram" if kind == "opal"
                     else privacy.get("mechanism", "noisy prefix tree").split(" (")[0].split(":")[0])
        rows_released = publish.rows_released(manifest.get("files", {}))
        report_dir = reports_dir / rid
        landing = d / "index.html"
        links = {"data card": os.path.relpath(landing, reports_dir) + "#data-card" if landing.exists()
                 else os.path.relpath(d / "DATACARD.md", reports_dir),
                 "manifest": os.path.relpath(d / "manifest.json", reports_dir)}
        if (report_dir / "report.html").exists():
            links = {"report": f"{rid}/report.html", **links}
        for label, sub in (("Data Docs (raw)", "data_docs/raw/index.html"),
                           ("Data Docs (release)", "data_docs/release/index.html")):
            if (report_dir / sub).exists():
                links[label] = f"{rid}/{sub}"
        if (mlflow or {}).get(rid):
            links["MLflow run"] = mlflow[rid]
        summary = _read_json(report_dir / SUMMARY)
        name, value = _headline_figure(kind, summary)
        rows.append(ReleaseRow(rid, kind, period, published, mechanism, privacy.get("unit_of_privacy", "—"),
                               float(privacy.get("epsilon", 0.0)), float(privacy.get("delta", 0.0)),
                               rows_released, _utility(kind, summary), links, published, _group(kind, manifest),
                               value, name, _figures(kind, summary), privacy.get("person_at_publication")))
    return sorted(rows, key=lambda r: (r.sort_key, r.release_id), reverse=True)


def latest_audit(reports_dir: Path) -> tuple[str, dict] | None:
    """(folder name, summary) of the newest audit report: folders ``audit-<UTC stamp>`` (one per audit) or a
    replaced one (e.g. ``audit-scheduled``), newest by the time its summary records."""
    audits = [(p.name, s) for p in reports_dir.glob("audit-*") if (p / AUDIT_SUMMARY).exists()
              and (s := _read_json(p / AUDIT_SUMMARY))] if reports_dir.is_dir() else []
    return max(audits, key=lambda a: (a[1].get("at") or _stamp_time(a[0]), a[0])) if audits else None


def _stamp_time(folder: str) -> str:
    """``audit-20260101T000000…Z`` as an ISO time to compare with the summaries' ``at`` ('' if not a stamp)."""
    stamp = folder[len("audit-"):]
    if len(stamp) < 15 or stamp[8] != "T" or not stamp[:8].isdigit():
        return ""
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}+00:00"


def add_audit_to_history(reports_dir: Path, folder: str, summary: dict) -> None:
    """Append an audit's figures (and the folder its report was written to, and the releases a live run was making
    while it read the home) to the history. A history whose last line is torn (a full disk or a kill during an
    append left it without its newline) gets the newline first: the new record is a line of its own, never glued
    to the torn one and skipped with it."""
    line = {"at": summary.get("at"), "folder": folder, "ok": summary["ok"], "entries": summary["entries"],
            "releases_published": summary["releases_published"], "discrepancies": summary["discrepancies"],
            **({"in_flight": summary["in_flight"]} if summary.get("in_flight") else {}),
            **({"ledger_unreadable": True} if summary.get("ledger_unreadable") else {})}
    path = reports_dir / AUDIT_HISTORY
    with open(path, "a+b") as f:
        torn = False
        if f.seek(0, os.SEEK_END):
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        f.write((("\n" if torn else "") + json.dumps(line) + "\n").encode("utf-8"))


def audit_history(reports_dir: Path) -> list[dict]:
    """The audits' figures, newest first (unreadable lines skipped)."""
    path = reports_dir / AUDIT_HISTORY
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return sorted(out, key=lambda a: a.get("at") or "", reverse=True)


def audit_summary(result: dict) -> dict:
    """The few audit figures the index shows."""
    return {"ok": bool(result["ok"]), "entries": result["entries"],
            "releases_published": len(result["releases_published"]),
            "discrepancies": len(result["discrepancies"]), "in_flight": list(result.get("in_flight", [])),
            **({"ledger_unreadable": True} if result.get("ledger_unreadable") else {}),
            "person": {p: {"bounded": x["bounded"], "epsilon": x["basic"]["epsilon"], "delta": x["basic"]["delta"],
                           "pld_epsilon": (x.get("pld") or {}).get("epsilon")}
                       for p, x in result["loss"].get(PERSON, {}).items()},
            "loss": {unit: {"epsilon": loss["basic"]["epsilon"], "delta": loss["basic"]["delta"],
                            "pld_epsilon": (loss.get("pld") or {}).get("epsilon")}
                     for unit, loss in unit_losses(result["loss"]).items()}}


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1340px;padding:0 1em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{white-space:nowrap;text-align:right}td.w,span.w{white-space:nowrap}
.ok{color:#176117}.bad{color:#a31515}.note{color:#555;font-size:90%}
table#releases{width:100%;table-layout:fixed;font-size:.88em}td.when{white-space:nowrap}
table#releases td.id{overflow-wrap:anywhere}
table#releases td.links a{white-space:nowrap;display:inline-block;margin-right:.5em}
details summary{cursor:pointer}details dl{margin:.3em 0;display:grid;grid-template-columns:auto auto;gap:0 .6em}
details dd{margin:0;text-align:right;white-space:nowrap}
section.kind{margin:1.2em 0 1.8em}section.kind h3{margin:.2em 0}
.charts{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:.8em}
figure{margin:0}figcaption{color:#555;font-size:.82em;margin-top:.2em}svg{width:100%;height:auto;display:block}
.standing{font-size:.9em;margin:.3em 0}"""

#: Width and height of each plot's drawing (the SVG scales to its column).
_W, _H = 320, 170
_PAD = (42, 10, 14, 30)  # left, right, top, bottom
_COLOURS = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e")


def _nice(top: float) -> float:
    """A round upper bound of an axis (1, 2 or 5 times a power of ten)."""
    import math

    if top <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(top))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= top)


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.3g}"


def _svg(title: str, series: list[tuple[str, list[float | None], str]], labels: list[str], bars: bool = False,
         caps: list[tuple[str, float]] = (), percent: bool = False, empty: str = "") -> str:
    """A small chart: ``series`` (name, values, kind "bar" or "line") over ``labels`` (the releases, oldest first),
    horizontal ``caps`` (label, value) drawn dashed; the y axis from 0. ``empty``: what to say when nothing is to
    be drawn (never a blank panel)."""
    e = html.escape
    values = [v for _, vs, _ in series for v in vs if v is not None]
    left, right, top_pad, bottom = _PAD
    pw, ph = _W - left - right, _H - top_pad - bottom
    out = [f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="{e(title)}">']
    if not values or not labels:
        out.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" font-size="12" fill="#555">'
                   f'{e(empty or "nothing to plot")}</text></svg>')
        return "".join(out)
    top = _nice(max(values + [c for _, c in caps]) * (1.08 if caps else 1.0))
    ticks = 5 if f"{top:e}".startswith("5") else 4  # round steps: 1/4, 2/4, 5/5
    n = len(labels)
    step = pw / n

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    def y(v: float) -> float:
        return top_pad + ph * (1 - v / top)

    for k in range(ticks + 1):  # grid and y labels
        v = top * k / ticks
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#444">'
                   f'{e(f"{100 * v:.0f}%" if percent else _fmt(v))}</text>')
    every = max(1, -(-n // 4))  # at most about five labels, the last one always, none crowding it
    for i, label in enumerate(labels):
        if i == n - 1 or (i % every == 0 and n - 1 - i >= every):
            out.append(f'<text x="{x(i):.1f}" y="{_H - 14}" text-anchor="middle" font-size="9" fill="#444">'
                       f'{e(label)}</text>')
    width = step * 0.7 / max(1, sum(1 for _, _, k in series if k == "bar"))
    b = 0
    for j, (name, vs, kind) in enumerate(series):
        colour = _COLOURS[j % len(_COLOURS)]
        if kind == "bar":
            for i, v in enumerate(vs):
                if v is not None:
                    x0 = x(i) - step * 0.35 + b * width
                    out.append(f'<rect x="{x0:.1f}" y="{y(v):.1f}" width="{width:.1f}" height="{y(0) - y(v):.1f}" '
                               f'fill="{colour}"><title>{e(labels[i])}: {e(_fmt(v))}</title></rect>')
            b += 1
        else:
            pts = [(x(i), y(v), v, labels[i]) for i, v in enumerate(vs) if v is not None]
            if len(pts) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="'
                           + " ".join(f"{a:.1f},{c:.1f}" for a, c, _, _ in pts) + '"/>')
            out += [f'<circle cx="{a:.1f}" cy="{c:.1f}" r="3.2" fill="{colour}"><title>{e(lab)}: '
                    f'{e(f"{100 * v:.1f}%" if percent else _fmt(v))}</title></circle>' for a, c, v, lab in pts]
    for j, (label, value) in enumerate(caps):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#a31515" '
                   f'stroke-dasharray="5,3"><title>{e(label)}</title></line>'
                   f'<text x="{left + 4}" y="{y(value) + 11:.1f}" font-size="9" fill="#a31515">{e(label)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + ph}" stroke="#888"/>'
               f'<line x1="{left}" x2="{left + pw}" y1="{top_pad + ph}" y2="{top_pad + ph}" stroke="#888"/>')
    legend = [(name, _COLOURS[j % len(_COLOURS)]) for j, (name, _, _) in enumerate(series)] if len(series) > 1 else []
    for j, (name, colour) in enumerate(legend):
        out.append(f'<rect x="{left + 6 + 120 * j}" y="{top_pad - 10}" width="8" height="8" fill="{colour}"/>'
                   f'<text x="{left + 17 + 120 * j}" y="{top_pad - 3}" font-size="9">{e(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _person_caps(policy) -> list:
    return [c for c in (policy.caps if policy else ()) if c.on_person]


def _cap_words(cap) -> str:
    how = f"PLD at δ={cap.delta:g}" if cap.measure == "pld" else "basic"
    return f"cap '{cap.name}': ε ≤ {cap.epsilon:g} ({how})"


def _kind_section(group: str, rows: list[ReleaseRow], policy, standing: dict) -> str:
    """One kind's four plots over its releases (oldest to newest, left to right) and where the caps stand."""
    e = html.escape
    ordered = sorted(rows, key=lambda r: (r.sort_key, r.release_id))
    labels = [r.published[:10] or r.period.split(" ")[0] for r in ordered]
    utility_name = next((r.utility_name for r in ordered if r.utility_name), "utility")
    person = [r.person or {} for r in ordered]
    basic = [(p.get("basic") or {}).get("epsilon") for p in person]
    pld = [(p.get("pld") or {}).get("epsilon") for p in person]
    caps = _person_caps(policy)
    unbounded = any(p and not p.get("bounded", True) for p in person)
    charts = [
        ("ε spent per release", _svg("ε per release", [("ε", [r.epsilon for r in ordered], "bar")], labels),
         f"ε of each release per {e(ordered[-1].unit_of_privacy)}"),
        ("rows released", _svg("rows released", [("rows", [float(r.rows) for r in ordered], "bar")], labels,
                               empty="no release holds a row"),
         "rows of the release's public files (0: no count cleared its threshold)"),
        (utility_name, _svg(utility_name, [(utility_name, [r.utility_value for r in ordered], "line")], labels,
                            percent=True, empty="not measured for these releases"),
         f"{e(utility_name)} (internal: measured against the true data)"),
        ("one passenger's loss", _svg("one passenger's cumulative loss",
                                      [("basic composition", basic, "line"), ("PLD", pld, "line")], labels,
                                      caps=[(_cap_words(c), c.epsilon) for c in caps],
                                      empty="not stated by these releases"),
         "where one passenger of the population stood at each publication (every kind of release), by basic "
         "composition and by privacy-loss distributions (PLD), against the budget policy's caps on a passenger" + ("; <b class=\"bad\">unbounded</b> where trip-level releases count"
                                                   if unbounded else "")),
    ]
    figures = "".join(f"<figure>{svg}<figcaption><b>{e(title)}</b>: {caption}</figcaption></figure>"
                      for title, svg, caption in charts)
    now = "".join(f"<li>{e(line)}</li>" for line in standing.get(group, []))
    return (f'<section class="kind" data-kind="{e(group)}"><h3>{e(group)}: {len(rows)} release(s), latest '
            f'{e(labels[-1])}</h3><div class="charts">{figures}</div>'
            + (f'<ul class="standing">{now}</ul>' if now else "") + "</section>")


def standing_lines(policy, entries: list, rows: list[ReleaseRow]) -> dict[str, list[str]]:
    """Per kind group: where each cap the kind's releases count under stands now, in the cap's own measure, as the
    policy reads the ledger (:meth:`BudgetPolicy.status`)."""
    if policy is None or not entries:
        return {}
    group_of = {r.release_id: r.group for r in rows}
    worst: dict[tuple[str, str], object] = {}  # (group, cap) -> its most used scope
    for s in policy.status(entries):
        for g in sorted({group_of[rid] for rid in s.releases if rid in group_of}):
            key = (g, s.cap.name)
            if key not in worst or s.used.epsilon_exact > worst[key].used.epsilon_exact:
                worst[key] = s
    out: dict[str, list[str]] = {}
    for (g, _), s in worst.items():
        if s.measure == "pld":
            used = f"ε={s.used.epsilon:.4g} by privacy-loss distributions at δ={s.cap.delta:g}"
        else:
            used = f"ε={s.used.epsilon:g}, δ={s.used.delta:.3g}"
        out.setdefault(g, []).append(f"now, cap '{s.cap.name}' ({s.scope}{', the most spent' if s.cap.per in ('partition', 'period') else ''}): "
                                     f"used {used} of ε ≤ {s.cap.epsilon:g}; remaining ε={s.remaining.epsilon:.4g}"
                                     + (f" ({s.note})" if s.note else ""))
    return out


def render_index(rows: list[ReleaseRow], audit: tuple[str, dict] | None, mlflow_home: str = "",
                 mlflow_runs_view: str = "", history: list[dict] | None = None, policy=None,
                 standing: dict[str, list[str]] | None = None) -> str:
    """The page; ``mlflow_home`` (the ``mlflow ui`` command for the home) and ``mlflow_runs_view`` (the address of
    the releases' runs) add a line on how to open MLflow; ``history`` (newest first) lists the earlier audits;
    ``policy`` draws its caps on a passenger; ``standing`` (:func:`standing_lines`) says where the caps stand now."""
    e = html.escape

    def _period_cell(period: str) -> str:  # each date on one line: "2026-01-01 –" / "2026-01-31", never "2026-"
        return " – ".join(f"<span class=w>{e(d)}</span>" for d in period.split(" – "))

    def row_html(r: ReleaseRow) -> str:
        links = "".join(f'<a href="{e(href)}">{e(label)}</a>' for label, href in r.links.items())
        full = "".join(f"<dt>{e(a)}</dt><dd>{e(b)}</dd>" for a, b in r.figures)
        utility = (f"<details><summary>{e(r.utility)}</summary><dl>{full}</dl></details>" if full
                   else e(r.utility))
        return (f'<tr class="release" data-release-id="{e(r.release_id)}"><td class=when>{e(r.published[:10])}'
                f'<br><span class=note>{e(r.published[11:16])}</span></td><td class="id">{e(r.release_id)}</td><td>{e(r.group)}<br><span class=note>{e(r.mechanism.split(",")[0])}'
                f"</span></td><td>{_period_cell(r.period)}</td><td class=n>{r.epsilon:g}</td><td class=n>{r.delta:.2g}</td>"
                f"<td class=n>{r.rows:,}</td><td>{utility}</td><td class=links>{links}</td></tr>")

    if audit is None:
        audit_html = "<p>No audit yet: run <code>transit-release audit</code>.</p>"
    else:
        name, s = audit
        status = '<b class="ok">PASSED</b>' if s["ok"] else '<b class="bad">FAILED</b>'
        people = "".join(f"<li>one passenger of population {e(p)}: "
                         + (f"ε = {x['epsilon']:.4g}, δ = {x['delta']:.3g}" if x["bounded"] else
                            "<b>unbounded</b> (trip-level releases)")
                         + (f" (privacy-loss distributions: ε = {x['pld_epsilon']:.4g})"
                            if x["bounded"] and x.get("pld_epsilon") else "") + "</li>"
                         for p, x in s.get("person", {}).items())
        losses = people + "".join(f"<li>per {e(u)}: ε = {x['epsilon']:g}, δ = {x['delta']:.3g}"
                         + (f" (privacy-loss distributions: ε = {x['pld_epsilon']:.4g})" if x.get("pld_epsilon")
                            else "") + "</li>" for u, x in s["loss"].items())
        audit_html = (f'<p id="latest-audit">{status} — {e(name)}: {s["entries"]} ledger entries, '
                      f'{s["releases_published"]} published release(s), {s["discrepancies"]} discrepancy(ies)'
                      + (f'; in flight, not checked: {e(", ".join(map(str, s["in_flight"])))}' if s.get("in_flight")
                         else "")
                      + f'. <a href="{e(name)}/audit.html">Audit report</a></p><ul>{losses}</ul>')
    earlier = (history or [])[1:HISTORY_SHOWN + 1]
    if earlier:
        def history_row(a: dict) -> str:
            status = '<b class="ok">PASSED</b>' if a["ok"] else '<b class="bad">FAILED</b>'
            if a.get("in_flight"):
                status += " (in flight, not checked: " + e(", ".join(map(str, a["in_flight"]))) + ")"
            return (f"<tr><td class=w>{e(str(a.get('at') or ''))}</td><td>{status}</td>"
                    f"<td class=n>{a['entries']}</td><td class=n>{a['releases_published']}</td>"
                    f"<td class=n>{a['discrepancies']}</td><td class=w>{e(str(a.get('folder') or ''))}</td></tr>")
        audit_html += ('<details><summary>Earlier audits</summary><table id="audit-history"><thead><tr><th>at (UTC)'
                       "</th><th>result</th><th>ledger entries</th><th>published releases</th><th>discrepancies</th>"
                       "<th>report folder (a replaced one holds only its latest)</th></tr></thead><tbody>"
                       + "".join(history_row(a) for a in earlier) + "</tbody></table></details>")
    mlflow_html = ""
    if mlflow_runs_view:
        mlflow_html = (f'<p id="mlflow" class="note">MLflow: start its UI with <code>{e(mlflow_home)}</code>, then '
                       f'open <a href="{e(mlflow_runs_view)}">the releases\' runs</a> (each release\'s '
                       "<i>MLflow run</i> link opens its own run).</p>")
    groups: dict[str, list[ReleaseRow]] = {}
    for r in rows:  # newest publication first: the kind published last comes first
        groups.setdefault(r.group, []).append(r)
    kinds = "".join(_kind_section(g, rs, policy, standing or {}) for g, rs in groups.items())
    table = ('<table id="releases"><colgroup><col style="width:6.5em"><col style="width:14%"><col style="width:11%">'
             '<col style="width:11em"><col style="width:3.5em"><col style="width:4.5em"><col style="width:5.5em">'
             '<col style="width:16%"><col></colgroup><thead><tr><th>published (UTC)</th><th>release</th>'
             "<th>kind, mechanism</th><th>period</th><th>ε</th><th>δ</th><th>rows released</th>"
             "<th>utility (click: every figure)</th><th>links</th>"
             f"</tr></thead><tbody>{''.join(row_html(r) for r in rows)}</tbody></table>"
             if rows else "<p>No release published yet.</p>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>transit-release: past releases</title>
<style>{_CSS}</style></head><body>
<h1>Past releases</h1>
<p class="note">Internal page: utility figures compare released counts with true ones. The public files are the
landing pages, data cards and CSV/TXT files under <code>releases/</code>.</p>
<h2>Latest privacy audit</h2>{audit_html}
<h2>Releases over time, per kind</h2>{kinds or "<p>No release published yet.</p>"}
<h2>Every release ({len(rows)}), newest publication first</h2>{mlflow_html}{table}
</body></html>"""


def write_index(releases_dir: Path, reports_dir: Path, policy=None) -> Path:
    """Regenerate ``index.html`` (written to a temporary file, then renamed into place); ``policy`` (default: the
    built-in budget policy) gives the caps the plots draw and where they stand now."""
    from transit_release.accounting.ledger import Ledger
    from transit_release.accounting.policy import load_budget_policy

    reports_dir.mkdir(parents=True, exist_ok=True)
    home = reports_dir.parent
    mlflow = mlflow_runs(home / "mlflow.db")
    command = f"{sys.executable} -m mlflow ui --backend-store-uri sqlite:///{home / 'mlflow.db'}"
    policy = policy or load_budget_policy()
    rows = collect_releases(releases_dir, reports_dir, mlflow)
    try:
        ledger = home / "ledger.sqlite"
        entries = Ledger(ledger, key=b"", read_only=True).entries() if ledger.is_file() and rows else []
    except Exception:  # noqa: BLE001 - the audit reports a ledger it cannot read; the index shows no standing
        entries = []
    page = render_index(rows, latest_audit(reports_dir), command, mlflow.get("", ""), audit_history(reports_dir),
                        policy, standing_lines(policy, entries, rows))
    tmp = reports_dir / f".{INDEX}.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, reports_dir / INDEX)
    return reports_dir / INDEX
