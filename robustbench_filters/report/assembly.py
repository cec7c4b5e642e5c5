"""The report being assembled: tables, figures, skipped items and notes in the order the index lists them.

:func:`~.builder.build_report` creates one and runs the family sections (``sections_*``) over it. Tables and figures
are written through the output folder, so an earlier report's files are replaced and no other file is touched, and
every figure's setting and sources go to ``figures/provenance.json`` whether or not the figure shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..runs.folder import Run
from ..runs.outfolder import OutputFolder
from . import figures as F
from . import index as I
from . import provenance as PV
from . import render as R
from .index import ReportResult
from .runs import RunSet

log = logging.getLogger(__name__)


class ReportBuilder:
    """The report being written: its tables, figures, skipped items and notes, and the index sections that list
    them in order. The family sections (``sections_*``) add to it; ``build_report`` runs them."""

    def __init__(
        self,
        runset: RunSet,
        folder: OutputFolder,
        formats: tuple[str, ...],
        fig_formats: tuple[str, ...],
        html: bool = False,
        paper: bool = False,
    ) -> None:
        out = folder.out
        self.rs, self.folder, self.out, self.html, self.paper = runset, folder, out, html, paper
        self.formats, self.fig_formats = formats, fig_formats
        self.provenance: dict[str, dict[str, Any]] = {}
        self.result = ReportResult(out=out, index=out / "index.md", runs=runset.ids(), notes=list(runset.notes))
        self.sections: list[I.Section] = []

    def table(self, name: str, title: str, caption: str, tidy: pd.DataFrame, layout: pd.DataFrame, family: str) -> None:
        if not self.formats:
            return
        sources = self.rs.ids(family)
        self.folder.paths(f"tables/{name}.{fmt}" for fmt in self.formats)
        paths = R.write_table(self.out / "tables", name, tidy, layout, caption, sources, self.formats)
        self.result.tables[name] = paths
        self.sections.append(I.Section(title, caption, table=name, inline=R.markdown(layout), layout=layout))

    def family_figure(
        self, family: str, name: str, title: str, caption: str | Callable[[Any], str], draw: Callable[..., Any],
        data: Any, subtitle: str,
    ) -> None:  # fmt: skip
        """A figure of one family's runs: ``draw(data, sources, subtitle, paper=...)`` (see :meth:`figure`)."""
        src = self.rs.ids(family)
        make = lambda paper: draw(data, src, subtitle, paper=paper)  # noqa: E731
        self.figure(name, title, caption, make, src, subtitle, self.rs.families[family])

    def figure(
        self,
        name: str,
        title: str,
        caption: str | Callable[[Any], str],
        make: Callable[[bool], Any],
        sources: Sequence[str],
        subtitle: str,
        runs: Sequence[Run],
    ) -> None:
        """Draw ``make(paper)``; a callable ``caption`` reads the drawn figure, so it names only what is there.

        The setting (``subtitle``) and ``sources`` go to the index pages and ``figures/provenance.json`` in both
        modes, since a paper figure does not show them.
        """
        if not self.fig_formats and not self.html:
            return
        fig = make(self.paper)
        text = caption(fig) if callable(caption) else caption
        files: list = []
        if self.fig_formats:
            self.folder.paths(f"figures/{name}.{fmt}" for fmt in self.fig_formats)
            files = F.save_figure(fig, self.out / "figures", name, self.fig_formats)
        if files:
            self.result.figures[name] = files
        self.provenance[name] = PV.provenance_entry(fig, title, text, subtitle, sources, runs, files, self.paper)
        svg = F.figure_bytes(fig, "svg") if self.html else None
        self.sections.append(I.Section(title, text, figure=name, svg=svg, setting=subtitle, sources=list(sources)))

    def skip(self, what: str, why: str) -> None:
        log.info("report: skipping %s (%s)", what, why)
        self.result.skipped.append(f"{what}: {why}")

    def write_provenance(self) -> None:
        """``figures/provenance.json``: each figure's setting, sources and runs (with hashes), whatever the mode.
        Without figures none is written, and the folder's finish removes an earlier report's."""
        if self.result.figures:
            self.folder.path(f"figures/{PV.PROVENANCE}")
            PV.write_provenance(self.out / "figures", self.provenance, True)

    def remove_stale(self) -> None:
        """Remove the files an earlier report listed and this one did not write, so index.md and the folder
        agree; files robfilt did not write are never touched (see :class:`~..runs.outfolder.OutputFolder`)."""
        for path in self.folder.finish():
            log.info("report: removed stale %s", path)

    # -- index ---------------------------------------------------------------------------------------------
    def checks_notes(self) -> None:
        for run in self.rs.runs:
            failed = [f"{c.model}: {c.name}" for c in run.summary.sanity_checks() if c.status == "fail"]
            if failed:
                self.result.notes.append(
                    f"run {run.run_id}: {len(failed)} sanity check(s) FAILED ({'; '.join(failed)}); "
                    "treat its numbers as unreliable."
                )

    def index(self) -> Path:
        self.folder.path("index.md")
        return I.write_markdown(self.result, self.rs.runs, self.sections)

    def index_html(self) -> Path:
        """The same report as one self-contained page (figures inline, sortable tables, every sanity check)."""
        self.folder.path("index.html")
        return I.write_html(self.result, self.rs.runs, self.sections)
