"""``index.html``: the public landing page of one release, a static page next to its files.

What was released (product, period, privacy statement, licence, publisher),
the files with their sizes, rows and SHA-256, the margins of error and the data
card rendered to HTML. Built from the manifest (public parameters), the data
card and the file list only: nothing internal (no quarantine counts, no
utility against true counts, no MLflow ids, no paths of the home). Every text is
HTML-escaped; the page loads nothing (no scripts, fonts or images) and is
readable from 320 px wide (long hashes wrap).

Run-specific values (sizes, rows, hashes, the creation time) sit in elements of
their own (``td.bytes``, ``td.rows``, ``code.sha256``, ``time.created``), so a
test can compare the pages of two neighbouring inputs outside them.

The data card is Markdown; :func:`markdown_to_html` renders the subset the data
cards use (headings, paragraphs, pipe tables, lists, block quotes, fenced code,
``**bold**``, ``*italic*`` and `` `code` ``), escaping everything first.
"""

from __future__ import annotations

import html
import re

from transit_release.opendata.datapackage import DATAPACKAGE
from transit_release.opendata.titles import release_title
from transit_release.opendata.uncertainty import UNCERTAINTY

LANDING = "index.html"
MANIFEST = "manifest.json"
DATACARD = "DATACARD.md"

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2125;background:#fff;line-height:1.5}
main{max-width:72rem;margin:0 auto;padding:1.5rem 1rem 3rem}
h1{font-size:1.7rem;margin:.2rem 0 .4rem;overflow-wrap:anywhere}
h2{font-size:1.3rem;margin-top:2.2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
h3{font-size:1.1rem}
p.product{font-size:1.1rem;margin-top:0}
dl.summary{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.3rem 1.2rem;margin:1rem 0}
dl.summary dt{font-weight:600}
dl.summary dd{margin:0;overflow-wrap:anywhere}
.table-wrap{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f3f5f7}
td.rows,td.bytes,table.files th,table.files td:first-child{white-space:nowrap}
td.rows,td.bytes{text-align:right}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.88em;background:#f3f5f7;padding:0 .2em;
 overflow-wrap:break-word}
code.sha256{word-break:break-all}
table.files td:last-child{min-width:17rem}
pre{background:#f3f5f7;padding:.6rem;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
blockquote{margin:.8rem 0;padding:.4rem .8rem;border-left:4px solid #c62828;background:#fdecea}
nav.toc a{margin-right:1rem}
footer{margin-top:2.5rem;font-size:.9rem;color:#57606a}
.card{max-width:100%}
"""

_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\*([^*\s][^*]*?)\*")


def _inline(text: str) -> str:
    """Inline Markdown of already-escaped text: `code`, **bold**, *italic*."""
    def sub(m: re.Match) -> str:
        if m.group(1) is not None:
            return f"<code>{m.group(1)}</code>"
        if m.group(2) is not None:
            return f"<strong>{_inline(m.group(2))}</strong>"
        return f"<em>{m.group(3)}</em>"
    return _INLINE.sub(sub, text)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_html(text: str, heading_offset: int = 1) -> str:
    """The data card's Markdown as HTML (see the module docstring for the subset); headings are shifted down by
    ``heading_offset`` levels (the page has its own ``h1``) and get ids from their text."""
    lines = html.escape(text, quote=False).split("\n")
    out: list[str] = []
    para: list[str] = []
    seen_ids: set[str] = set()

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(s.strip() for s in para))}</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            flush()
            i += 1
        elif stripped.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            out.append("<pre><code>" + "\n".join(lines[i + 1:j]) + "</code></pre>")
            i = j + 1
        elif re.match(r"#{1,6} ", stripped):
            flush()
            level, title = len(stripped.split(" ", 1)[0]), stripped.split(" ", 1)[1]
            slug = _slug(html.unescape(title))
            while slug in seen_ids:
                slug += "-2"
            seen_ids.add(slug)
            out.append(f'<h{min(6, level + heading_offset)} id="{slug}">{_inline(title)}'
                       f"</h{min(6, level + heading_offset)}>")
            i += 1
        elif stripped.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            flush()
            head = _cells(stripped)
            body = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                body.append(_cells(lines[j]))
                j += 1
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
            out.append('<div class="table-wrap"><table><thead><tr>' + "".join(f"<th>{_inline(c)}</th>" for c in head)
                       + f"</tr></thead><tbody>{rows}</tbody></table></div>")
            i = j
        elif re.match(r"[-*] ", stripped):
            flush()
            items = []
            j = i
            while j < len(lines) and re.match(r"[-*] ", lines[j].strip()):
                item = [lines[j].strip()[2:]]
                j += 1
                while j < len(lines) and lines[j].startswith("  ") and lines[j].strip() \
                        and not re.match(r"[-*] ", lines[j].strip()):
                    item.append(lines[j].strip())
                    j += 1
                items.append(" ".join(item))
            out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + "</ul>")
            i = j
        elif stripped.startswith("&gt; ") or stripped == "&gt;":
            flush()
            quote = []
            while i < len(lines) and lines[i].strip().startswith("&gt;"):
                quote.append(lines[i].strip()[4:].strip())
                i += 1
            out.append(f"<blockquote><p>{_inline(' '.join(quote))}</p></blockquote>")
        else:
            para.append(line)
            i += 1
    flush()
    return "\n".join(out)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


_WHAT = {"csv": "table (CSV)", "parquet": "table (Parquet)", "txt": "text, one record per line",
         "md": "data card (Markdown)", "json": "description (JSON)"}


def _file_rows(files: dict[str, dict], datapackage: dict | None) -> str:
    rows = []
    for name, meta in files.items():
        what = ("Frictionless Data Package: the files, their schemas and licence" if name == DATAPACKAGE
                else "margins of error of the counts" if name == UNCERTAINTY
                else _WHAT.get(name.rpartition(".")[2], "file"))
        n_rows = f"{int(meta['rows']):,}" if "rows" in meta else "—"
        e = html.escape
        rows.append(f'<tr><td><a href="{e(name)}">{e(name)}</a></td><td>{e(what)}</td><td class="rows">{n_rows}</td>'
                    f'<td class="bytes">{e(_size(int(meta["bytes"])))}</td>'
                    f'<td><code class="sha256">{e(meta["sha256"])}</code></td></tr>')
    rows.append(f'<tr><td><a href="{MANIFEST}">{MANIFEST}</a></td><td>manifest: every file\'s SHA-256, the '
                'parameters and the privacy statement</td><td class="rows">—</td><td class="bytes">—</td>'
                "<td>recorded on the privacy ledger at publication</td></tr>")
    return "\n".join(rows)


def _method_words(p: dict) -> str:
    """How the counts were made, in plain words (the manifest's ``mechanism`` names it for specialists; the
    data card below details it). Opal releases: the noise, the threshold and what one card or trip changes;
    other kinds: the mechanism's name and paper."""
    marginals = p.get("marginals")
    if not marginals:
        return str(p.get("mechanism", ""))
    paper = "stability-based histogram, Asghar, Tyler &amp; Kaafar 2018"
    bounds: dict[int, list[str]] = {}
    for m in marginals.values():
        if m.get("noise_bound") is not None:
            bounds.setdefault(int(m["noise_bound"]), [])
            if f"{m['file']}.csv" not in bounds[int(m["noise_bound"])]:
                bounds[int(m["noise_bound"])].append(f"{m['file']}.csv")
    if bounds and p.get("bounds"):
        at_most = ", ".join(f"± {a}{' taps' if i == 0 else ''} in {' and '.join(files)}"
                            for i, (a, files) in enumerate(bounds.items()))
        k, n = p["bounds"]["max_trips_per_partition"], p["bounds"]["max_partitions"]
        return (f"Each count got random noise of at most {at_most}, and was published only if it reached its "
                f"threshold ({paper}). One card adds at most {k} to any count, in at most {n} of the (mode, day) "
                "partitions.")
    return (f"Each count got random noise, and was published only if it reached its threshold ({paper}). "
            "Replacing one trip by another changes at most two counts, by 1 each.")


def _summary(manifest: dict) -> str:
    e = html.escape
    p = manifest.get("privacy") or {}
    period = manifest.get("period") or {}
    publication = manifest.get("publication") or {}
    licence = publication.get("licence") or {"title": manifest.get("licence", "CC BY 4.0"),
                                             "path": "https://creativecommons.org/licenses/by/4.0/"}
    publisher = publication.get("publisher") or {}
    items = [("Release", f"<code>{e(manifest['release_id'])}</code>")]
    if period:
        items.append(("Period", f"{e(period['start'])} to {e(period['end'])}"))
    if p:
        items.append(("Privacy", f"({p.get('epsilon', 0):g}, {p.get('delta', 0):.3g})-differential privacy for one "
                                 f"<strong>{e(str(p.get('unit_of_privacy', '—')))}</strong> "
                                 f"({e(str(p.get('neighbouring_relation', '')))})"))
        if p.get("mechanism"):
            items.append(("How", _method_words(p) if p.get("marginals") else e(p["mechanism"])))
        if p.get("population"):
            items.append(("Population", f"<code>{e(p['population'])}</code>"))
    items.append(("Licence", f'<a href="{e(licence["path"])}" rel="license">{e(licence["title"])}</a>'))
    if publisher:
        name = e(publisher["name"])
        items.append(("Publisher", f'<a href="{e(publisher["url"])}">{name}</a>' if publisher.get("url") else name))
    if manifest.get("created_at"):
        items.append(("Published", f'<time class="created">{e(manifest["created_at"])}</time>'))
    items.append(("Noise source", e(str(manifest.get("noise_source", "—")))))
    return "\n".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)


def render_landing(manifest: dict, datacard: str, datapackage: dict | None = None) -> str:
    """The page of the release whose manifest (with the files listed so far) and data card are given."""
    e = html.escape
    title = release_title(manifest)
    files = manifest.get("files", {})
    card_html = markdown_to_html(datacard, heading_offset=2)
    toc = ['<a href="#files">Files</a>']
    if "margins-of-error" in card_html:
        toc.append('<a href="#margins-of-error">Margins of error</a>')
    toc.append('<a href="#data-card">Data card</a>')
    test_banner = ("<blockquote><p><strong>TEST SEED: NOT PRIVATE.</strong> This release's noise came from the "
                   "test-only seed; never publish it.</p></blockquote>" if manifest.get("noise_source") == "test-seed"
                   else "")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title>
<link rel="describedby" type="application/json" href="{DATAPACKAGE}">
<style>{_CSS}</style>
</head>
<body>
<main>
<header>
<h1>{e(title)}</h1>
<p class="product">{e(manifest.get('product', ''))}</p>
{test_banner}
<dl class="summary">
{_summary(manifest)}
</dl>
<nav class="toc">{' '.join(toc)}</nav>
</header>
<section id="files">
<h2>Files</h2>
<div class="table-wrap"><table class="files">
<thead><tr><th>file</th><th>what</th><th>rows</th><th>size</th><th>SHA-256</th></tr></thead>
<tbody>
{_file_rows(files, datapackage)}
</tbody>
</table></div>
<p>Check a download with <code>sha256sum FILE</code> against the table above or <code>{MANIFEST}</code>.
Tools that read Frictionless Data Packages open <a href="{DATAPACKAGE}">{DATAPACKAGE}</a> directly.
Portals harvest every release from the catalogue <a href="../catalog.jsonld">catalog.jsonld</a> (DCAT).</p>
</section>
<section id="data-card" class="card">
<h2>Data card</h2>
{card_html}
</section>
<footer>Published with transit-release. Every figure on this page comes from the release's public files.</footer>
</main>
</body>
</html>
"""
