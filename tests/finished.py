"""The one finished run folder that tests read (tests/conftest.py builds it once per test session).

A small image attack (deit, FGSM, 12 examples in 4 batches: 8 units) made by the CLI in the test process. Tests that
only read a finished run use ``finished_run``; tests that tamper with one, resume it or hold its lock work on
``finished_run_copy``, their own copy in ``tmp_path``. ``ARGS`` is its command, for a test that reruns or resumes it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ARGS = [
    "attack",
    "--model",
    "deit",
    "--attack",
    "fgsm",
    "--eps",
    "0.02",
    "--checkpoint",
    "none",
    "--n-examples",
    "12",
    "--batch-size",
    "3",
    "-q",
]  # fmt: skip  (8 units: 4 fgsm + 4 clean)


def digest(folder: Path) -> str:
    """One hash over every file's path and bytes: the shared folder must be the same at the end of the session."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
