"""Helpers for the crash tests: start the CLI in a child process, stop it at a point it reports, compare finished runs.

Shared by tests/test_crash_safety.py, tests/test_crash_resume_kinds.py and tests/test_integrity.py, so every kind of
run is killed, interrupted, resumed and compared the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pytest
import torch

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
INTERRUPTED = "interrupted; continue with --resume"
# Summary fields that may legitimately differ between two runs of one command (timing, host). No run summary holds
# one today; they are listed (not pattern-matched) so a new non-deterministic field cannot hide behind a pattern.
VOLATILE = frozenset({"wall_s", "certify_wall_s", "samples_per_s", "host", "hostname", "created", "finished"})


def default_sigint() -> None:
    """In the child before exec: Ctrl-C delivered as a terminal delivers it. A test runner started in the background
    (``make test &``) has SIGINT ignored, children inherit that, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread, as in the child processes (OMP_NUM_THREADS=1), so in-process numbers match theirs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def finish_here(args: list[str]) -> None:
    """Run ``robfilt ARGS`` in this process (saves a child's start-up); it must exit 0."""
    from robustbench_filters.cli import run

    with one_thread():
        assert run(args) == 0


def parts(out: Path) -> int:
    """Finished part files in ``out`` (atomic-write temp files start with a dot and do not count)."""
    folder = out / "parts"
    return len([p for p in folder.glob("*.parquet") if not p.name.startswith(".")]) if folder.exists() else 0


# Runs in the child instead of ``python -m robustbench_filters.cli``: the CLI with os.chmod, os.replace and os.rename
# watched (the library's atomic write makes a temp file, chmods it, then replaces the target with it; a training state
# lands by a rename). Right after the n-th call on a path matching PATTERN (relative to OUT; the target of a replace
# or rename, the file of a chmod), the child writes a byte to the REPORT pipe and blocks reading the HOLD pipe: the
# test then signals it at exactly that point, on a machine of any speed, with no polling and no sleep.
_PAUSE_CHILD = r"""
import fnmatch, os, sys

report, hold, out, pattern, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
seen = 0


def watched(call, which):
    def wrapper(*args, **kwargs):
        global seen
        result = call(*args, **kwargs)
        if fnmatch.fnmatchcase(os.path.relpath(os.fspath(args[which]), out), pattern):
            seen += 1
            if seen == n:
                os.write(report, b"!")
                os.read(hold, 1)  # the test signals us here (or closes the pipe to let us go on)
        return result

    return wrapper


os.chmod, os.replace, os.rename = watched(os.chmod, 0), watched(os.replace, 1), watched(os.rename, 1)
sys.argv = ["robfilt", *sys.argv[6:]]
from robustbench_filters.cli import main

main()
"""


class Paused:
    """A ``robfilt`` child held still at a point it reported; :meth:`stop` signals it there."""

    def __init__(self, proc: subprocess.Popen, hold: int, err: IO[str]) -> None:
        self.proc, self._hold, self._err = proc, hold, err

    def stop(self, sig: signal.Signals) -> tuple[int, str]:
        """Send ``sig`` while the child waits, then wait for it to end; its exit code and stderr."""
        self.proc.send_signal(sig)
        return self._end()

    def _end(self) -> tuple[int, str]:
        code = self.proc.wait()
        os.close(self._hold)  # only now: closing it earlier would let the child run on before the signal lands
        self._err.seek(0)
        return code, self._err.read()


@contextlib.contextmanager
def paused_at(args: list[str], out: Path, pattern: str, n: int) -> Iterator[Paused]:
    """Start ``robfilt ARGS`` and return once the ``n``-th path matching ``pattern`` (relative to ``out``: a part
    ``parts/*.parquet``, its record ``parts/*.json``, a finished temp file ``parts/.*.tmp`` about to replace one) has
    landed in it; the child waits there until the test signals it. It fails the test if the child ends before that
    point. Its stderr goes to a file (stdout is dropped), so it can never block on a full pipe while the test waits."""
    report_r, report_w = os.pipe()
    hold_r, hold_w = os.pipe()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _PAUSE_CHILD, str(report_w), str(hold_r), str(out), pattern, str(n), *args],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            pass_fds=(report_w, hold_r),
            preexec_fn=default_sigint,
        )
        os.close(report_w)
        os.close(hold_r)
        child = Paused(proc, hold_w, err)
        try:
            try:
                reached = os.read(report_r, 1)  # blocks until the child is there, or b"" once it has ended
            finally:
                os.close(report_r)
            if not reached:
                code, text = child._end()
                pytest.fail(f"the child ended (exit {code}) before {n} x {pattern} landed in {out}: {text[-2000:]}")
            yield child
        finally:
            if proc.returncode is None:  # the test failed before stopping it
                proc.kill()
                child._end()


def stable(summary: Any) -> Any:
    """``summary`` without the :data:`VOLATILE` fields, at any depth."""
    if isinstance(summary, dict):
        return {k: stable(v) for k, v in summary.items() if k not in VOLATILE}
    if isinstance(summary, list):
        return [stable(v) for v in summary]
    return summary


def assert_same_run(reference: Path, other: Path) -> None:
    """Both folders verify, and hold bit-identical parts, exactly equal rows and the same summary."""
    from robustbench_filters.runs.folder import load_run

    a, b = load_run(reference), load_run(other)
    pd.testing.assert_frame_equal(a.rows, b.rows, check_exact=True)
    assert a.manifest["parts"] == b.manifest["parts"]  # every unit's bytes, not just the merge
    # through JSON text so NaN equals NaN (it is never == itself in a dict comparison)
    assert json.dumps(stable(a.summary.to_dict()), sort_keys=True, indent=1) == json.dumps(
        stable(b.summary.to_dict()), sort_keys=True, indent=1
    )
