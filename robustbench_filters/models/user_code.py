"""Running code robfilt does not own (a user's factory, a timm constructor) so that failures stay one line.

Whatever such code raises, including ``SystemExit`` from an ``argparse`` inside a factory, becomes a
:class:`RobfiltError` that names the model and the exception; only ``KeyboardInterrupt`` passes through, so
Ctrl-C still stops a run. The module search path is extended only for the duration of an import or a call.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import RobfiltError


def describe_exception(exc: BaseException) -> str:
    """``ValueError: first line of the message`` (``SystemExit`` as ``sys.exit(code)``)."""
    if isinstance(exc, SystemExit):
        return f"sys.exit({exc.code!r})"
    lines = str(exc).strip().splitlines()
    first = lines[0][:200] if lines else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@contextmanager
def user_code(label: str, what: str) -> Iterator[None]:
    """Turn every exception raised inside (but Ctrl-C) into one RobfiltError line about model ``label``."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, even SystemExit
        raise RobfiltError(f"model {label}: {what} failed with {describe_exception(exc)}.") from None


@contextmanager
def search_path(folders: Sequence[Path]) -> Iterator[None]:
    """Put ``folders`` first on ``sys.path`` while inside; afterwards remove exactly what was added."""
    added = [str(f) for f in folders if str(f) not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()  # files written since the last import (e.g. a spec's models.py) are seen
    try:
        yield
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)
