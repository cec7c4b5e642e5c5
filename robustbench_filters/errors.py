"""User-facing errors.

Every error a user can cause by bad input is a :class:`RobfiltError`. Its message is one line that names the
problem and the fix; the CLI prints it without a traceback and exits with code 2 (``RegressionError`` uses 1).
Keeping the distinction in the type, not in string matching, lets library callers handle it too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RobfiltError(ValueError):
    """Bad input or state that the user can fix. ``exit_code`` is what the CLI returns."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # One line, always: multi-line errors get lost in CI logs.
        super().__init__(" ".join(str(message).split()))


class ChecksumError(RobfiltError):
    """A bundled or cached file does not match its recorded checksum."""


class CheckpointError(RobfiltError):
    """A checkpoint or card is missing, corrupted, unsafe or made for another model."""


class RunStateError(RobfiltError):
    """A run folder is locked, unfinished, or holds a different run."""


class RegressionError(RobfiltError):
    """A robustness regression found by ``robfilt check`` (exit code 1, not a usage error)."""

    exit_code = 1


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return a ' Did you mean ...?' hint for a misspelt name, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> RobfiltError:
    """The standard error for an unknown name: lists close matches, else all choices."""
    choices = sorted(set(choices))
    hint = suggest(name, choices)
    if not hint:
        hint = f" Choose one of: {', '.join(choices)}."
    return RobfiltError(f"unknown {kind} {name!r}.{hint}")
