"""What every command that makes one run shares (attack, certify, lipschitz): its output options and its body.

A run command is its declarations (the config classes whose options it offers, :func:`._options.config_options`;
the output options, :func:`run_options`) and one call, a :class:`RunCommand`: set the threads before torch loads,
read and check the options into the command's config (refused in one line before anything heavy), start the
worker processes, run it through the API with a progress bar, then print the result and exit as its checks say.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
from ._options import OUTPUT_PANEL

if TYPE_CHECKING:
    from robustbench_filters.configs import RunConfig
    from robustbench_filters.summaries import Summary

#: the output options of a run command, in the order --help shows them (--out is the command's own: its default
#: differs)
OUTPUT_OPTIONS: dict[str, Any] = {
    "resume": (ResumeOpt, False),
    "overwrite": (OverwriteOpt, False),
    "allow_failed_checks": (AllowFailedOpt, False),
    "json_out": (JsonOpt, False),
    "quiet": (QuietOpt, False),
    "threads": (ThreadsOpt, None),
    "workers": (WorkersOpt, None),
}


def run_options(out_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a run command ``fn(**options)`` the output options: ``--out`` (``out_help`` says its default) and
    :data:`OUTPUT_OPTIONS`, after the options its signature already has."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        out = Annotated[str | None, typer.Option("--out", help=out_help, rich_help_panel=OUTPUT_PANEL)]
        added = [inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=out)]
        added += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, (annotation, default) in OUTPUT_OPTIONS.items()
        ]
        fn.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return fn

    return decorate


@dataclass(frozen=True)
class RunCommand:
    """One run command: its name (the default run folder is ``runs/<name>-<time>``; None: a temporary folder), how
    its config is built from the options given, which API function runs it (imported when called: ``--help`` loads
    no torch) and how its result is shown."""

    name: str
    config: Callable[[dict[str, Any]], RunConfig]
    api: Callable[[], Callable[..., Any]]
    render: Callable[[Summary, RunConfig], None]
    default_folder: bool = True
    folder_key: str = "out"  # the run folder's key in --json output

    def __call__(self, options: dict[str, Any]) -> None:
        out_given = options.pop("out")
        output = {name: options.pop(name) for name in OUTPUT_OPTIONS}
        setup_threads(output["threads"])  # first: before anything imports torch
        from robustbench_filters.configs import read
        from robustbench_filters.core.surface import Surface

        setup_logging(output["quiet"], output["json_out"])
        config = self.config(read(options, Surface.CLI))  # light: a bad reference is refused in < 1 s
        count = setup_workers(output["workers"], config.device)
        out = run_folder(out_given, self.name) if self.default_folder else out_given
        with worker_pool(count), progress_bar(output["quiet"] or output["json_out"]) as hook:
            result = self.api()(config=config, out=out, resume=output["resume"], overwrite=output["overwrite"],
                                progress=hook, workers=count)  # fmt: skip
        folder = getattr(result, "out", None) or getattr(result, "path", None)
        where = {self.folder_key: str(folder) if folder else None}
        show_run(result.summary, where, lambda s: self.render(s, config),
                 output["json_out"], output["allow_failed_checks"])  # fmt: skip


__all__ = ["OUTPUT_OPTIONS", "RunCommand", "run_options"]
