"""``release_reports/index.html``: every published release and the latest audit, on one page.

The reviewer's static view of past releases (MLflow's UI is the main, richer
one). Built only from what is already on disk under the home directory:
published manifests (``releases/<id>/manifest.json``), the small internal
summaries the flows leave next to their reports
(``release_reports/<id>/summary.json``), the newest audit's
``audit_summary.json`` and the audits' history (``audit_history.jsonl``). It is internal (it sits with the reports), but holds
nothing finer than the reports' own aggregates. Releases are listed newest
period first, then by id, whatever order the folders are read in.
"""

from __future__ import annotations

import html
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from transit_release import publish
from transit_release.audit import PERSON, unit_losses

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
    sort_key: str
    mechanism: str
    unit_of_privacy: str
    epsilon: float
    delta: float
    rows: int
    utility: str
    links: dict[str, str]  # label -> path relative to the index


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pct(x) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def _utility(kind: str, summary: dict | None) -> str:
    if not summary:
        return "—"
    if kind == "opal":
        return f"trips covered {_pct(summary.get('trip_coverage'))}"
    parts = []
    errors = sorted((k for k in summary if k.startswith("count_query.relative_error.max_q")),
                    key=lambda k: int(k.rsplit("max_q", 1)[1]))
    if errors:
        size = errors[0].rsplit("max_q", 1)[1]
        parts.append(f"count-query error (|Q| ≤ {size}) {_pct(summary[errors[0]])}")
    for key in sorted(k for k in summary if k.endswith(".top100.tp")):  # patterns, itemsets, grams, ...
        parts.append(f"top-100 {key.split('.')[0]} found {int(summary[key])}/100")
    return "; ".join(parts) or "—"


#: The MLflow experiment that holds the releases' own runs (``tasks.track.EXPERIMENT``; the ledger's anchor runs
#: and the audits' runs live in experiments of their own and are never a release's run).
RELEASE_EXPERIMENT = "transit-release"
#: A tag that marks a run as a release's own run, ``(key, value)``, once the tracking writes one; None: a release's
#: run is the top-level run of :data:`RELEASE_EXPERIMENT` named by its release id and tagged with it.
RELEASE_RUN_TAG: tuple[str, str] | None = None


def release_runs(mlflow_db: Path, run_tag: tuple[str, str] | None = RELEASE_RUN_TAG) -> dict[str, tuple[str, str]]:
    """``{release id: (experiment id, run id)}`` of each release's own MLflow run, read-only from the home's store
    (SQLite, no MLflow import); empty when there is no store yet or it cannot be read.

    A release's own run is an active top-level run of :data:`RELEASE_EXPERIMENT` whose name is the release id and
    whose ``release_id`` tag says the same (and, with ``run_tag``, carrying that tag): never a ledger anchor run
    (``transit-release-ledger``) or an audit run, which are tagged with release ids too. Of several (a failed
    publication's run, then the published one), the run tagged ``published = true`` wins, then the newest."""
    if not mlflow_db.is_file():
        return {}
    wanted = ("AND EXISTS (SELECT 1 FROM tags m WHERE m.run_uuid = r.run_uuid AND m.key = ? AND m.value = ?) "
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
            sort_key = manifest["period"]["end"]
        else:  # sequence releases made before periods were declared
            period = f"scope: {manifest.get('scope', '—')}"
            sort_key = manifest.get("created_at", "")[:10]
        mechanism = ("stability-based histogram" if kind == "opal"
                     else privacy.get("mechanism", "noisy prefix tree").split(" (")[0])
        rows_released = publish.rows_released(manifest.get("files", {}))
        report_dir = reports_dir / rid
        links = {"data card": os.path.relpath(d / "DATACARD.md", reports_dir),
                 "manifest": os.path.relpath(d / "manifest.json", reports_dir)}
        if (report_dir / "report.html").exists():
            links = {"report": f"{rid}/report.html", **links}
        for label, sub in (("Data Docs (raw)", "data_docs/raw/index.html"),
                           ("Data Docs (release)", "data_docs/release/index.html")):
            if (report_dir / sub).exists():
                links[label] = f"{rid}/{sub}"
        if (mlflow or {}).get(rid):
            links["MLflow run"] = mlflow[rid]
        rows.append(ReleaseRow(rid, kind, period, sort_key, mechanism, privacy.get("unit_of_privacy", "—"),
                               float(privacy.get("epsilon", 0.0)), float(privacy.get("delta", 0.0)),
                               rows_released, _utility(kind, _read_json(report_dir / SUMMARY)), links))
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
    """Append an audit's figures (and the folder its report was written to) to the history."""
    line = {"at": summary.get("at"), "folder": folder, "ok": summary["ok"], "entries": summary["entries"],
            "releases_published": summary["releases_published"], "discrepancies": summary["discrepancies"]}
    with open(reports_dir / AUDIT_HISTORY, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


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
            "discrepancies": len(result["discrepancies"]),
            "person": {p: {"bounded": x["bounded"], "epsilon": x["basic"]["epsilon"], "delta": x["basic"]["delta"],
                           "pld_epsilon": (x.get("pld") or {}).get("epsilon")}
                       for p, x in result["loss"].get(PERSON, {}).items()},
            "loss": {unit: {"epsilon": loss["basic"]["epsilon"], "delta": loss["basic"]["delta"],
                            "pld_epsilon": (loss.get("pld") or {}).get("epsilon")}
                     for unit, loss in unit_losses(result["loss"]).items()}}


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{white-space:nowrap;text-align:right}td.w{white-space:nowrap}.scroll{max-width:100%;overflow-x:auto}
.ok{color:#176117}.bad{color:#a31515}.note{color:#555;font-size:90%}"""


def render_index(rows: list[ReleaseRow], audit: tuple[str, dict] | None, mlflow_home: str = "",
                 mlflow_runs_view: str = "", history: list[dict] | None = None) -> str:
    """The page; ``mlflow_home`` (the ``mlflow ui`` command for the home) and ``mlflow_runs_view`` (the address of
    the releases' runs) add a line on how to open MLflow; ``history`` (newest first) lists the earlier audits."""
    def row_html(r: ReleaseRow) -> str:
        links = " · ".join(f'<a href="{html.escape(href)}">{html.escape(label)}</a>' for label, href in r.links.items())
        return (f'<tr class="release" data-release-id="{html.escape(r.release_id)}"><td class=w>{html.escape(r.release_id)}'
                f"</td><td>{html.escape(r.kind)}</td><td class=w>{html.escape(r.period)}</td><td>{html.escape(r.mechanism)}</td>"
                f"<td class=w>{html.escape(r.unit_of_privacy)}</td><td class=n>{r.epsilon:g}</td><td class=n>{r.delta:.3g}</td>"
                f"<td class=n>{r.rows:,}</td><td>{html.escape(r.utility)}</td><td>{links}</td></tr>")

    if audit is None:
        audit_html = "<p>No audit yet: run <code>transit-release audit</code>.</p>"
    else:
        name, s = audit
        status = '<b class="ok">PASSED</b>' if s["ok"] else '<b class="bad">FAILED</b>'
        people = "".join(f"<li>one passenger of population {html.escape(p)}: "
                         + (f"ε = {x['epsilon']:.4g}, δ = {x['delta']:.3g}" if x["bounded"] else
                            "<b>unbounded</b> (trip-level releases)")
                         + (f" (privacy-loss distributions: ε = {x['pld_epsilon']:.4g})"
                            if x["bounded"] and x.get("pld_epsilon") else "") + "</li>"
                         for p, x in s.get("person", {}).items())
        losses = people + "".join(f"<li>per {html.escape(u)}: ε = {x['epsilon']:g}, δ = {x['delta']:.3g}"
                         + (f" (privacy-loss distributions: ε = {x['pld_epsilon']:.4g})" if x.get("pld_epsilon")
                            else "") + "</li>" for u, x in s["loss"].items())
        audit_html = (f'<p id="latest-audit">{status} — {html.escape(name)}: {s["entries"]} ledger entries, '
                      f'{s["releases_published"]} published release(s), {s["discrepancies"]} discrepancy(ies). '
                      f'<a href="{html.escape(name)}/audit.html">Audit report</a></p><ul>{losses}</ul>')
    earlier = (history or [])[1:HISTORY_SHOWN + 1]
    if earlier:
        def history_row(a: dict) -> str:
            status = '<b class="ok">PASSED</b>' if a["ok"] else '<b class="bad">FAILED</b>'
            return (f"<tr><td class=w>{html.escape(str(a.get('at') or ''))}</td><td>{status}</td>"
                    f"<td class=n>{a['entries']}</td><td class=n>{a['releases_published']}</td>"
                    f"<td class=n>{a['discrepancies']}</td><td class=w>{html.escape(str(a.get('folder') or ''))}</td></tr>")
        audit_html += ('<h3>Earlier audits</h3><table id="audit-history"><thead><tr><th>at (UTC)</th><th>result</th>'
                       "<th>ledger entries</th><th>published releases</th><th>discrepancies</th><th>report folder "
                       "(a replaced one holds only its latest)</th></tr></thead><tbody>"
                       + "".join(history_row(a) for a in earlier) + "</tbody></table>")
    mlflow_html = ""
    if mlflow_runs_view:
        mlflow_html = (f'<p id="mlflow">MLflow: start its UI with <code>{html.escape(mlflow_home)}</code>, then open '
                       f'<a href="{html.escape(mlflow_runs_view)}">the releases\' runs</a> (each release\'s '
                       "<i>MLflow run</i> link opens its run).</p>")
    table = ("<div class=\"scroll\"><table id=\"releases\"><thead><tr><th>release</th><th>kind</th><th>period</th><th>mechanism</th>"
             "<th>unit of privacy</th><th>ε</th><th>δ</th><th>rows released</th><th>utility</th><th>links</th>"
             f"</tr></thead><tbody>{''.join(row_html(r) for r in rows)}</tbody></table></div>"
             if rows else "<p>No release published yet.</p>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>transit-release: past releases</title>
<style>{_CSS}</style></head><body>
<h1>Past releases</h1>
<p class="note">Internal page: utility figures compare released counts with true ones. The public files are the
data cards and the CSV/TXT files under <code>releases/</code>. MLflow's UI has every run's parameters and metrics.</p>
<h2>Latest privacy audit</h2>{audit_html}
<h2>Releases ({len(rows)})</h2>{mlflow_html}{table}
</body></html>"""


def write_index(releases_dir: Path, reports_dir: Path) -> Path:
    """Regenerate ``index.html`` (written to a temporary file, then renamed into place)."""
    reports_dir.mkdir(parents=True, exist_ok=True)
    home = reports_dir.parent
    mlflow = mlflow_runs(home / "mlflow.db")
    command = f"{sys.executable} -m mlflow ui --backend-store-uri sqlite:///{home / 'mlflow.db'}"
    page = render_index(collect_releases(releases_dir, reports_dir, mlflow), latest_audit(reports_dir),
                        command, mlflow.get("", ""), audit_history(reports_dir))
    tmp = reports_dir / f".{INDEX}.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, reports_dir / INDEX)
    return reports_dir / INDEX
