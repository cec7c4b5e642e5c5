"""robfilt study: train, measure and judge the paper's claims; writes <out>/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import typer

from robustbench_filters.configs.options import Bool, Declared, Int, Paths, Text, cli_only
from robustbench_filters.core.surface import Surface

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
from ._options import config_options

_CLI_ONLY = "the study's own command (run_study and write_up in Python)"


def _study(default: Any, help: str, value: Any, **kwargs: Any) -> Any:
    return cli_only(default, help=help, why=_CLI_ONLY, value=value, panel="Study", **kwargs)


@dataclass(frozen=True)
class StudyCall(Declared):
    """One study: its budgets (full or quick, and the seeds), its folder, whether it continues or restarts, the
    checkpoints it may reuse, and whether it only redraws the write-up."""

    DESCRIPTION: ClassVar[str] = "study"

    quick: bool = _study(False, "Tiny budgets, 1 seed by default (~5 min): checks the pipeline, not claims.", Bool())
    seeds: int | None = _study(None, "Training seeds per model (default 3; 1 with --quick).", Int())
    out: str | None = _study(None, "Study folder (default reports/study, or reports/study-quick).", Text(path=True))
    resume: bool = _study(False, "Continue the study in --out; finished parts are kept.", Bool())
    overwrite: bool = _study(False, "Delete the study in --out first.", Bool())
    reuse: tuple[str, ...] = _study(
        (), "Also reuse checkpoints from this folder when their card matches (repeatable).", Paths()
    )
    write_up_only: bool = _study(
        False,
        "Only rewrite README, figures and results from the finished run folders (verified): no training or "
        "measuring, so a fresh clone redraws the committed study in seconds.",
        Bool(),
        flag="--write-up",
    )
    draw_figures: bool = _study(True, "Draw the reporter's figures.", Bool(), flag="--figures", negatable=True)


@config_options(StudyCall)
def study_cmd(
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    workers: WorkersOpt = None,
    **options: Any,
) -> None:
    """Train the 4 DeiT and 4 LM variants over several seeds (or reuse matching checkpoints), measure robustness,
    Lipschitz bounds and sequence-length growth, and write a README with a verdict per claim of the paper."""
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.configs import read
    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.study import full_plan, quick_plan, run_study, write_up

    setup_logging(quiet, json_out)
    call = StudyCall(**read(options, Surface.CLI))
    if call.seeds is not None and call.seeds < 1:
        raise RobfiltError(f"--seeds must be at least 1, got {call.seeds}.")
    if call.write_up_only and (call.overwrite or call.reuse):
        raise RobfiltError("--write-up only redraws a finished study; drop --overwrite and --reuse.")
    reuse = [Path(p) for p in distinct_paths(list(call.reuse), "--reuse")]
    plan = quick_plan(call.seeds or 1) if call.quick else full_plan(call.seeds or 3)
    out = Path(call.out or ("reports/study-quick" if call.quick else "reports/study"))
    if call.write_up_only:
        result = write_up(plan, out, report=call.draw_figures)
    else:
        with progress_bar(quiet or json_out) as hook:
            result = run_study(plan, out, resume=call.resume, overwrite=call.overwrite, reuse=reuse,
                               report=call.draw_figures, progress=hook, workers=setup_workers(workers))  # fmt: skip
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
