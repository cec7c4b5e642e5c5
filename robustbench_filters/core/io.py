"""Atomic file writes: a temp file in the same folder, fsync, then rename.

A reader never sees a half-written file, and a crash (or a full disk) leaves the previous version intact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"


def non_utf8_path(path: str | Path) -> bool:
    """True when ``path`` holds bytes that are not UTF-8 (Python keeps them as surrogate escapes): the Parquet,
    safetensors and JSON writers robfilt uses cannot name such a file, so an output folder there is refused."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def expand_user(path: str | Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; a ``~user`` this machine does not know stays as written,
    as a shell leaves it (``Path.expanduser`` raises RuntimeError there, which would surface as a traceback)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


@contextlib.contextmanager
def no_empty_folder_on_failure(folder: str | Path) -> Iterator[None]:
    """Run the block; when it fails, remove ``folder`` and the parents it created, if they are still empty.

    A command refused half-way (bad data found after ``--out`` was taken, an interrupt) must leave no trace of its
    own: an empty ``--out`` left behind looks like a run that wrote nothing. Only folders that did not exist when
    the block began are removed, and only while empty, so nothing robfilt did not create is ever touched."""
    folder = Path(folder).absolute()
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        yield
    except BaseException:
        for path in created:
            try:
                path.rmdir()  # only when empty (and not a link or a file someone put there meanwhile)
            except OSError:
                break
        raise


def is_temp_of(name: str, target: str) -> bool:
    """Whether the file ``name`` is the temp file of an atomic write of ``target`` (left behind by a kill -9)."""
    return name.startswith(f".{target}.") and name.endswith(TEMP_SUFFIX)


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` and move the result onto ``path`` only if it succeeded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (weights and run parts can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    return atomic_write(path, write)


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def as_json(data: Any) -> Any:
    """``data`` as :func:`atomic_write_json` stores it and ``json.load`` reads it back (tuples become lists,
    numpy scalars plain numbers), so a value about to be written compares equal to the one already on disk."""
    return json.loads(json.dumps(data, default=_json_default))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "value"):
        return obj.value
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@contextlib.contextmanager
def kept_environment(names: Iterable[str]) -> Iterator[None]:
    """Put the environment variables ``names`` back as they were (set to their value, or unset) when the block
    ends: what a block sets for itself or for the processes it starts must not outlive it."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
