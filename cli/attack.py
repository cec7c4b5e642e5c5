"""robfilt attack: image attacks, language-model attacks and corruptions, on the same examples for every model."""

from __future__ import annotations

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
    WorkersOpt,
    progress_bar,
    run_folder,
    setup_logging,
    setup_threads,
    setup_workers,
    show_run,
    worker_pool,
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
    workers: WorkersOpt = None,
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
    count = setup_workers(workers, config.device)
    with worker_pool(count, config), progress_bar(quiet or json_out) as hook:
        from robustbench_filters.api.evaluate import evaluate

        result = evaluate(config=config, out=run_folder(out, "attack"), resume=resume, overwrite=overwrite,  # type: ignore[arg-type]
                          progress=hook, workers=count)  # fmt: skip
    show_run(result.summary, {"out": str(result.out)}, render_summary, json_out, allow_failed_checks)


def register(app: typer.Typer) -> None:
    app.command("attack")(attack_cmd)
