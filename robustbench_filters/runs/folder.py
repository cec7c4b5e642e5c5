"""Run folders: the one on-disk format every measurement writes, and the checks that make it tamper-evident.

A run folder holds

    manifest.json        format version, kind, fingerprint, config, planned units, versions, git commit, status;
                         when the run ends also the sha256 of every part, every adversarial file,
                         rows.parquet and summary.json
    parts/<key>.parquet  the rows of one finished unit of work (the resume granularity)
    parts/<key>.json     that part's sha256 (and its adversarial file's) and the fingerprint of the run it belongs to
    adversarial/<key>.safetensors
                         with ``--save-adversarial``: the adversarial examples of one attack unit, beside its part
                         (layout: :mod:`.adversarial`)
    rows.parquet         all rows, merged in plan order when the run finishes
    summary.json         aggregates recomputed from the rows; written last
    .lock                an OS-level lock held while a process writes (see :mod:`.lock`)

Every write is atomic (temp file + rename). A part counts as finished only when its sidecar records its hash
and this run's fingerprint: ``--resume`` recomputes a unit whose part is missing, and refuses (one line, nothing
touched) a part that was edited, belongs to another run, or to no planned unit. A unit's adversarial file is
written before its part's sidecar, which records its hash too: the unit counts as finished only when both verify
(a missing one is recomputed, an edited one refused). Readers (:func:`load_run`, :mod:`.adversarial`) verify the
recorded hashes before they trust a single number or tensor.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..core import io as _io
from ..core.errors import RobfiltError, RunStateError
from ..core.surface import flag, switched
from ..core.versions import git_commit, library_versions
from ..summaries import Summary, check_summary_type, read_summary, report_family
from ..summaries.base import READABLE, VERSION
from . import adversarial as _adv
from .fingerprint import describe_change, fingerprint, manifest_fingerprint
from .lock import LOCK, RunLock
from .prepare import check_writable, prepare_out

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

FORMAT = "robfilt-run"
FORMAT_VERSION = VERSION  # 3: summaries record the budgets used as values (2: as prose); both read
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
ROWS = "rows.parquet"
PARTS = "parts"


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder``; one-line errors for a missing, garbled or foreign file."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise RobfiltError(
            f"{folder} is not a robfilt run folder (no {MANIFEST}); pass a folder robfilt wrote."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RunStateError(
            f"{path} is corrupted (not JSON); re-run that command with {switched('overwrite')}."
        ) from None
    if not isinstance(manifest, dict) or ("format" not in manifest and "kind" not in manifest):
        raise RunStateError(f"{path} is not a robfilt run manifest; pass a folder robfilt wrote.")
    if not isinstance(manifest.get("kind"), str) or not manifest["kind"]:
        raise RunStateError(f"run folder {folder} records no kind in its manifest; re-run it with this robfilt.")
    version = manifest.get("format_version", manifest.get("schema_version"))
    if version not in READABLE:
        raise RunStateError(
            f"{folder} is a run folder of format {version}; this robfilt reads formats "
            f"{', '.join(str(v) for v in READABLE)} (they record integrity hashes): re-run the command with "
            f"{switched('overwrite')} to rewrite it."
        )
    return manifest


class RunWriter:
    """Writes one run folder; use as a context manager so the lock is always released.

    ``units`` (planned unit keys, from the runner) makes the folder self-checking: only planned parts are
    written or accepted. In a distributed run rank 0's writer is the ``primary``: it alone takes the lock,
    applies --resume/--overwrite, writes the manifest and finishes. Other ranks attach and write their parts.
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
        units: Sequence[str] | None = None,
    ) -> None:
        self.out = Path(out)
        self.kind, self.config, self.seed = kind, config, seed
        self.resume, self.overwrite, self.primary = resume, overwrite, primary
        self.extra = extra or {}
        self.units = list(units) if units is not None else None
        self._planned = set(self.units) if self.units is not None else None
        self.lock = RunLock(self.out)
        self.fp = fingerprint({"kind": kind, "seed": seed, **config})
        self._done: dict[str, str] = {}  # key -> sha256 of its part
        self._adversarial: dict[str, str] = {}  # key -> sha256 of its adversarial file (finished units only)

    # --- opening ----------------------------------------------------------------------------------------------

    def __enter__(self) -> RunWriter:
        if not self.primary:
            self._attach()
            return self
        check_writable(self.out)
        prepare_out(self.out, self.kind, self.resume, self.overwrite)
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

    def _manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "status": "running",
            "fingerprint": self.fp,
            "seed": self.seed,
            "config": self.config,
            "units": self.units,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "versions": library_versions(),
            **self.extra,
        }

    def _open(self) -> None:
        self._sweep_temp_files()
        manifest_path = self.out / MANIFEST
        new = self._manifest()
        if manifest_path.exists() and self.resume:
            old = read_manifest(self.out)
            if old.get("fingerprint") != self.fp:
                raise RunStateError(
                    f"{flag('out')} {self.out} holds a different run ({describe_change(old, new)}); {switched('resume')} continues only "
                    f"the same run: use {switched('overwrite')} to replace it or another {flag('out')}."
                )
            self.refresh()
            log.info("resuming %s: %d finished units", self.out, len(self._done))
            _io.atomic_write_json(manifest_path, new)  # running again before the old results go: a kill in between
            for name in (SUMMARY, ROWS):  # leaves an unfinished run to --resume, not a complete one with holes
                (self.out / name).unlink(missing_ok=True)
            return
        if manifest_path.exists() and self.overwrite:
            from .outfolder import remove_files, run_folder_files

            # the old run's own files only (prepare_out refused anything else in parts/)
            old = (run_folder_files(self.out) or set()) - {MANIFEST, LOCK}
            remove_files(self.out, old)
        _io.atomic_write_json(manifest_path, new)

    def _sweep_temp_files(self) -> None:
        """Remove temp files of atomic writes that a killed process left (safe: we hold the lock, nobody writes)."""
        stale = [p for p in self.out.iterdir() if any(_io.is_temp_of(p.name, f) for f in (MANIFEST, ROWS, SUMMARY))]
        for sub in (PARTS, _adv.DIR):
            if (self.out / sub).is_dir():
                stale += [
                    p for p in (self.out / sub).iterdir() if p.name.startswith(".") and p.name.endswith(_io.TEMP_SUFFIX)
                ]
        for path in stale:
            log.info("removing %s (temp file of a write that was killed)", path)
            path.unlink(missing_ok=True)

    def _attach(self) -> None:
        """A secondary rank joins the folder rank 0 prepared: no lock, no manifest write, the same fingerprint."""
        if not (self.out / MANIFEST).exists():
            raise RunStateError(
                f"{flag('out')} {self.out} has no {MANIFEST} on this node although rank 0 wrote it; distributed runs need "
                f"{flag('out')} on a filesystem that every rank shares."
            )
        if read_manifest(self.out).get("fingerprint") != self.fp:
            raise RunStateError(
                f"{flag('out')} {self.out} holds a different run than this rank computes; give every rank the same options."
            )
        self.refresh()

    # --- parts ------------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the finished parts from disk (including other ranks'), verifying each one.

        A part counts only with a sidecar naming this run's fingerprint and a matching sha256. A part file
        without a sidecar (a process killed between the two atomic writes) is left to be recomputed; anything
        else that does not check out is refused, so no edited or foreign row can enter the merge.
        """
        self._done, self._adversarial = {}, {}
        folder = self.out / PARTS
        if not folder.exists():
            return
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):
                continue  # temp files of an interrupted atomic write
            key, suffix = path.stem, path.suffix
            if suffix not in (".parquet", ".json"):
                raise RunStateError(f"{path} is not a part of this run; remove it, then {switched('resume')}.")
            if self._planned is not None and key not in self._planned:
                raise RunStateError(
                    f"{path} belongs to no planned unit of this run (edited?); remove it, then {switched('resume')}."
                )
            if suffix == ".json":
                continue
            sidecar = path.with_suffix(".json")
            if not sidecar.exists():
                log.info("part %s has no hash record (interrupted write); it will be recomputed", key)
                continue
            digest, adversarial = self._verified_hash(path, sidecar)
            if adversarial is not None and not _adv.file_for(self.out, key).exists():
                log.info("unit %s lacks its adversarial file; it will be recomputed", key)
                continue
            self._done[key] = digest
            if adversarial is not None:
                self._adversarial[key] = _adv.verified(self.out, key, adversarial)
        _adv.check_folder(self.out, self._planned, set(self._done), set(self._adversarial))

    def _verified_hash(self, part: Path, sidecar: Path) -> tuple[str, str | None]:
        """The part's verified sha256, and the sha256 its sidecar records for the unit's adversarial file."""
        try:
            record = json.loads(sidecar.read_text())
            recorded, run_fp = record["sha256"], record["fingerprint"]
            adversarial = record.get("adversarial_sha256")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise RunStateError(
                f"{sidecar} is garbled; remove it and {part.name}, then {switched('resume')}."
            ) from None
        if run_fp != self.fp:
            raise RunStateError(
                f"{part} belongs to another run (fingerprint {run_fp}); remove it, then {switched('resume')}."
            )
        actual = _io.sha256_file(part)
        if actual != recorded:
            raise RunStateError(
                f"{part} does not match its recorded sha256 (edited or corrupted); remove it to recompute that "
                f"unit, then {switched('resume')}."
            )
        return actual, adversarial

    def is_done(self, key: str) -> bool:
        return key in self._done

    def write_part(
        self, key: str, rows: pd.DataFrame, adversarial: tuple[dict[str, Any], dict[str, str]] | None = None
    ) -> None:
        """Persist one finished unit atomically (its adversarial file first, when it has one: tensors and
        metadata), then its hash record; resume skips it afterwards."""
        if self._planned is not None and key not in self._planned:
            raise RunStateError(f"unit {key} is not planned in {self.out}; this is a bug in the measurement.")
        record: dict[str, Any] = {"key": key}
        if adversarial is not None:
            record["adversarial_sha256"] = _adv.write(_adv.file_for(self.out, key), *adversarial)
        path = self.out / PARTS / f"{key}.parquet"
        _io.atomic_write(path, lambda tmp: rows.to_parquet(tmp, index=False))
        digest = _io.sha256_file(path)
        _io.atomic_write_json(path.with_suffix(".json"), {**record, "sha256": digest, "fingerprint": self.fp})
        self._done[key] = digest
        if adversarial is not None:
            self._adversarial[key] = record["adversarial_sha256"]

    @property
    def adversarial(self) -> dict[str, str]:
        """The finished units' adversarial files: key -> sha256."""
        return dict(sorted(self._adversarial.items()))

    def load_part(self, key: str) -> pd.DataFrame:
        """The rows of a finished part, re-verified against its hash (it may have been edited meanwhile)."""
        path = self.out / PARTS / f"{key}.parquet"
        if _io.sha256_file(path) != self._done[key]:
            raise RunStateError(
                f"{path} changed while the run was going (edited?); remove it, then {switched('resume')}."
            )
        return pd.read_parquet(path)

    def rows(self, keys: Sequence[str] | None = None) -> pd.DataFrame:
        """All finished parts' rows, in the order of ``keys`` (default: sorted keys)."""
        order = list(keys) if keys is not None else sorted(self._done)
        frames = [self.load_part(k) for k in order]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    # --- finishing --------------------------------------------------------------------------------------------

    def finish(self, rows: pd.DataFrame, summary: Summary) -> Summary:
        """Write the merged rows, the summary (stamped with this run's format version and fingerprint), then the
        manifest with every hash and status complete; returns the summary as written.

        The summary must be the typed summary of the run's kind (:func:`..summaries.check_summary_type`); that it
        writes back key for key what a reader reads is held by tests (tests/test_summaries.py)."""
        if not self.primary:
            raise RunStateError("only rank 0 finishes a distributed run.")
        _adv.check_folder(self.out, self._planned, set(self._done), set(self._adversarial))
        summary = dataclasses.replace(summary, format_version=FORMAT_VERSION, fingerprint=self.fp)
        check_summary_type(summary, self.kind, self.extra.get("family"), self.out)  # before any file is written
        doc = summary.to_dict()
        _io.atomic_write(self.out / ROWS, lambda tmp: rows.to_parquet(tmp, index=False))
        _io.atomic_write_json(self.out / SUMMARY, doc)
        manifest = json.loads((self.out / MANIFEST).read_text())
        manifest.update(
            status="complete",
            finished=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            parts=dict(sorted(self._done.items())),
            **({_adv.DIR: self.adversarial} if self._adversarial else {}),
            rows_sha256=_io.sha256_file(self.out / ROWS),
            summary_sha256=_io.sha256_file(self.out / SUMMARY),
        )
        _io.atomic_write_json(self.out / MANIFEST, manifest)
        return summary


@dataclass
class Run:
    """A finished, verified run, as read back by reports, checks and the study.

    ``summary`` is the typed summary of the run's kind, read strictly from ``summary.json``, so a renamed key fails
    loudly instead of reading as None."""

    path: Path
    manifest: dict[str, Any]
    rows: pd.DataFrame
    summary: Summary

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def family(self) -> str:
        """The report family (image | lm | lipschitz | seqlen | certify), from the manifest's kind and family."""
        return report_family(self.kind, self.manifest.get("family"), f"run folder {self.path}")

    @property
    def run_id(self) -> str:
        return f"{self.path.name}@{self.manifest['fingerprint']}"


def verify_run(path: str | Path) -> dict[str, Any]:
    """Check a finished run folder against its recorded hashes; returns its manifest.

    Raises a one-line :class:`RunStateError` naming the first file that is missing, unfinished, edited or
    foreign. Part files are optional (``rows.parquet`` holds every row), but each one present must match.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest.get("status") != "complete":
        raise RunStateError(f"{path} is an unfinished run; finish it with {switched('resume')} before reading it.")
    for name, key in ((ROWS, "rows_sha256"), (SUMMARY, "summary_sha256")):
        file = path / name
        if not file.exists():
            raise RunStateError(f"{file} is missing; re-run the command with {switched('overwrite')}.")
        if _io.sha256_file(file) != manifest.get(key):
            raise RunStateError(f"{file} does not match the sha256 recorded in its manifest (edited or corrupted).")
    parts = manifest.get("parts") or {}
    folder = path / PARTS
    if folder.exists():
        for file in sorted(folder.glob("*.parquet")):
            if file.stem not in parts:
                raise RunStateError(f"{file} is not a recorded part of this run (foreign or added).")
            if _io.sha256_file(file) != parts[file.stem]:
                raise RunStateError(f"{file} does not match the sha256 recorded in its manifest (edited or corrupted).")
    _adv.verify(path, manifest.get(_adv.DIR) or {})
    try:
        summary_fp = json.loads((path / SUMMARY).read_text()).get("fingerprint")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RunStateError(f"{path / SUMMARY} is corrupted; re-run with {switched('overwrite')}.") from None
    if summary_fp != manifest.get("fingerprint"):
        raise RunStateError(
            f"{path}: summary and manifest belong to different runs; re-run with {switched('overwrite')}."
        )
    if not isinstance(manifest.get("config"), dict) or manifest_fingerprint(manifest) != manifest.get("fingerprint"):
        raise RunStateError(
            f"{path / MANIFEST} was edited: its recorded seed, settings, weights or examples no longer hash to its "
            f"fingerprint; re-run the command with {switched('overwrite')}."
        )
    return manifest


def load_run(path: str | Path) -> Run:
    """Read a finished run folder after verifying it (see :func:`verify_run`)."""
    path = Path(path)
    manifest = verify_run(path)
    doc = json.loads((path / SUMMARY).read_text())
    summary = read_summary(doc, manifest["kind"], manifest.get("family"), f"run folder {path}")
    rows = pd.read_parquet(path / ROWS)
    return Run(path=path, manifest=manifest, rows=rows, summary=summary)


def load_adversarial(
    run: str | Path, model: str | None = None, attack: str | None = None, eps: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, x_adv)`` from a finished run folder made with ``--save-adversarial`` (verified first, like every
    reader): the example ids (ascending, ids into the data's test split) and their adversarial points at ``eps``."""
    folder = Path(run)
    store = _adv.AdversarialExamples.from_manifest(folder, verify_run(folder))
    if store is None:
        raise RobfiltError(
            f"{folder} holds no adversarial examples; run the attack with {switched('save_adversarial')}."
        )
    return store.select(model, attack, eps)
