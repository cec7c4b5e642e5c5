"""The report's front pages: ``index.md`` (links the files) and, on request, a self-contained ``index.html``.

Both list the runs, the notes (failed sanity checks first among them), every table and figure in the order the
builder made them, and what was skipped with the reason, so the two pages never disagree with the folder.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.io import atomic_write_text
from ..runs.folder import Run
from ..runs.outfolder import REPORT_TITLE
from . import html as H

RUN_COLUMNS = ["run id", "kind", "path", "created", "git commit"]
TITLE = REPORT_TITLE


@dataclass
class ReportResult:
    """What ``build_report`` wrote: paths per table and figure, plus what it skipped and why."""

    out: Path
    index: Path
    runs: list[str]
    html: Path | None = None
    tables: dict[str, list[Path]] = field(default_factory=dict)
    figures: dict[str, list[Path]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "index": str(self.index),
            "html": str(self.html) if self.html else None,
            "runs": self.runs,
            "tables": {k: [str(p) for p in v] for k, v in self.tables.items()},
            "figures": {k: [str(p) for p in v] for k, v in self.figures.items()},
            "skipped": self.skipped,
            "notes": self.notes,
        }


@dataclass
class Section:
    """One table or figure of the report."""

    title: str
    caption: str
    table: str | None = None  # table name (stem)
    figure: str | None = None
    inline: str = ""  # Markdown layout shown in index.md
    layout: pd.DataFrame | None = None  # the same layout, for index.html
    svg: bytes | None = None  # the figure, for index.html
    setting: str = ""  # a figure's n and threat model (in the figure too, unless it is drawn for a paper)
    sources: list[str] = field(default_factory=list)  # the runs a figure was drawn from


def runs_frame(runs: Sequence[Run]) -> pd.DataFrame:
    rows = [
        [r.run_id, r.kind, str(r.path), r.manifest.get("created", "-"), str(r.manifest.get("git_commit") or "-")[:10]]
        for r in runs
    ]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def write_markdown(result: ReportResult, runs: Sequence[Run], sections: Sequence[Section]) -> Path:
    lines = [
        TITLE,
        "",
        f"Generated {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} from "
        f"{len(runs)} run(s). Numbers are recomputed from the per-example rows.",
        "",
        "## Runs",
        "",
        "| run id | kind | path | created | git commit |",
        "|:---|:---|:---|:---|:---|",
    ]
    for run_id, kind, path, created, commit in runs_frame(runs).itertuples(index=False):
        lines.append(f"| `{run_id}` | {kind} | `{path}` | {created} | `{commit}` |")
    if result.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result.notes]
    for s in sections:
        lines += ["", f"## {s.title}", "", s.caption, ""]
        if s.table:
            lines.append(s.inline.rstrip())
            links = ", ".join(f"[{p.suffix[1:]}](tables/{p.name})" for p in result.tables[s.table])
            lines += ["", f"Files: {links}"]
        if s.figure and result.figures.get(s.figure):
            paths = result.figures[s.figure]
            png = next((p for p in paths if p.suffix == ".png"), None)
            if png is not None:
                lines.append(f"![{s.title}](figures/{png.name})")
            links = ", ".join(f"[{p.suffix[1:]}](figures/{p.name})" for p in paths)
            lines += ["", f"Files: {links}"]
        if s.figure and (s.setting or s.sources):
            lines += ["", *provenance_lines(s.setting, s.sources)]
    if result.skipped:
        lines += ["", "## Not included", ""] + [f"- {s}" for s in result.skipped]
    return atomic_write_text(result.index, "\n".join(lines) + "\n")


def provenance_lines(setting: str, sources: Sequence[str]) -> list[str]:
    """'Setting: ...' and 'Sources: ...' under a figure (Markdown line breaks keep them on two lines)."""
    lines = [f"Setting: {setting}  "] if setting else []
    if sources:
        lines.append("Sources: " + "; ".join(f"`{s}`" for s in sources))
    return lines


def write_html(result: ReportResult, runs: Sequence[Run], sections: Sequence[Section]) -> Path:
    """``index.html`` next to ``index.md``; sets ``result.html``."""
    page_sections = []
    for s in sections:
        paths = result.tables.get(s.table, []) if s.table else result.figures.get(s.figure or "", [])
        files = [str(p.relative_to(result.out)) for p in paths]
        table_id = f"t-{s.table}" if s.table else None
        page_sections.append(
            H.HtmlSection(s.title, s.caption, table_id, s.layout, s.svg, files, setting=s.setting, sources=s.sources)
        )
    page = H.HtmlPage(runs_frame(runs), H.checks_frame(runs), page_sections, result.notes, result.skipped)
    result.html = H.write_page(result.out / "index.html", page)
    return result.html
