"""robfilt report: tables, figures and index.md from finished run folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer

from robustbench_filters.configs.options import Bool, Declared, Text, cli_only
from robustbench_filters.core.parsing import parse_names
from robustbench_filters.core.surface import Surface

from ._common import JsonOpt, QuietOpt, console, print_json, setup_logging
from ._options import config_options

FIGURE_FORMATS = ("pdf", "png", "svg")


def _formats(text: str, what: str, choices: tuple[str, ...]) -> list[str]:
    if text.strip().lower() == "none":
        return []
    return parse_names(text.lower(), what, list(choices))


_CLI_ONLY = "the report's own command (build_report in Python)"


def _report(default: Any, help: str, value: Any, **kwargs: Any) -> Any:
    return cli_only(default, help=help, why=_CLI_ONLY, value=value, panel="Report", **kwargs)


@dataclass(frozen=True)
class ReportCall(Declared):
    """Where a report goes, in which table and figure formats, what it compares with and how it is laid out."""

    DESCRIPTION: ClassVar[str] = "report"

    out: str | None = _report(None, "Report folder, e.g. reports/vision.", Text(path=True), short="-o")
    format: str = _report("md,csv,tex", "Table formats: md,csv,tex (or none).", Text())
    figure_formats: str = _report("pdf,png", "Figure formats: pdf,png,svg (or none).", Text(), flag="--figures")
    allow_mixed: bool = _report(False, "Accept runs made on different examples (no paired tests across them).", Bool())
    baseline: str | None = _report(None, "Model the variants are compared with (default: deit / lm).", Text())
    html: bool = _report(
        False, "Also write index.html: one self-contained page, figures inline, sortable tables.", Bool()
    )
    overwrite: bool = _report(
        False, "Write into a folder that holds other files too (they are kept: robfilt removes only its own).", Bool()
    )
    paper: bool = _report(
        False,
        "Figures for a two-column paper: 3.3 or 6.9 in wide, no setting or source line inside them (both stay in "
        "index.md/html and figures/provenance.json).",
        Bool(),
    )


@config_options(ReportCall, required=("out",))
def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders written by robfilt attack / lipschitz.")],
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    **options: Any,
) -> None:
    """Write paper-ready tables and figures for finished runs, plus an index.md (and with --html an index.html).

    Tables: accuracy with 95% Wilson CIs, paired McNemar tests vs the baseline, perplexity, corruptions and
    Lipschitz bounds. Figures: accuracy vs eps, perplexity vs rate, Lipschitz profile, attention maps.
    """
    from robustbench_filters.configs import read
    from robustbench_filters.report import build_report
    from robustbench_filters.report.render import FORMATS

    setup_logging(quiet, json_out)
    call = ReportCall(**read(options, Surface.CLI))
    result = build_report(
        runs,
        Path(str(call.out)),
        formats=_formats(call.format, "table format", FORMATS),
        figures=_formats(call.figure_formats, "figure format", FIGURE_FORMATS),
        allow_mixed=call.allow_mixed,
        baseline=call.baseline,
        html=call.html,
        overwrite=call.overwrite,
        paper=call.paper,
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
