"""Find the bundled data files and check them against ``assets/checksums.json`` before use.

Why check: a robustness number is only comparable across runs and machines if the examples are the same. A
truncated download, a bad merge or a hand-edited file would silently change the data, so every bundled file
is verified (sha256) the first time it is opened in a process, and a mismatch stops the run with a fix.
``scripts/build_assets.py`` regenerates the files and the checksum list.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..core.errors import ChecksumError, RobfiltError
from ..core.io import sha256_file as sha256_file  # re-exported: one file hash for assets and runs

log = logging.getLogger(__name__)

#: Folder of the bundled assets. Module-level (read on every call) so tests can point it at a copy.
ASSETS_DIR: Path = Path(__file__).resolve().parent.parent / "assets"
CHECKSUMS = "checksums.json"
_FIX = "reinstall robustbench-filters (pip install --force-reinstall robustbench-filters) or, in a checkout, run scripts/build_assets.py"

# (resolved path, size, mtime_ns) of files already verified in this process: hash each file once, not per load.
_verified: set[tuple[str, int, int]] = set()


def load_checksums(root: Path | None = None) -> dict[str, str]:
    """The recorded ``{relative path: sha256}`` of every bundled file."""
    root = ASSETS_DIR if root is None else root
    path = root / CHECKSUMS
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
        files = doc["files"]
    except FileNotFoundError:
        raise RobfiltError(f"bundled asset list {path} is missing; {_FIX}") from None
    except (ValueError, KeyError, TypeError):
        raise ChecksumError(f"bundled asset list {path} is corrupted; {_FIX}") from None
    if not isinstance(files, dict):
        raise ChecksumError(f"bundled asset list {path} is corrupted; {_FIX}")
    return {str(k): str(v) for k, v in files.items()}


def asset_path(name: str, verify: bool = True) -> Path:
    """Path of bundled file ``name`` (e.g. ``"fashion_mnist/test.npz"``), verified against its checksum.

    Raises :class:`RobfiltError` if the file is missing and :class:`ChecksumError` if its content differs.
    """
    root = ASSETS_DIR
    path = root / name
    if not path.is_file():
        raise RobfiltError(f"bundled asset {name!r} is missing from {root}; {_FIX}")
    if verify:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _verified:
            expected = load_checksums(root).get(name)
            if expected is None:
                raise ChecksumError(f"bundled asset {name!r} has no entry in {root / CHECKSUMS}; {_FIX}")
            actual = sha256_file(path)
            if actual != expected:
                raise ChecksumError(
                    f"bundled asset {path} is corrupted (sha256 {actual[:12]}..., expected {expected[:12]}...); {_FIX}"
                )
            _verified.add(key)
            log.debug("verified %s", path)
    return path


def verify_assets() -> dict[str, str]:
    """Verify every file listed in ``checksums.json`` (for a doctor/self-test command); returns the list."""
    sums = load_checksums()
    for name in sums:
        asset_path(name)
    return sums
