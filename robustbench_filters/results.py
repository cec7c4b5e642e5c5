"""Run folders: the one on-disk format every measurement uses.

A run folder holds

    manifest.json     full config, seed, versions, git commit, schema version, status
    parts/*.parquet   per-example rows, one file per finished unit of work (resume granularity)
    rows.parquet      all rows, merged when the run finishes
    summary.json      aggregates recomputed from the rows; written last, so its presence marks completion
    .lock             held while a process writes (pid + host); stale locks of dead processes are removed

Every write is atomic (temp file + rename). A killed run resumes from its last finished part and, because
units are deterministic functions of (config, seed, unit key), ends with the same numbers.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import RobfiltError, RunStateError
from .io import atomic_write, atomic_write_json
from .versions import git_commit, library_versions

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
ROWS = "rows.parquet"
PARTS = "parts"
LOCK = ".lock"


def fingerprint(config: dict[str, Any]) -> str:
    """A stable hash of a run's config: two runs with the same fingerprint compute the same rows."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock file; a second writer gets a clear error, a dead writer's lock is reclaimed."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self.held = False

    def acquire(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if self._reclaim_stale():
                    continue
                owner = self.path.read_text(errors="replace").strip() if self.path.exists() else "?"
                raise RunStateError(
                    f"{self.path.parent} is being written by another robfilt process ({owner}); "
                    "wait for it or use another --out."
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(f"pid={os.getpid()} host={socket.gethostname()}\n")
            self.held = True
            return

    def _reclaim_stale(self) -> bool:
        try:
            text = self.path.read_text()
            fields = dict(item.split("=", 1) for item in text.split())
            pid, host = int(fields["pid"]), fields["host"]
        except (OSError, ValueError, KeyError):
            return False
        if host == socket.gethostname() and not _pid_alive(pid):
            log.warning("removing stale lock of dead process %d in %s", pid, self.path.parent)
            self.path.unlink(missing_ok=True)
            return True
        return False

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _is_run_folder(folder: Path) -> bool:
    return (folder / MANIFEST).exists()


def prepare_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an output folder that already holds something, unless resuming or overwriting."""
    if not out.exists():
        return
    if not out.is_dir():
        raise RunStateError(f"--out {out} is a file; pass a folder path.")
    entries = [p for p in out.iterdir() if p.name != LOCK]
    if not entries or resume:
        return
    if overwrite:
        if not _is_run_folder(out):
            raise RunStateError(f"--out {out} is not a robfilt run folder; --overwrite only replaces runs.")
        return
    what = "a run" if _is_run_folder(out) else "other files"
    raise RunStateError(
        f"--out {out} already holds {what}; pass --resume to continue it, --overwrite, or another --out."
    )


def check_writable(out: Path) -> None:
    """Fail before any work if the output folder cannot be created or written."""
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise RunStateError(f"--out {out}: {probe} is a file, not a folder; pick a folder path.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunStateError(f"--out {out} is not writable ({probe} denies writes); pick a folder you can write.")


class RunWriter:
    """Writes one run folder; use as a context manager so the lock is always released.

    In a distributed run (see :mod:`.distributed`) rank 0's writer is the ``primary`` one: it alone takes the
    lock, applies --resume/--overwrite, writes the manifest and finishes the run. The other ranks' writers
    (``primary=False``) attach to the folder rank 0 prepared and only write their own part files.
    """

    def __init__(
        self,
        out: str | Path,
        kind: str,
        config: dict[str, Any],
        *,
        seed: int,
        resume: bool = False,
        overwrite: bool = False,
        extra: dict[str, Any] | None = None,
        primary: bool = True,
    ) -> None:
        self.out = Path(out)
        self.primary = primary
        self.kind = kind
        self.config = config
        self.seed = seed
        self.resume = resume
        self.overwrite = overwrite
        self.extra = extra or {}
        self.lock = RunLock(self.out)
        self.fp = fingerprint({"kind": kind, "seed": seed, **config})
        self._done: dict[str, Path] = {}

    def __enter__(self) -> RunWriter:
        if not self.primary:
            self._attach()
            return self
        check_writable(self.out)
        prepare_out(self.out, self.resume, self.overwrite)
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            self._open()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def _open(self) -> None:
        manifest_path = self.out / MANIFEST
        if manifest_path.exists() and self.resume:
            old = json.loads(manifest_path.read_text())
            if old.get("fingerprint") != self.fp:
                raise RunStateError(
                    f"--out {self.out} holds a different run (other config or seed); "
                    "use --overwrite to replace it or another --out."
                )
            parts = self.out / PARTS
            self._done = {p.stem: p for p in sorted(parts.glob("*.parquet"))} if parts.exists() else {}
            log.info("resuming %s: %d finished units", self.out, len(self._done))
            (self.out / SUMMARY).unlink(missing_ok=True)
        elif manifest_path.exists() and self.overwrite:
            for name in (PARTS,):
                shutil.rmtree(self.out / name, ignore_errors=True)
            for name in (ROWS, SUMMARY):
                (self.out / name).unlink(missing_ok=True)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "status": "running",
            "fingerprint": self.fp,
            "seed": self.seed,
            "config": self.config,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            **self.extra,
        }
        manifest["versions"] = library_versions()
        atomic_write_json(manifest_path, manifest)

    def _attach(self) -> None:
        """A secondary rank joins the folder rank 0 prepared: no lock, no manifest write, the same fingerprint."""
        manifest_path = self.out / MANIFEST
        if not manifest_path.exists():
            raise RunStateError(
                f"--out {self.out} has no {MANIFEST} on this node although rank 0 wrote it; distributed runs need "
                "--out on a filesystem that every rank shares."
            )
        if json.loads(manifest_path.read_text()).get("fingerprint") != self.fp:
            raise RunStateError(
                f"--out {self.out} holds a different run than this rank computes; give every rank the same options."
            )
        self.refresh()

    def refresh(self) -> None:
        """Re-read the finished parts from disk, including those other ranks wrote."""
        parts = self.out / PARTS
        self._done = {p.stem: p for p in sorted(parts.glob("*.parquet"))} if parts.exists() else {}

    def is_done(self, key: str) -> bool:
        return key in self._done

    def load_part(self, key: str) -> pd.DataFrame:
        return pd.read_parquet(self._done[key])

    def write_part(self, key: str, rows: pd.DataFrame) -> None:
        """Persist one finished unit of work atomically; resume skips it afterwards."""
        path = self.out / PARTS / f"{key}.parquet"
        atomic_write(path, lambda tmp: rows.to_parquet(tmp, index=False))
        self._done[key] = path

    def rows(self) -> pd.DataFrame:
        frames = [pd.read_parquet(p) for _, p in sorted(self._done.items())]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def finish(self, rows: pd.DataFrame, summary: dict[str, Any]) -> None:
        """Write the merged rows, then the summary, then mark the manifest complete."""
        if not self.primary:
            raise RunStateError("only rank 0 finishes a distributed run.")
        atomic_write(self.out / ROWS, lambda tmp: rows.to_parquet(tmp, index=False))
        atomic_write_json(self.out / SUMMARY, {"schema_version": SCHEMA_VERSION, "fingerprint": self.fp, **summary})
        manifest_path = self.out / MANIFEST
        manifest = json.loads(manifest_path.read_text())
        manifest["status"] = "complete"
        manifest["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        atomic_write_json(manifest_path, manifest)


@dataclass
class Run:
    """A finished run, as read back by reporters and checks."""

    path: Path
    manifest: dict[str, Any]
    rows: pd.DataFrame
    summary: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def run_id(self) -> str:
        return f"{self.path.name}@{self.manifest['fingerprint']}"


def load_run(path: str | Path) -> Run:
    """Read a finished run folder; refuse anything unfinished or not a run, with a clear message."""
    path = Path(path)
    if not (path / MANIFEST).exists():
        raise RobfiltError(f"{path} is not a robfilt run folder (no {MANIFEST}); pass a folder written by robfilt.")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except json.JSONDecodeError:
        raise RunStateError(f"{path}/{MANIFEST} is corrupted; re-run that command.") from None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise RunStateError(
            f"{path} has run schema {manifest.get('schema_version')}; this robfilt reads {SCHEMA_VERSION}."
        )
    if manifest.get("status") != "complete" or not (path / SUMMARY).exists() or not (path / ROWS).exists():
        raise RunStateError(f"{path} is an unfinished run; finish it with --resume before reading it.")
    summary = json.loads((path / SUMMARY).read_text())
    if summary.get("fingerprint") != manifest.get("fingerprint"):
        raise RunStateError(f"{path}: summary and manifest disagree; re-run with --overwrite.")
    rows = pd.read_parquet(path / ROWS)
    return Run(path=path, manifest=manifest, rows=rows, summary=summary)
