"""robfilt study: train, measure and judge the paper's claims; writes <out>/README.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    JsonOpt,
    QuietOpt,
    ThreadsOpt,
    WorkersOpt,
    console,
    distinct_paths,
    print_json,
    progress_bar,
    setup_logging,
    setup_threads,
    setup_workers,
)


def study_cmd(
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny budgets, 1 seed by default (~5 min): checks the pipeline, not claims.")
    ] = False,
    seeds: Annotated[
        int | None, typer.Option("--seeds", help="Training seeds per model (default 3; 1 with --quick).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Study folder (default reports/study, or reports/study-quick).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the study in --out; finished parts are kept.")
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Delete the study in --out first.")] = False,
    reuse: Annotated[
        list[Path] | None,
        typer.Option("--reuse", help="Also reuse checkpoints from this folder when their card matches (repeatable)."),
    ] = None,
    write_up_only: Annotated[
        bool,
        typer.Option(
            "--write-up",
            help="Only rewrite README, figures and results from the finished run folders (verified): no training "
            "or measuring, so a fresh clone redraws the committed study in seconds.",
        ),
    ] = False,
    figures: Annotated[bool, typer.Option("--figures/--no-figures", help="Draw the reporter's figures.")] = True,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Train the 4 DeiT and 4 LM variants over several seeds (or reuse matching checkpoints), measure robustness,
    Lipschitz bounds and sequence-length growth, and write a README with a verdict per claim of the paper."""
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.study import full_plan, quick_plan, run_study, write_up

    setup_logging(quiet, json_out)
    if seeds is not None and seeds < 1:
        raise RobfiltError(f"--seeds must be at least 1, got {seeds}.")
    if write_up_only and (overwrite or reuse):
        raise RobfiltError("--write-up only redraws a finished study; drop --overwrite and --reuse.")
    distinct_paths(reuse or [], "--reuse")
    plan = quick_plan(seeds or 1) if quick else full_plan(seeds or 3)
    out = out or Path("reports/study-quick" if quick else "reports/study")
    if write_up_only:
        result = write_up(plan, out, report=figures)
    else:
        with progress_bar(quiet or json_out) as hook:
            result = run_study(
                plan,
                out,
                resume=resume,
                overwrite=overwrite,
                reuse=reuse or [],
                report=figures,
                progress=hook,
                workers=setup_workers(workers),
            )
    if json_out:
        print_json(
            {
                "out": str(result.out),
                "readme": str(result.readme),
                "executed": result.executed,
                "finished_before": result.finished_before,
                "claims": [c.to_dict() for c in result.claims],
                "wall_time_s": round(result.wall_time_s, 1),
            }
        )
        return
    c = console()
    c.print(f"study: {result.readme}", markup=False)
    c.print(
        f"{len(result.executed)} piece(s) run, {len(result.finished_before)} already finished; "
        f"{result.wall_time_s / 60:.1f} min",
        markup=False,
    )
    for claim in result.claims:
        if claim.spec.primary:
            c.print(f"({claim.spec.id}) {claim.spec.claim} [{claim.spec.scope}]: {claim.verdict.value}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("study")(study_cmd)
