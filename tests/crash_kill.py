"""Helpers for the crash tests: start the CLI in a child process, stop it at a part count, compare finished runs.

Shared by tests/test_crash_safety.py and tests/test_crash_resume_kinds.py, so every kind of run is killed,
interrupted, resumed and compared the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


def cli(args: list[str]) -> subprocess.Popen:
    """``robfilt ARGS`` in a child process (one thread), stdout and stderr captured as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "robustbench_filters.cli", *args],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def finish(args: list[str], timeout: float = 600) -> None:
    """Run ``robfilt ARGS`` in a child process to the end; it must exit 0."""
    proc = cli(args)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err


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


def wait_for(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 300) -> None:
    """Poll until ``ready()``; fail if the process ends first or the point never comes."""
    start = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"process ended before the stop point (exit {proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() - start > timeout:
            proc.kill()
            proc.wait()
            pytest.fail("stop point never reached")
        time.sleep(0.02)


def wait_for_parts(proc: subprocess.Popen, out: Path, n: int = 1, timeout: float = 300) -> None:
    """Poll until ``out/parts`` holds at least ``n`` finished parts."""
    wait_for(proc, lambda: parts(out) >= n, timeout)


def stop(proc: subprocess.Popen, sig: signal.Signals, timeout: float = 120) -> tuple[int, str]:
    """Send ``sig`` and wait for the process to end; its exit code and stderr."""
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


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
    assert json.dumps(stable(a.summary), sort_keys=True, indent=1) == json.dumps(
        stable(b.summary), sort_keys=True, indent=1
    )
