"""One writer per folder, enforced by the operating system (``flock``), not by PID files.

The lock is an advisory ``fcntl.flock`` on ``<folder>/.lock``. The kernel drops it when its process dies, however
it dies, so a lock file left behind (empty, garbled, from another host or a dead process) never blocks anyone: the
file's content is only a note for the error message. Two processes cannot both hold the lock: after ``flock``
succeeds the holder checks that the path still names the file it locked (a releasing holder unlinks it), and
retries otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from ..core.errors import RunStateError
from ..core.surface import flag

LOCK = ".lock"
_RETRIES = 5


class RunLock:
    """An exclusive, non-blocking lock on a folder; use :meth:`acquire`/:meth:`release` or ``with``."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / LOCK
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        for _ in range(_RETRIES):
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_note(fd)
                os.close(fd)
                raise RunStateError(
                    f"{self.path.parent} is being written by another robfilt process ({owner}); wait for it to "
                    f"finish or stop it (its lock is released the moment it exits), or use another {flag('out')}."
                ) from None
            if _same_file(fd, self.path):
                os.ftruncate(fd, 0)
                os.write(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode())
                self._fd = fd
                return
            os.close(fd)  # the holder released and unlinked it between our open and our flock: try again
        raise RunStateError(f"could not lock {self.path.parent}: the lock file keeps changing; retry.")

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # before unlocking, so a waiter never locks a file that is about to vanish
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(folder: str | Path) -> bool:
    """Whether another process holds ``folder``'s lock right now (a probe; takes and drops the lock)."""
    path = Path(folder) / LOCK
    if not path.exists():
        return False
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _read_note(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "no owner recorded"
