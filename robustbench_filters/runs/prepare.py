"""Before a run or a training writes into ``--out``: the folder is writable, and holds nothing robfilt may not
touch (the rule of :mod:`.outfolder`: files robfilt did not write are refused unless ``--overwrite``, kept even
then, and never replaced). Checked before a single file is written or removed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import io as _io
from ..core.errors import RunStateError
from ..core.surface import flag, switched
from .lock import LOCK
from .outfolder import TRAINING_FILES, foreign_files, output_kind, run_folder_files, training_folder_files

MANIFEST, SUMMARY, ROWS, PARTS, ADVERSARIAL = "manifest.json", "summary.json", "rows.parquet", "parts", "adversarial"
TRAINING_OUTPUTS = tuple(f for f in TRAINING_FILES if not f.endswith(".tmp"))  # what training writes into --out


def _blocked(out: Path, name: str, dirs: tuple[str, ...], what: str) -> RunStateError:
    """The refusal of a file robfilt did not write where ``what`` (the run, training) writes: a file of a name
    it writes would be written over; one inside a folder it owns (``parts/``) would have to go when that folder is
    emptied or replaced, and robfilt never removes a file it did not write."""
    top = name.split("/")[0]
    if "/" in name and top in dirs:
        why = f"inside {top}/, which {what} empties or replaces, and robfilt never removes a file it did not write"
    elif top in dirs:
        why = f"where {what} keeps its {top}/ folder"
    else:
        why = f"and {what} writes a file of that name"
    return RunStateError(
        f"{flag('out')} {out} holds {name!r}, which robfilt did not write, {why}; move it away or pick another {flag('out')} "
        "(nothing was changed)."
    )


def prepare_out(out: Path, kind: str, resume: bool, overwrite: bool) -> None:
    """Refuse an output folder that holds anything but a run of this kind that we may continue or replace.

    Runs before a single file is touched. Files robfilt did not write (by the run's manifest, see
    :mod:`.outfolder`) are refused unless ``overwrite``; even then they are kept, and one where the run writes
    (a ``rows.parquet`` of the user's, anything in ``parts/``, which the run empties) is refused.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise RunStateError(f"{flag('out')} {out} is a file; pass a folder path.")
    # the lock and the temp file of a first manifest write killed before its rename do not make a run folder
    entries = [p for p in out.iterdir() if p.name != LOCK and not _io.is_temp_of(p.name, MANIFEST)]
    if not entries:
        return
    if (out / MANIFEST).is_file() and run_folder_files(out) is None:
        raise RunStateError(
            f"{out / MANIFEST} is not a robfilt run manifest (corrupted, or a file of yours), so robfilt cannot tell "
            f"which files there it wrote (it removes only those): pick another {flag('out')}, or clear the folder yourself."
        )
    other = output_kind(out)
    if other not in (None, "run"):
        raise RunStateError(
            f"{flag('out')} {out} holds a robfilt {other} output; pass another {flag('out')} (nothing was changed)."
        )
    listed = run_folder_files(out)
    # parts/ and adversarial/ are judged by the run itself on --resume (its messages name the unit); --overwrite
    # must empty them
    unit_dirs = (f"{PARTS}/", f"{ADVERSARIAL}/")
    foreign = [f for f in foreign_files(out, listed or set()) if overwrite or not f.startswith(unit_dirs)]
    if listed is None:
        if not overwrite:
            raise RunStateError(
                f"{flag('out')} {out} is not a robfilt run folder (it holds {(foreign or [entries[0].name])[0]!r}); robfilt "
                f"never writes into other files: pass a new or empty {flag('out')}, or {switched('overwrite')} to write the run beside them (they are kept)."
            )
    elif foreign and not overwrite:
        raise RunStateError(
            f"{flag('out')} {out} holds {foreign[0]!r}, which robfilt did not write; move it away, or pass {switched('overwrite')} to "
            "replace the run beside it (it is kept)."
        )
    blocking = [f for f in foreign if f in (MANIFEST, ROWS, SUMMARY, PARTS, ADVERSARIAL) or f.startswith(unit_dirs)]
    if blocking:
        raise _blocked(out, blocking[0], (PARTS, ADVERSARIAL), "the run")
    if listed is None:
        return
    if not (resume or overwrite):
        raise RunStateError(
            f"{flag('out')} {out} already holds a run; pass {switched('resume')} to continue it, {switched('overwrite')}, or another {flag('out')}."
        )
    try:
        old = json.loads((out / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        raise RunStateError(
            f"{out / MANIFEST} is corrupted; use {switched('overwrite')} or another {flag('out')}."
        ) from None
    old_kind = old.get("kind") if isinstance(old, dict) else None
    if old_kind != kind:
        raise RunStateError(
            f"{flag('out')} {out} holds a {old_kind!r} run, not a {kind!r} run; pass another {flag('out')} (nothing was changed)."
        )


def check_writable(out: Path) -> None:
    """Fail before any work if the output folder cannot be created or written (a path that is not UTF-8, or a
    link to a folder that does not exist, is refused by name: nothing has been written, so nothing can resume)."""
    if _io.non_utf8_path(out):
        raise RunStateError(
            f"{flag('out')} {out} is not a UTF-8 path, and the run's files (Parquet, JSON) cannot be written under one; "
            "pick a folder whose path is UTF-8."
        )
    if out.is_symlink() and not out.exists():
        raise RunStateError(
            f"{flag('out')} {out} is a link to {os.readlink(out)}, which does not exist; create that folder first, or pass "
            f"another {flag('out')} (nothing was written)."
        )
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise RunStateError(f"{flag('out')} {out}: {probe} is a file, not a folder; pick a folder path.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunStateError(
            f"{flag('out')} {out} is not writable ({probe} denies writes); pick a folder you can write."
        )


def prepare_training_out(out: Path, resume: bool, overwrite: bool, state_dir: str = "train_state") -> set[str]:
    """Refuse an --out that holds someone else's files before anything is written or deleted; returns the files
    of an earlier training that --overwrite replaces (only those are removed: see :mod:`.outfolder`)."""
    check_writable(out)
    entries = [p for p in out.iterdir() if p.name != ".lock"] if out.is_dir() else []
    if entries:
        kind = output_kind(out)
        if kind not in (None, "training"):
            raise RunStateError(
                f"{flag('out')} {out} holds a robfilt {kind} output; pick another {flag('out')} (nothing was changed)."
            )
        listed = training_folder_files(out)
        foreign = foreign_files(out, listed or set())
        if listed is None and not overwrite:
            raise RunStateError(
                f"{flag('out')} {out} is not a robfilt training folder (it holds {(foreign or [entries[0].name])[0]!r}); "
                f"robfilt never writes into other files: pick another {flag('out')}, or pass {switched('overwrite')} to train beside "
                "them (they are kept)."
            )
        if foreign and not overwrite:
            raise RunStateError(
                f"{flag('out')} {out} holds {foreign[0]!r}, which robfilt did not write; move it away, or pass {switched('overwrite')} "
                "to train beside it (it is kept)."
            )
        blocking = [
            f
            for f in foreign
            if f.split("/")[0] in (*TRAINING_OUTPUTS, state_dir, state_dir + ".old", state_dir + ".tmp")
        ]
        if blocking:
            raise _blocked(out, blocking[0], (state_dir, state_dir + ".old", state_dir + ".tmp"), "training")
        if listed is not None and not (resume or overwrite):
            raise RunStateError(
                f"{flag('out')} {out} already holds a run; pass {switched('resume')} to continue it, {switched('overwrite')}, or another {flag('out')}."
            )
        if overwrite and not resume and listed is not None:
            out.mkdir(parents=True, exist_ok=True)
            return listed - {".lock"}
    out.mkdir(parents=True, exist_ok=True)
    return set()
