"""Progress reporting without a UI dependency in the library.

Long library functions take an optional ``progress`` callback; the CLI turns it into a rich progress bar on a
terminal (silenced by ``--quiet``). When stderr is not a terminal (CI logs, ``nohup``, a pipe) the CLI uses
:class:`LogProgress` instead: plain log lines with the count, the elapsed time and an ETA, at least once a minute
however long a single step takes. The library itself only logs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

#: Seconds between progress lines when stderr is not a terminal: half a minute, so a line comes at least once a
#: minute even when a heartbeat lands just after a tick.
LOG_INTERVAL_S = 30.0


class ProgressHook(Protocol):
    def __call__(self, task: str, completed: int, total: int, info: str = "") -> None:
        """Report ``completed`` of ``total`` units of ``task``; ``info`` is a short status (e.g. the loss)."""


def null_progress(task: str, completed: int, total: int, info: str = "") -> None:
    """The default hook: does nothing."""


def clock_text(seconds: float) -> str:
    """``1:02:03`` (hours, minutes, seconds)."""
    minutes, secs = divmod(round(max(seconds, 0.0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


@dataclass
class _State:
    task: str
    total: int
    started: float  # when the task was first reported
    base: int  # steps already done then (a resumed run's finished units are no speed)
    completed: int = 0
    info: str = ""
    logged: float = 0.0  # when the last line was written


class LogProgress:
    """A progress hook that writes log lines: when a task starts and ends, and at least every ``interval`` seconds
    while it runs, each with done/total, the elapsed time, an ETA from the pace since the start, and ``info``.

    Steps that come faster are folded into the next line; :meth:`beat` (called by :meth:`heartbeat`'s thread, or
    by a test with an injected ``clock``) writes a line when a single step outlasts the interval.
    """

    def __init__(
        self, interval: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:  # fmt: skip
        self.interval, self.clock, self.log = interval, clock, logger or log
        self._state: _State | None = None
        self._lock = threading.Lock()

    def __call__(self, task: str, completed: int, total: int, info: str = "") -> None:
        now = self.clock()
        with self._lock:
            s = self._state
            if s is None or s.task != task:
                self._state = _State(task, total, now, completed, completed, info)
                self._line(self._state, now)
                return
            s.completed, s.total, s.info = completed, total, info
            if completed >= total or now - s.logged >= self.interval:
                self._line(s, now)

    def beat(self) -> None:
        """Write a line if a task is running and none was written for ``interval`` seconds."""
        now = self.clock()
        with self._lock:
            s = self._state
            if s is not None and s.completed < s.total and now - s.logged >= self.interval:
                self._line(s, now)

    def eta_s(self, s: _State, now: float) -> float | None:
        done, elapsed = s.completed - s.base, now - s.started
        if s.completed >= s.total:
            return 0.0
        return (s.total - s.completed) * elapsed / done if done > 0 and elapsed > 0 else None

    def _line(self, s: _State, now: float) -> None:
        s.logged = now
        share = f" ({100 * s.completed / s.total:.0f}%)" if s.total else ""
        eta = self.eta_s(s, now)
        when = f"{clock_text(now - s.started)} elapsed, eta {'-:--:--' if eta is None else clock_text(eta)}"
        info = f": {s.info}" if s.info else ""
        self.log.info("%s %d/%d%s, %s%s", s.task, s.completed, s.total, share, when, info)

    @contextmanager
    def heartbeat(self) -> Iterator[LogProgress]:
        """Run :meth:`beat` every ``interval`` seconds on a daemon thread while the block runs."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval):
                self.beat()

        thread = threading.Thread(target=loop, name="robfilt-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()


__all__ = ["LOG_INTERVAL_S", "LogProgress", "ProgressHook", "clock_text", "null_progress"]
