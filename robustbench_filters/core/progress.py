"""Progress reporting without a UI dependency in the library.

Long library functions take an optional ``progress`` callback; the CLI turns it into a rich progress bar
(silenced by ``--quiet`` or when stdout is not a terminal). The library itself only logs.
"""

from __future__ import annotations

from typing import Protocol


class ProgressHook(Protocol):
    def __call__(self, task: str, completed: int, total: int, info: str = "") -> None:
        """Report ``completed`` of ``total`` units of ``task``; ``info`` is a short status (e.g. the loss)."""


def null_progress(task: str, completed: int, total: int, info: str = "") -> None:
    """The default hook: does nothing."""
