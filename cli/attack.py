"""robfilt attack: image attacks, language-model attacks and corruptions, on the same examples for every model."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Annotated, Any

import typer

from robustbench_filters.configs import CorruptionConfig, ImageAttackConfig, LMAttackConfig
from robustbench_filters.core.surface import Surface

from ._common import (
    AllowFailedOpt,
    JsonOpt,
    OverwriteOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    console,
    exit_for_checks,
    is_primary,
    print_json,
    progress_bar,
    setup_logging,
    setup_threads,
)
from ._options import OUTPUT_PANEL, config_options
from ._render import render_summary


@config_options(ImageAttackConfig, LMAttackConfig, CorruptionConfig, cli_defaults={"models": "deit-grc"})
def attack_cmd(
    out: Annotated[
        str | None,
        typer.Option("--out", help="Run folder (default: runs/attack-<time>).", rich_help_panel=OUTPUT_PANEL),
    ] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    allow_failed_checks: AllowFailedOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    **options: Any,
) -> None:
    """Attack one or more models on the same examples and print a checked comparison table.

    Image models: catalogue attacks over an eps grid, or corruptions. Language models: fgsm, pgd, wordswap.
    """
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.configs import attack_config_class, build, read

    setup_logging(quiet, json_out)
    given = read(options, Surface.CLI)
    config = build(attack_config_class(given["models"], given.get("attacks", ())), given)  # light: refused in < 1 s
    from robustbench_filters.api.evaluate import measurement_for
    from robustbench_filters.runs.runner import run

    out_dir = Path(out) if out else Path("runs") / f"attack-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    with progress_bar(quiet or json_out) as hook:
        result = run(measurement_for(config), out=out_dir, resume=resume, overwrite=overwrite, progress=hook)
    if not is_primary():  # under torchrun, rank 0 alone prints the merged result
        return
    if json_out:
        print_json({"out": str(result.out), **result.summary})
    else:
        render_summary(result.summary)
        console().print(f"run folder: {result.out}", markup=False, style="dim")
    exit_for_checks(result.summary, allow_failed_checks)


def register(app: typer.Typer) -> None:
    app.command("attack")(attack_cmd)
