"""Shared CLI plumbing: consoles, JSON output, progress bars and option aliases."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from robustbench_filters.core.io import _json_default

if TYPE_CHECKING:
    from robustbench_filters.summaries import Summary

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or info logs.")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue a killed run in --out.", rich_help_panel="Output")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace the run in --out.", rich_help_panel="Output")]
#: the one declaration of --threads, on every computing command (robustbench_filters.core.threads explains the default)
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        help="CPU threads for torch in each process (default: OMP_NUM_THREADS, else one, so any --workers gives the "
        "same rows; waiting threads sleep instead of spinning, so a busy machine costs little extra CPU time: "
        "docs/scaling.md).",
        metavar="N",
        show_default=False,
    ),
]

#: the one declaration of --workers, on every command that makes runs (robustbench_filters.core.workers explains it)
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="Processes that compute the runs' units (default: ROBFILT_WORKERS, else the usable CPU cores; 1: this "
        "process alone). robfilt starts the others, one torch thread each unless --threads; the rows are the same "
        "for any number (docs/scaling.md).",
        metavar="N",
        show_default=False,
    ),
]


class StdoutClosed(Exception):
    """Whoever read robfilt's output stopped reading (``robfilt attack ... | head``): stop quietly."""


class _Stdout(Console):
    def on_broken_pipe(self) -> None:  # rich's own raises SystemExit(1), which robfilt reports as a user's exit
        self.quiet = True
        raise StdoutClosed


_stdout = _Stdout(highlight=False, soft_wrap=True)
if not _stdout.is_terminal:  # pipes and CI logs: wide enough for a four-model comparison table
    _stdout = _Stdout(highlight=False, soft_wrap=True, width=160)
_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def console() -> Console:
    return _stdout


def console_err(message: str) -> None:
    _stderr.print(message, style="red", markup=False, highlight=False)


def setup_threads(threads: int | None) -> None:
    """``--threads`` and the OpenMP wait policy, set before the command imports torch (see core.threads)."""
    from robustbench_filters.core.threads import configure_threads

    configure_threads(threads)


def setup_workers(workers: int | None, device: str = "cpu") -> int:
    """How many processes the command computes with: ``--workers``, else ROBFILT_WORKERS, else the usable cores
    (affinity and cgroup quotas) for CPU runs and 1 on a GPU; 1 under torchrun (its ranks are the processes).

    This process computes units too, with the threads every process gets
    (:func:`~robustbench_filters.core.workers.thread_count`: ``--threads``, else OMP_NUM_THREADS, else one), so
    ``--workers 1`` gives the rows any other count gives."""
    from robustbench_filters.core.threads import configure_threads
    from robustbench_filters.core.workers import default_count, resolve, thread_count

    count = resolve(workers, default=default_count() if str(device) == "cpu" else 1)
    if str(device) == "cpu":
        configure_threads(thread_count(count))
    return count


@contextmanager
def worker_pool(count: int) -> Iterator[None]:
    """The command's worker processes (``count`` - 1 of them), started at once: their imports (torch, the runner and
    the measurements, through the API that maps configs to them) overlap the command's own, which follow inside the
    block. Its runs find the pool open (``workers=`` of the API joins it) and it ends with the block."""
    from robustbench_filters.core.workers import pool

    with pool(count, warm=["robustbench_filters.runs.runner", "robustbench_filters.api.evaluate"]):
        yield


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


def distinct_paths(paths: list[Any], what: str) -> list[Any]:
    """A repeatable path option or argument refuses a path given twice (one rule for every list robfilt takes)."""
    from pathlib import Path

    from robustbench_filters.core.errors import RobfiltError

    seen: dict[Any, Any] = {}
    for p in paths:
        key = Path(p).resolve()
        if key in seen:
            raise RobfiltError(f"{what} {p} is given twice; give each folder once.")
        seen[key] = p
    return paths


AllowFailedOpt = Annotated[
    bool,
    typer.Option("--allow-failed-checks", help="Exit 0 even when a sanity check fails (the failure is still shown)."),
]
FAILED_CHECKS_EXIT = 3


def exit_for_checks(summary: Summary, allow_failed: bool) -> None:
    """A run whose sanity checks failed ends with exit code 3 (its numbers are unreliable), unless allowed."""
    failed = sum(c.status == "fail" for c in summary.sanity_checks())
    if failed and not allow_failed:
        console_err(
            f"error: {failed} sanity check(s) failed, so these numbers are unreliable (exit "
            f"{FAILED_CHECKS_EXIT}); fix the cause, or pass --allow-failed-checks to accept them."
        )
        raise typer.Exit(FAILED_CHECKS_EXIT)


def run_folder(out: str | None, command: str) -> Path:
    """``--out``, or ``runs/<command>-<time>`` when it is left out."""
    return Path(out) if out else Path("runs") / f"{command}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"


def show_run(
    summary: Summary, where: dict[str, Any], render: Callable[[Summary], None], json_out: bool, allow_failed: bool
) -> None:
    """Print a finished run on rank 0: one JSON object (``where`` and the summary), or the tables ``render`` draws and
    the run folder (``where``'s path, when there is one); then exit 3 when a sanity check failed, unless allowed."""
    if not is_primary():  # under torchrun, rank 0 alone prints the merged result
        return
    if json_out:
        print_json({**where, **summary.to_dict()})
    else:
        render(summary)
        folder = next(iter(where.values()), None)
        if folder is not None:
            console().print(f"run folder: {folder}", markup=False, style="dim")
    exit_for_checks(summary, allow_failed)


def is_primary() -> bool:
    """False on the non-zero ranks of a torchrun launch (they compute; rank 0 prints)."""
    from robustbench_filters.core.distributed import env_context

    return env_context().is_primary


SIGPIPE_EXIT = 141  # what a shell reports for a program ended by SIGPIPE


def torchrun_rank() -> int:
    """This process's rank under torchrun (``RANK``; 0 without torchrun), read without importing torch."""
    raw = os.environ.get("RANK", "").strip()
    return int(raw) if raw.isdigit() else 0


class JsonChannel:
    """Under ``--json`` stdout carries exactly one JSON document, whatever path the command ends by.

    :meth:`open` keeps the real stdout for JSON and points ``sys.stdout`` at stderr, so nothing else (a model's
    ``print``, a help page, a table) reaches it; :func:`print_json` writes the one document; :meth:`close` writes
    a fallback object (the exit code, and the error when there was one) when the command ended without one.
    Under torchrun every rank runs the command and their stdouts are joined: rank 0 alone writes the document
    (the merged result, or its error), the other ranks write nothing to stdout.
    """

    def __init__(self) -> None:
        self.stream: Any = None
        self.emitted = False
        self.primary = True
        self._saved: Any = None

    @property
    def active(self) -> bool:
        return self.stream is not None

    def open(self) -> None:
        self.stream, self.emitted, self._saved = sys.stdout, False, sys.stdout
        self.primary = torchrun_rank() == 0
        sys.stdout = sys.stderr

    def write(self, data: Any) -> None:
        """Write ``data`` as the one JSON document (a second one is dropped: the first already answered; so is
        any from a torchrun rank other than 0)."""
        stream = self.stream if self.active else sys.stdout
        if self.active and (self.emitted or not self.primary):
            return
        try:
            stream.write(json.dumps(data, indent=2, default=_json_default) + "\n")
            stream.flush()
        except BrokenPipeError:  # click would turn it into SystemExit(1), which reads like a user's exit
            raise StdoutClosed from None
        self.emitted = True

    def close(self, code: int, error: str | None = None) -> None:
        if not self.active:
            return
        try:
            if not self.emitted and code != SIGPIPE_EXIT:  # a reader that left gets nothing more
                payload: dict[str, Any] = {"exit_code": code}
                if error is not None:
                    payload = {"error": error, "exit_code": code}
                self.write(payload)
        except (StdoutClosed, OSError, ValueError):
            pass
        finally:
            sys.stdout = self._saved
            self.stream = self._saved = None


json_channel = JsonChannel()


def print_json(data: Any) -> None:
    json_channel.write(data)


class Pace:
    """The pace of one progress task, for its ETA: seconds left = steps left x seconds per step so far.

    A resumed run first ticks off the units it finished before, microseconds apart; counting those as work
    done would promise an ETA of seconds. So the pace is measured from the end of that first burst of updates
    (each arriving within :data:`BURST_S` of the end of the previous one, right after the start).
    """

    BURST_S = 0.002

    def __init__(self, completed: int, now: float) -> None:
        self.since, self.base, self.last, self.in_burst = now, completed, now, True

    def update(self, completed: int, now: float) -> None:
        """Record ``completed`` steps at time ``now`` (when the update arrived)."""
        if self.in_burst and now - self.last <= self.BURST_S:
            self.since, self.base = now, completed
        else:
            self.in_burst = False
        self.last = now

    def handled(self, now: float) -> None:
        """The update has been drawn: the next update's gap counts from here (drawing takes milliseconds)."""
        self.last = now

    def remaining_s(self, completed: int, total: int | None, now: float) -> float | None:
        """Seconds left, or None until a step has been timed."""
        if total is not None and completed >= total:
            return 0.0
        done, elapsed = completed - self.base, now - self.since
        if total is None or done <= 0 or elapsed <= 0:
            return None
        return (total - completed) * elapsed / done


class EtaColumn(ProgressColumn):
    """'eta 0:01:23' from the task's :class:`Pace`, ticking down between updates (rich's own estimate needs two
    timed updates within 30 s and counts a resumed run's finished units as speed)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock

    def render(self, task: Task) -> Text:
        pace = task.fields.get("pace")
        left = pace.remaining_s(int(task.completed), task.total, self.clock()) if pace else None
        if left is None:
            return Text("eta -:--:--", style="progress.remaining")
        minutes, seconds = divmod(round(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"eta {hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def progress_columns() -> tuple[ProgressColumn, ...]:
    """What a bar shows: task, bar, done/total steps, current model and part, elapsed time, ETA."""
    return (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        EtaColumn(),
        TextColumn("{task.fields[info]}", markup=False),
    )


def make_hook(bar: Progress, clock: Callable[[], float] = time.monotonic) -> Callable[..., None]:
    """The library's progress hook (``task, completed, total, info``) drawing on ``bar``, one line per task."""
    tasks: dict[str, tuple[TaskID, Pace]] = {}

    def hook(task: str, completed: int, total: int, info: str = "") -> None:
        now = clock()
        if task not in tasks:
            pace = Pace(completed, now)
            tasks[task] = bar.add_task(task, total=total, completed=completed, info=info, pace=pace), pace
        else:
            task_id, pace = tasks[task]
            pace.update(completed, now)
            bar.update(task_id, completed=completed, total=total, info=info)
        pace.handled(clock())

    return hook


@contextmanager
def progress_bar(quiet: bool) -> Iterator[Any]:
    """Yield a library progress hook: a rich bar on stderr when it is a terminal; plain log lines (at least one a
    minute, with an ETA) when it is not, so logs and CI output stay free of control characters; None when quiet."""
    if quiet:
        yield None
        return
    if not _stderr.is_terminal:
        from robustbench_filters.core.progress import LogProgress

        with LogProgress().heartbeat() as hook:
            yield hook
        return
    bar = Progress(*progress_columns(), console=_stderr, transient=False)
    with bar:
        yield make_hook(bar)
