"""``index.html``: the whole report in one self-contained page (figures inline, sortable tables, no network).

The page is for reading a report in a browser or attaching it to a review: figures are inline SVG (as
``data:`` images, so their internal ids cannot clash), every table sorts by a column when its header is
clicked (a few lines of inline JavaScript; numbers sort as numbers, "85.2 [81.0, 88.7]" by its 85.2, "8/255" by
its value), and the run ids and every sanity check are listed, a failing check in red. A Content-Security-Policy
forbids any request: the page loads nothing from anywhere, so it renders the same offline and in ten years.

``#sort=<table id>:<column>:<asc|desc>`` in the address sorts a table on load (a link to a sorted view).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core.io import atomic_write_text

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2}

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1a1a1a}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:13px}
th,td{padding:.25em .7em;border-bottom:1px solid #e3e3e3;text-align:left;vertical-align:top}
thead th{border-bottom:2px solid #444;cursor:pointer;user-select:none;white-space:nowrap}
thead th::after{content:" \\2195";color:#aaa;font-size:.85em}
thead th[aria-sort=ascending]::after{content:" \\25B2";color:#333}
thead th[aria-sort=descending]::after{content:" \\25BC";color:#333}
td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
.caption{color:#444}.files{color:#666;font-size:12px}
.status-pass{color:#006b4f}.status-warn{color:#8a5a00;font-weight:600}
.status-fail{color:#b00020;font-weight:700}
.banner{padding:.5em .8em;border-radius:4px;margin:.6em 0}
.banner.ok{background:#e6f4ef;color:#004d39}.banner.bad{background:#fde7ea;color:#8a0018;font-weight:600}
code{font-size:12px}summary{cursor:pointer;color:#333;margin:.3em 0}
"""

# Sorting: numbers by value (first number in the cell, k/255 as a fraction), text alphabetically, blanks last.
SCRIPT = """
(function(){
  "use strict";
  window.addEventListener("error", function(e){ document.documentElement.dataset.jsError = String(e.message); });
  var NUM = /^\\s*(?:[<>]=?\\s*)?x?([+\\-\\u2212]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+\\-]?\\d+)?)(?:\\/(\\d+))?/;
  function key(text){
    var t = text.trim();
    if (t === "" || t === "-" || t === "\\u2013") { return null; }
    var m = NUM.exec(t);
    if (m) { var v = parseFloat(m[1].replace("\\u2212", "-")); return m[2] ? v / parseFloat(m[2]) : v; }
    return t.toLowerCase();
  }
  function compare(a, b){
    if (a === null) { return b === null ? 0 : 1; }
    if (b === null) { return -1; }
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    if (typeof a === "number") { return -1; }
    if (typeof b === "number") { return 1; }
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  function sortTable(table, col, dir){
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var keyed = rows.map(function(r, i){ return [key(r.cells[col] ? r.cells[col].textContent : ""), i, r]; });
    keyed.sort(function(x, y){
      var c = compare(x[0], y[0]);
      if (x[0] !== null && y[0] !== null && dir === "descending") { c = -c; }
      return c !== 0 ? c : x[1] - y[1];
    });
    keyed.forEach(function(k){ body.appendChild(k[2]); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function(th, i){
      if (i === col) { th.setAttribute("aria-sort", dir); } else { th.removeAttribute("aria-sort"); }
    });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function(table){
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function(th, i){
      th.setAttribute("role", "columnheader");
      th.tabIndex = 0;
      function go(){ sortTable(table, i, th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending"); }
      th.addEventListener("click", go);
      th.addEventListener("keydown", function(e){ if (e.key === "Enter") { go(); } });
    });
  });
  var m = /#sort=([\\w-]+):(\\d+):(asc|desc)/.exec(window.location.hash);
  if (m) {
    var t = document.getElementById(m[1]);
    if (t) { sortTable(t, parseInt(m[2], 10), m[3] === "asc" ? "ascending" : "descending"); }
  }
  document.documentElement.dataset.ready = String(tables.length);
})();
"""


@dataclass
class HtmlSection:
    """One table or figure of the report, as the page shows it."""

    title: str
    caption: str
    table_id: str | None = None
    table: pd.DataFrame | None = None
    svg: bytes | None = None
    files: list[str] = field(default_factory=list)  # paths relative to the page
    setting: str = ""  # a figure's n and threat model
    sources: list[str] = field(default_factory=list)  # the runs a figure was drawn from


@dataclass
class HtmlPage:
    runs: pd.DataFrame  # run id, kind, path, created, git commit
    checks: pd.DataFrame  # run id, model, check, status, detail
    sections: list[HtmlSection]
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    title: str = "robfilt report"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


_NUMERIC = re.compile(r"^\s*(?:[<>]=?\s*)?x?[+\-\u2212]?(?:\d|\.\d)")


def _numeric_column(values: pd.Series) -> bool:
    """A column whose every cell starts with a number (or is missing) is right-aligned."""
    cells = [str(v).strip() for v in values]
    present = [c for c in cells if c not in ("", "-", "nan")]
    return bool(present) and all(_NUMERIC.match(c) for c in present)


def table_html(table: pd.DataFrame, table_id: str, status_col: str | None = None) -> str:
    """A sortable table; numeric columns are right-aligned; a status column is coloured by its value."""
    if table.empty:
        return "<p><em>(empty)</em></p>"
    numeric = {c: i > 0 and _numeric_column(table[c]) for i, c in enumerate(table.columns)}
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in table.columns)
    rows = []
    for row in table.itertuples(index=False):
        cells = []
        for col, value in zip(table.columns, row, strict=True):
            cls = f"status-{_e(value)}" if col == status_col else ("num" if numeric[col] else "")
            cells.append(f'<td class="{cls}">{_e(value)}</td>' if cls else f"<td>{_e(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="sortable" id="{_e(table_id)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def checks_html(checks: pd.DataFrame) -> str:
    """A banner (all passed / how many failed), the failing and warning checks, then every check (folded)."""
    if checks.empty:
        return "<p>No sanity checks recorded by these runs (Lipschitz and sequence-length runs record none).</p>"
    status = checks["status"].astype(str)
    bad = int((status == "fail").sum())
    warn = int((status == "warn").sum())
    if bad:
        banner = (
            f'<p class="banner bad">{bad} of {len(checks)} sanity checks FAILED; treat those numbers as unreliable.</p>'
        )
    else:
        extra = f" ({warn} warning{'s' if warn != 1 else ''})" if warn else ""
        banner = f'<p class="banner ok">All {len(checks) - warn} of {len(checks)} sanity checks passed{extra}.</p>'
    ordered = checks.assign(_o=status.map(lambda s: STATUS_ORDER.get(s, 3))).sort_values("_o", kind="stable")
    ordered = ordered.drop(columns="_o")
    flagged = ordered[ordered["status"].astype(str) != "pass"]
    parts = [banner]
    if not flagged.empty:
        parts.append(table_html(flagged, "checks-flagged", status_col="status"))
    parts.append(
        f"<details><summary>All {len(checks)} checks</summary>"
        f"{table_html(ordered, 'checks', status_col='status')}</details>"
    )
    return "".join(parts)


def _display_width(svg: bytes, zoom: float = 1.45) -> int:
    """Screen width for a paper-sized SVG: its size in points, enlarged (paper fonts are 6-7 pt)."""
    m = re.search(rb'<svg[^>]*\swidth="([\d.]+)pt"', svg[:2000])
    points = float(m.group(1)) if m else 500.0
    return round(points * 4 / 3 * zoom)


def _section_html(s: HtmlSection) -> str:
    parts = [f"<h2>{_e(s.title)}</h2>", f'<p class="caption">{_e(s.caption)}</p>']
    if s.svg is not None:
        data = base64.b64encode(s.svg).decode("ascii")
        parts.append(
            f'<figure><img alt="{_e(s.title)}" style="width:{_display_width(s.svg)}px" '
            f'src="data:image/svg+xml;base64,{data}"></figure>'
        )
    if s.setting:
        parts.append(f'<p class="files">Setting: {_e(s.setting)}</p>')
    if s.sources:
        parts.append(f'<p class="files">Sources: {"; ".join(f"<code>{_e(x)}</code>" for x in s.sources)}</p>')
    if s.table is not None:
        parts.append(table_html(s.table, s.table_id or "table"))
    if s.files:
        links = ", ".join(f'<a href="{_e(f)}">{_e(f.rsplit(".", 1)[-1])}</a>' for f in s.files)
        parts.append(f'<p class="files">Files: {links}</p>')
    return "\n".join(parts)


def render_page(page: HtmlPage) -> str:
    """The page as one string (UTF-8, no external resources)."""
    when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    body = [
        f"<h1>{_e(page.title)}</h1>",
        f"<p>Generated {_e(when)} from {len(page.runs)} run(s). Numbers are recomputed from the per-example rows. "
        "Click a column header to sort.</p>",
        "<h2>Runs</h2>",
        table_html(page.runs, "runs"),
        "<h2>Sanity checks</h2>",
        checks_html(page.checks),
    ]
    if page.notes:
        body += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in page.notes) + "</ul>"]
    body += [_section_html(s) for s in page.sections]
    if page.skipped:
        body += ["<h2>Not included</h2>", "<ul>" + "".join(f"<li>{_e(s)}</li>" for s in page.skipped) + "</ul>"]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(page.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def write_page(path: Path, page: HtmlPage) -> Path:
    """Write the page atomically; returns its path."""
    return atomic_write_text(path, render_page(page))


def checks_frame(runs: Sequence) -> pd.DataFrame:
    """Every sanity check of every run (its summary's ``checks``): run id, model, check, status, detail."""
    rows = [
        {"run": r.run_id, "model": c.model, "check": c.name, "status": c.status, "detail": c.detail}
        for r in runs
        for c in r.summary.sanity_checks()
    ]
    return pd.DataFrame(rows, columns=["run", "model", "check", "status", "detail"])
