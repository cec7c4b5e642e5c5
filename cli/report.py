"""robfilt report: tables, figures and index.md from finished run folders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustbench_filters.core.parsing import parse_names

from ._common import JsonOpt, QuietOpt, console, print_json, setup_logging

FIGURE_FORMATS = ("pdf", "png", "svg")


def _formats(text: str, what: str, choices: tuple[str, ...]) -> list[str]:
    if text.strip().lower() == "none":
        return []
    return parse_names(text.lower(), what, list(choices))


def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders written by robfilt attack / lipschitz.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Report folder, e.g. reports/vision.")],
    format: Annotated[str, typer.Option("--format", help="Table formats: md,csv,tex (or none).")] = "md,csv,tex",
    figures: Annotated[str, typer.Option("--figures", help="Figure formats: pdf,png,svg (or none).")] = "pdf,png",
    allow_mixed: Annotated[
        bool,
        typer.Option("--allow-mixed", help="Accept runs made on different examples (no paired tests across them)."),
    ] = False,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Model the variants are compared with (default: deit / lm).")
    ] = None,
    html: Annotated[
        bool,
        typer.Option("--html", help="Also write index.html: one self-contained page, figures inline, sortable tables."),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Write into a folder that holds other files too (they are kept: robfilt removes only its own).",
        ),
    ] = False,
    paper: Annotated[
        bool,
        typer.Option(
            "--paper",
            help="Figures for a two-column paper: 3.3 or 6.9 in wide, no setting or source line inside them (both "
            "stay in index.md/html and figures/provenance.json).",
        ),
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write paper-ready tables and figures for finished runs, plus an index.md (and with --html an index.html).

    Tables: accuracy with 95% Wilson CIs, paired McNemar tests vs the baseline, perplexity, corruptions and
    Lipschitz bounds. Figures: accuracy vs eps, perplexity vs rate, Lipschitz profile, attention maps.
    """
    from robustbench_filters.report import build_report
    from robustbench_filters.report.render import FORMATS

    setup_logging(quiet, json_out)
    result = build_report(
        runs,
        out,
        formats=_formats(format, "table format", FORMATS),
        figures=_formats(figures, "figure format", FIGURE_FORMATS),
        allow_mixed=allow_mixed,
        baseline=baseline,
        html=html,
        overwrite=overwrite,
        paper=paper,
    )
    if json_out:
        print_json(result.to_dict())
        return
    c = console()
    c.print(f"report: {result.index}", markup=False)
    if result.html is not None:
        c.print(f"html: {result.html}", markup=False)
    c.print(f"{len(result.tables)} tables, {len(result.figures)} figures from {len(result.runs)} run(s)", markup=False)
    for note in result.notes:
        c.print(f"note: {note}", style="yellow", markup=False)
    for item in result.skipped:
        c.print(f"skipped {item}", style="dim", markup=False)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
