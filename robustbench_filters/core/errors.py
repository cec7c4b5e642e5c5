"""User-facing errors.

Every error a user can cause by bad input is a :class:`RobfiltError`. Its message is one line that names the
problem and the fix; the CLI prints it without a traceback and exits with code 2 (``RegressionError`` uses 1).
Keeping the distinction in the type, not in string matching, lets library callers handle it too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .surface import switched


class RobfiltError(ValueError):
    """Bad input or state that the user can fix. ``exit_code`` is what the CLI returns."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # One line, always: multi-line errors get lost in CI logs. A file name that is not UTF-8 reaches messages
        # with its undecodable bytes as surrogates, which no terminal or log can write: they are shown escaped.
        super().__init__(printable(" ".join(str(message).split())))


def printable(text: str) -> str:
    """``text`` with the undecodable bytes of a non-UTF-8 file name (Python's surrogate escapes, raw or as ``repr``
    writes them) shown as ``\\xff``, so any stream can print it (the file is still named by its bytes)."""
    import re

    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return re.sub(r"\\udc([89a-f][0-9a-f])", r"\\x\1", text)


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


#: how autograd says that nothing it was asked to differentiate depends on a tensor that requires grad
NO_GRAD_PATH = "does not require grad and does not have a grad_fn"


class UserCodeError(RobfiltError):
    """An exception raised inside a user's code (a model's forward, a factory): one line, exit code 2."""

    @classmethod
    def wrap(cls, label: str, where: str, exc: BaseException, hint: str | None = None) -> UserCodeError:
        if isinstance(exc, RuntimeError) and NO_GRAD_PATH in str(exc):  # autograd found no path to the input
            return cls(
                f"no gradient reaches model {label}'s input in {where}: its forward detaches the images or computes "
                "without them (x.detach(), .item(), numpy, argmax), so gradient attacks cannot run; the model must "
                "change (resuming cannot help)."
            )
        if isinstance(exc, SystemExit):
            what = f"SystemExit({exc.code!r})"
        else:
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        hint = hint or f"fix it, then rerun with {switched('resume')}"
        return cls(f"model {label} raised {what} in {where}; {hint}.")


DISK_ERRNOS = {"ENOSPC": "no space left on the device", "EDQUOT": "the disk quota is exceeded"}
PERMISSION_ERRNOS = {
    "EACCES": "permission denied",
    "EPERM": "operation not permitted",
    "EROFS": "read-only file system",
}


def describe_os_error(exc: OSError) -> str:
    """One line for an OSError from robfilt's own file writes, classified by errno (not by guesswork)."""
    import errno as _errno

    name = _errno.errorcode.get(exc.errno or -1, "")
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    again = (
        f"then run the command again (a run that had started continues with {switched('resume')}: its finished "
        "parts are kept)"
    )
    if name in DISK_ERRNOS:
        return f"{DISK_ERRNOS[name]}{where}; free space, {again}"
    if name in PERMISSION_ERRNOS:
        return f"{PERMISSION_ERRNOS[name]}{where}; fix the permissions, {again}"
    label = f"{name}: " if name else ""
    return f"I/O error ({label}{exc.strerror or exc}){where}; fix the cause, {again}"
