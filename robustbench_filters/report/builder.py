"""``build_report``: run folders in, a folder of tables, figures and an ``index.md`` (optionally ``index.html``) out.

Everything is recomputed from the per-example rows, so a report never disagrees with the runs it names, and
tables from several runs line up example by example. Items whose inputs are missing (no LM run, no per-layer
Lipschitz rows, ...) are skipped and listed in ``index.md`` with the reason, rather than failing the report.

With ``paper=True`` the figures carry no setting line and no source line (a paper's caption states them); both
stay in ``index.md``/``index.html`` and in ``figures/provenance.json``, which names every figure's runs and hashes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import RobfiltError, unknown
from ..runs.outfolder import OutputFolder, legacy_report_files
from . import figures as F
from . import render as R
from .assembly import ReportBuilder
from .index import ReportResult
from .runs import load_runs
from .sections_bounds import certify_section, lipschitz_section
from .sections_image import image_section
from .sections_lm import lm_section
from .verified import verified_section

log = logging.getLogger(__name__)


def _check_formats(values: Sequence[str], allowed: Sequence[str], what: str) -> tuple[str, ...]:
    values = tuple(v.strip().lower().lstrip(".") for v in ((values,) if isinstance(values, str) else values))
    for i, v in enumerate(values):
        if v not in allowed:
            raise unknown(what, v, allowed)
        if v in values[:i]:
            raise RobfiltError(f"{what} {v!r} is listed twice; list each format once.")
    return values


def build_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    formats: Sequence[str] = R.FORMATS,
    figures: Sequence[str] = F.FIGURE_FORMATS,
    allow_mixed: bool = False,
    *,
    baseline: str | None = None,
    attention: bool | None = None,
    html: bool = False,
    overwrite: bool = False,
    paper: bool = False,
) -> ReportResult:
    """Write tables, figures and ``index.md`` for the given run folders into ``out``.

    Args:
        run_dirs: finished run folders (attack, LM, Lipschitz, sequence-length study).
        out: report folder; created if needed. An earlier report there is replaced (its files only); a folder
            that is not a robfilt report, or holds files no report wrote, is refused unless ``overwrite``.
        formats: table formats, any of md, csv, tex (empty: no tables).
        figures: figure formats, any of pdf, png, svg (empty: no figures).
        allow_mixed: accept runs of one family made on different examples (then no paired tests across them).
        baseline: the model variants are compared with (default: deit / lm / the first model).
        attention: draw softmax-vs-BSA attention maps (default: when the image runs hold deit and deit-bsa).
        html: also write ``index.html``, one self-contained page with the figures inline and sortable tables.
        overwrite: write into a folder of other files too; they are kept (robfilt removes only files it wrote).
        paper: figures for a two-column paper: no setting or source line inside them (both stay in the index
            pages and ``figures/provenance.json``), one-column (3.3 in) or two-column (6.9 in) wide.
    """
    formats = _check_formats(formats, R.FORMATS, "table format")
    fig_formats = _check_formats(figures, ("pdf", "png", "svg"), "figure format")
    runset = load_runs(run_dirs, allow_mixed=allow_mixed)
    folder = OutputFolder(out, "report", overwrite=overwrite, legacy=legacy_report_files).open()
    builder = ReportBuilder(runset, folder, formats, fig_formats, html=html, paper=paper)
    image_section(builder, baseline, attention)
    lm_section(builder)
    lipschitz_section(builder)
    certify_section(builder)
    verified_section(builder)
    builder.checks_notes()
    builder.write_provenance()
    builder.index()
    if html:
        builder.index_html()
    builder.remove_stale()
    log.info(
        "report written to %s (%d tables, %d figures)", folder.out, len(builder.result.tables),
        len(builder.result.figures),
    )  # fmt: skip
    return builder.result
