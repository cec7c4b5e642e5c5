"""Shared CLI plumbing: consoles, JSON output, progress bars and option aliases."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from robustbench_filters.io import _json_default

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or info logs.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed; same seed, same numbers.")]

_stdout = Console(highlight=False, soft_wrap=True)
if not _stdout.is_terminal:  # pipes and CI logs: wide enough for a four-model comparison table
    _stdout = Console(highlight=False, soft_wrap=True, width=160)
_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def console() -> Console:
    return _stdout


def console_err(message: str) -> None:
    _stderr.print(message, style="red", markup=False, highlight=False)


def setup_logging(quiet: bool, json_out: bool = False) -> None:
    """Library logs go to stderr; quiet (or JSON mode) keeps only warnings."""
    import warnings

    # third-party deprecation chatter (torch.jit.script inside dependencies) is not actionable for users
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=FutureWarning)
    level = logging.WARNING if (quiet or json_out) else logging.INFO
    root = logging.getLogger("robustbench_filters")
    root.handlers = [RichHandler(console=_stderr, show_path=False, show_time=False, markup=False)]
    root.setLevel(level)
    root.propagate = False


MODEL_HELP = (
    "Comma list of model references: registry names (deit-grc), timm:<arch>[?key=value&...], file.py:factory or "
    "pkg.mod:factory; name=ref sets the display name."
)


def parse_model_list(text: str) -> list[str]:
    """``--model`` split on commas outside brackets and quotes (model arguments may hold lists)."""
    from robustbench_filters.errors import RobfiltError
    from robustbench_filters.models.ref import split_model_list

    models = split_model_list(text)
    if not models or any(not m.strip() for m in models):
        raise RobfiltError(f"--model {text!r} has an empty item; give a comma-separated list like 'deit,deit-grc'.")
    return [m.strip() for m in models]


AllowFailedOpt = Annotated[
    bool,
    typer.Option("--allow-failed-checks", help="Exit 0 even when a sanity check fails (the failure is still shown)."),
]
FAILED_CHECKS_EXIT = 3


def exit_for_checks(summary: dict[str, Any], allow_failed: bool) -> None:
    """A run whose sanity checks failed ends with exit code 3 (its numbers are unreliable), unless allowed."""
    counts = summary.get("checks_summary") or {}
    if counts.get("fail", 0) and not allow_failed:
        console_err(
            f"error: {counts['fail']} sanity check(s) failed, so these numbers are unreliable (exit "
            f"{FAILED_CHECKS_EXIT}); fix the cause, or pass --allow-failed-checks to accept them."
        )
        raise typer.Exit(FAILED_CHECKS_EXIT)


def is_primary() -> bool:
    """False on the non-zero ranks of a torchrun launch (they compute; rank 0 prints)."""
    from robustbench_filters.distributed import env_context

    return env_context().is_primary


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default) + "\n")
    sys.stdout.flush()


@contextmanager
def progress_bar(quiet: bool) -> Iterator[Any]:
    """Yield a library progress hook backed by a rich bar (a no-op when quiet or not a terminal)."""
    if quiet or not _stderr.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_stderr,
        transient=False,
    )
    tasks: dict[str, int] = {}

    def hook(task: str, completed: int, total: int, info: str = "") -> None:
        if task not in tasks:
            tasks[task] = bar.add_task(task, total=total, info=info)
        bar.update(tasks[task], completed=completed, total=total, info=info)

    with bar:
        yield hook
