"""robfilt: the command line of robustbench_filters.

A thin typer layer: each command parses options, calls one typed library function and renders its result
object. Errors the user can fix are printed as one line (no traceback) with exit code 2.

Start-up is part of the interface: ``robfilt --help``, ``robfilt <command> --help``, ``--version`` and
``models list`` answer in a fraction of a second because nothing here (nor in the command modules) imports
torch, timm, torchattacks, pandas or matplotlib at module level; commands import the library when they run.
Commands in :data:`LAZY` are imported only when they run or show their own help (``robfilt --help`` lists them
by their summary), so a command module with heavy imports cannot slow the others down.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exc

from robustbench_filters.core.errors import RobfiltError, describe_os_error
from robustbench_filters.core.surface import Surface, surface
from robustbench_filters.core.threads import kept_threads
from robustbench_filters.core.versions import __version__

from . import attack, certify, lipschitz, report, study, train, verify
from . import models as _models
from ._common import SIGPIPE_EXIT, StdoutClosed, console_err, json_channel

HELP = "Measure whether BSA and boosting residuals make transformers more robust."
#: command -> (module, the first paragraph of its docstring: what ``robfilt --help`` shows without importing it)
LAZY: dict[str, tuple[str, str]] = {
    "check": (
        ".check",
        "Gate on robustness: fail (exit 1) when a metric misses its threshold or is significantly worse than a baseline.",
    ),
}
ORDER = ("train", "attack", "lipschitz", "certify", "report", "check", "study", "verify", "models")


class LazyGroup(TyperGroup):
    """The top-level group: imports a :data:`LAZY` command's module only when that command is needed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        known = [*self.commands, *(n for n in LAZY if n not in self.commands)]
        return sorted(known, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in LAZY:
            return command
        module, summary = LAZY[cmd_name]
        if self._listing:  # the group's own help lists the command by its summary
            return TyperCommand(name=cmd_name, help=summary)
        holder = typer.Typer()
        importlib.import_module(module, __name__).register(holder)
        command = typer.main.get_group(holder).commands[cmd_name]
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="robfilt",
    help=HELP,
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"robfilt {__version__}\n")
        raise typer.Exit(0)


@app.callback(help=HELP)
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", help="Print robfilt's version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    """The options before the command (--version)."""


app.add_typer(_models.app, name="models")

for _command in (train, attack, lipschitz, certify, report, study, verify):  # each command lives in its own file
    _command.register(app)


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not raise again (Python's note on SIGPIPE)."""
    stdout = json_channel.stream if json_channel.active else sys.stdout  # under --json sys.stdout is stderr
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stdout without a descriptor (tests)
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())


def _closed_pipe(exc: BaseException) -> bool:
    """True when ``exc`` was raised while handling a broken pipe (EPIPE)."""
    cause = exc.__context__
    return isinstance(cause, OSError) and cause.errno == errno.EPIPE


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; user errors become one line on stderr.

    Under ``--json`` stdout carries exactly one JSON document on every exit path (:class:`._common.JsonChannel`):
    the command's result, or ``{"error": ..., "exit_code": ...}``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"] and "--help" not in argv and "-h" not in argv:
        from . import check

        if check.CHILD_ENV not in os.environ:
            return check.supervise(argv)
    json_mode = "--json" in argv
    errors: list[str] = []

    def fail(message: str, code: int) -> int:
        """One line on stderr; under --json also a JSON object on stdout, so scripts always get JSON."""
        console_err(message)
        errors.append(message.removeprefix("error: "))
        return code

    if not json_mode:
        return _run(argv, fail)
    json_channel.open()
    code = 1
    try:
        code = _run(argv, fail, json_mode=True)
        return code
    finally:
        json_channel.close(code, errors[-1] if errors else None)


def _run(argv: list[str], fail: Any, json_mode: bool = False) -> int:
    try:
        # errors name options as flags (--n-examples, not n_examples); a run in-process leaves the caller's threads
        with surface(Surface.CLI), kept_threads():
            result = app(args=argv, prog_name="robfilt", standalone_mode=False)
    except typer.Exit as exc:
        if exc.exit_code == 130 and isinstance(exc.__cause__, KeyboardInterrupt):  # typer's own Ctrl-C handling
            return fail("interrupted; continue with --resume", 130)
        return int(exc.exit_code or 0)
    except typer.Abort:
        return fail("aborted", 130)
    except click_exc.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
            return 0
        message = " ".join(exc.format_message().split())
        return fail(f"error: {message} (see --help)", 2)
    except RobfiltError as exc:
        return fail(f"error: {exc}", exc.exit_code)
    except (StdoutClosed, BrokenPipeError):  # `robfilt ... | head`: the reader has all it wanted
        _discard_stdout()
        return SIGPIPE_EXIT
    except OSError as exc:  # robfilt's own writes (errors inside a user's model arrive as UserCodeError)
        with surface(Surface.CLI):
            return fail(f"error: {describe_os_error(exc)}", 2)
    except KeyboardInterrupt:
        return fail("interrupted; continue with --resume", 130)
    except SystemExit as exc:  # raised by code robfilt ran (a user's model): never a silent success
        if _closed_pipe(exc):  # click and rich (help pages) end with SystemExit(1) when stdout's reader left
            _discard_stdout()
            return SIGPIPE_EXIT
        return fail(
            f"error: the command was ended by SystemExit({exc.code!r}) from code it ran; nothing was finished", 2
        )
    except Exception as exc:  # a bug: the traceback goes to stderr, and a --json caller still gets its object
        if not json_mode:
            raise
        import traceback

        traceback.print_exc(file=sys.stderr)
        return fail(f"error: internal error ({type(exc).__name__}: {exc}); please report it with the traceback", 1)
    if result == 130:  # typer turns Ctrl-C inside a command into this return value (standalone_mode=False)
        return fail("interrupted; continue with --resume", 130)
    return int(result) if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
