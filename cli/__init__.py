"""robfilt: the command line of robustbench_filters.

A thin typer layer: each command parses options, calls one typed library function and renders its result
object. Errors the user can fix are printed as one line (no traceback) with exit code 2.
"""

from __future__ import annotations

import json
import os
import sys

import typer

try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exc

from robustbench_filters.errors import RobfiltError, describe_os_error

from . import attack, certify, check, lipschitz, report, study, train, verify
from . import models as _models
from ._common import console_err

app = typer.Typer(
    name="robfilt",
    help="Measure whether BSA and boosting residuals make transformers more robust.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(_models.app, name="models")

for _command in (train, attack, lipschitz, certify, report, check, study, verify):  # each command lives in its own file
    _command.register(app)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; user errors become one line on stderr."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"] and check.CHILD_ENV not in os.environ and "--help" not in argv:
        return check.supervise(argv)
    json_mode = "--json" in argv

    def fail(message: str, code: int) -> int:
        """One line on stderr; under --json also a JSON object on stdout, so scripts always get JSON."""
        console_err(message)
        if json_mode:
            sys.stdout.write(json.dumps({"error": message.removeprefix("error: "), "exit_code": code}) + "\n")
        return code

    try:
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
    except OSError as exc:  # robfilt's own writes (errors inside a user's model arrive as UserCodeError)
        return fail(f"error: {describe_os_error(exc)}", 2)
    except KeyboardInterrupt:
        return fail("interrupted; continue with --resume", 130)
    except SystemExit as exc:  # raised by code robfilt ran (a user's model): never a silent success
        return fail(
            f"error: the command was ended by SystemExit({exc.code!r}) from code it ran; nothing was finished", 2
        )
    if result == 130:  # typer turns Ctrl-C inside a command into this return value (standalone_mode=False)
        return fail("interrupted; continue with --resume", 130)
    return int(result) if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
