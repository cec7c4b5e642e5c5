"""Output folders: robfilt replaces or removes only files it wrote itself, never a user's file.

Every folder robfilt writes keeps a record of the files it wrote there:

- a run folder: its ``manifest.json`` (the rows, the summary and the planned parts, see :mod:`.folder`);
- a training folder: its ``card.json`` (weights, tokenizer, the resumable state);
- any other output (a report, the gate's outputs, a study, a script's result folder): a ledger,
  ``.robfilt-outputs.json``, naming its kind and every file it wrote. It is updated *before* each file is
  written, so a killed command leaves no file of its own unlisted.

:class:`OutputFolder` applies one rule to all of them, before a single file is written:

- a new or empty folder is used;
- a folder holding an earlier output of the same kind, and nothing else, is rewritten: listed files are
  replaced, and listed files the new output no longer writes are removed (so the folder and its index agree);
- a folder that is not an output of that kind, or that holds files no earlier output listed, is refused in one
  line unless ``overwrite``. With ``overwrite`` robfilt writes its files beside the others and still removes
  only listed files; a file it would write that exists and is not listed is refused, since writing it would
  destroy it.

Robfilt outputs nested inside (a study's run folders, a report inside a study) list their own files, so those
files are robfilt's too; anything else is the user's.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..core import io as _io
from ..core.errors import RunStateError
from .lock import LOCK

LEDGER = ".robfilt-outputs.json"
LEDGER_FORMAT = "robfilt-outputs"
RUN_FORMAT = "robfilt-run"
CARD_FORMAT = "robfilt-checkpoint"
#: files of a training folder (models/checkpoint.py and train/loop.py name them)
TRAINING_FILES = ("model.safetensors", "card.json", "tokenizer.json", "model.safetensors.tmp")
#: what a Hugging Face fine-tuning writes besides those (save_pretrained and its tokenizer; train_hf)
HF_TRAINING_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json")
#: the card formats of robfilt's trainings: its own models, and fine-tuned Hugging Face models
CARD_FORMATS = (CARD_FORMAT, "robfilt-hf-finetune")
TRAINING_STATE_DIRS = ("train_state", "train_state.old", "train_state.tmp")
TRAINING_STATE_FILES = ("model.safetensors", "optimizer.safetensors", "state.json")
REPORT_TITLE = "# robfilt report"
_REPORT_LINK = re.compile(r"\]\(((?:tables|figures)/[^)\s]+)\)")
Legacy = Callable[[Path], set[str] | None]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _with_temps(folder: Path, names: Iterable[str]) -> set[str]:
    """``names`` plus the temp files a killed atomic write of one of them left in ``folder`` (rel. paths)."""
    names = set(names)
    out = set(names)
    by_dir: dict[str, set[str]] = {}
    for name in names:
        parent, _, base = name.rpartition("/")
        by_dir.setdefault(parent, set()).add(base)
    for parent, bases in by_dir.items():
        sub = folder / parent if parent else folder
        if not sub.is_dir():
            continue
        for entry in sub.iterdir():
            if any(_io.is_temp_of(entry.name, b) for b in bases):
                out.add(f"{parent}/{entry.name}" if parent else entry.name)
    return out


def run_folder_files(folder: Path) -> set[str] | None:
    """The files a run folder's manifest accounts for (relative paths); None when ``folder`` is no run folder."""
    manifest = _read_json(folder / "manifest.json")
    if not isinstance(manifest, dict) or not (manifest.get("format") == RUN_FORMAT or "kind" in manifest):
        return None
    keys = set(manifest.get("units") or ()) | set(manifest.get("parts") or ())
    names = {"manifest.json", "rows.parquet", "summary.json", LOCK}
    names |= {f"parts/{k}.{ext}" for k in keys for ext in ("parquet", "json")}
    names |= {f"adversarial/{k}.safetensors" for k in keys}  # --save-adversarial (runs/adversarial.py)
    return _with_temps(folder, names)


def training_folder_files(folder: Path) -> set[str] | None:
    """The files of a robfilt training folder (card, weights, tokenizer, resumable state); None when it is none."""
    card = _read_json(folder / "card.json")
    states = [d for d in TRAINING_STATE_DIRS if isinstance(_read_json(folder / d / "state.json"), dict)]
    tok = _read_json(folder / "tokenizer.json")
    # a training killed before its first saved state leaves only the tokenizer it trained
    alone = (
        isinstance(tok, dict)
        and tok.get("type") in ("char", "bpe")
        and {p.name for p in folder.iterdir() if p.name != LOCK and not p.name.startswith(".")} == {"tokenizer.json"}
    )
    if not (isinstance(card, dict) and card.get("format") in CARD_FORMATS) and not states and not alone:
        return None
    names = {*TRAINING_FILES, LOCK}
    if isinstance(card, dict) and card.get("format") != CARD_FORMAT:
        names |= set(HF_TRAINING_FILES)
    for d in TRAINING_STATE_DIRS:
        if (folder / d).is_dir():
            names |= {f"{d}/{f}" for f in TRAINING_STATE_FILES}
    return _with_temps(folder, names)


def read_ledger(folder: Path) -> dict[str, Any] | None:
    """A folder's ledger, or None when it has none (a ledger robfilt cannot read counts as none)."""
    data = _read_json(folder / LEDGER)
    if isinstance(data, dict) and data.get("format") == LEDGER_FORMAT and isinstance(data.get("files"), list):
        return data
    return None


def ledger_files(folder: Path) -> set[str] | None:
    ledger = read_ledger(folder)
    if ledger is None:
        return None
    return _with_temps(folder, {str(f) for f in ledger["files"]} | {LEDGER, LOCK})


def legacy_report_files(folder: Path) -> set[str] | None:
    """The files of a report written before ledgers: its index.md (a robfilt report), the files it links, and
    its index.html; None when ``folder`` holds no such report."""
    try:
        text = (folder / "index.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.splitlines()[:1] != [REPORT_TITLE]:
        return None
    html = folder / "index.html"
    page = html.read_text(encoding="utf-8", errors="replace") if html.is_file() else ""
    links = _REPORT_LINK.findall(text)
    provenance = ["figures/provenance.json"] if any(f.startswith("figures/") for f in links) else []
    return {"index.md", *_REPORT_LINK.findall(text), *(["index.html"] if "robfilt report" in page else []), *provenance}


def robfilt_files(folder: Path) -> set[str] | None:
    """What robfilt wrote in ``folder`` by its own record (ledger, run manifest, training card, or the index of a
    report written before ledgers); None if none."""
    for recogniser in (ledger_files, run_folder_files, training_folder_files, legacy_report_files):
        found = recogniser(folder)
        if found is not None:
            return found
    return None


def output_kind(folder: Path) -> str | None:
    """'run', 'training', a ledger's kind, or None for a folder robfilt did not write."""
    ledger = read_ledger(folder)
    if ledger is not None:
        return str(ledger.get("kind"))
    if run_folder_files(folder) is not None:
        return "run"
    if training_folder_files(folder) is not None:
        return "training"
    if legacy_report_files(folder) is not None:
        return "report"
    return None


def all_entries(folder: Path) -> list[str]:
    """Every file (and link, never followed) under ``folder``, as sorted relative POSIX paths."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        links = [d for d in dirnames if (base / d).is_symlink()]
        for name in [*filenames, *links]:
            out.append((base / name).relative_to(folder).as_posix())
    return sorted(out)


def foreign_files(folder: Path, listed: set[str]) -> list[str]:
    """Files under ``folder`` that neither ``listed`` nor a robfilt output nested in it accounts for."""
    known = set(listed) | _with_temps(folder, {LEDGER, LOCK})
    for dirpath, _dirnames, _files in os.walk(folder, followlinks=False):
        sub = Path(dirpath)
        if sub == folder:
            continue
        nested = robfilt_files(sub)
        if nested is not None:
            prefix = sub.relative_to(folder).as_posix()
            known |= {f"{prefix}/{f}" for f in nested}
    return [f for f in all_entries(folder) if f not in known]


def remove_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """Remove the listed files under ``folder`` (never anything else), then the folders they leave empty."""
    removed = []
    for name in sorted(set(names)):
        path = folder / name
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed.append(path)
            parent = path.parent
            while parent != folder and parent.is_relative_to(folder):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
                parent = parent.parent
    return removed


def remove_output(folder: Path) -> list[Path]:
    """Remove what robfilt wrote in ``folder`` by its own record, keeping every other file (and the folder if
    anything is left in it)."""
    names = robfilt_files(folder)
    if names is None:
        return []
    removed = remove_files(folder, names)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return removed


def _say(name: str) -> str:
    return repr(name)


class OutputFolder:
    """A folder robfilt writes several files into (a report, the gate's outputs, a study's write-up, a script).

    Use: ``folder = OutputFolder(out, "report", overwrite=...).open()``; ``folder.path("tables/x.csv")`` before
    writing each file; ``folder.finish()`` at the end (removes listed files not written this time).
    ``legacy`` lists the files an output of this kind written before ledgers existed holds (None: not one).
    """

    def __init__(
        self, out: str | Path, kind: str, *, overwrite: bool = False, legacy: Legacy | None = None,
        option: str = "--out", top_only: bool = False,
    ) -> None:  # fmt: skip
        self.out, self.kind, self.overwrite, self.legacy, self.option = Path(out), kind, overwrite, legacy, option
        self.top_only = top_only  # subfolders are other outputs (a benchmark's smoke/): judged on their own
        self.listed: set[str] = set()
        self.written: list[str] = []

    def _refuse(self, message: str) -> RunStateError:
        return RunStateError(f"{self.option} {self.out} {message}")

    def open(self) -> OutputFolder:
        """Check the folder against the rule above; nothing is written or removed when it is refused."""
        out = self.out
        if _io.non_utf8_path(out):
            raise self._refuse("is not a UTF-8 path, and robfilt's files cannot be written under one; pick another.")
        if out.is_symlink() and not out.exists():
            raise self._refuse(
                f"is a link to {os.readlink(out)}, which does not exist; create that folder first, or pass another "
                f"{self.option} (nothing was written)."
            )
        if out.exists() and not out.is_dir():
            raise self._refuse("is a file; pass a folder path.")
        if not out.exists() or not all_entries(out):
            out.mkdir(parents=True, exist_ok=True)
            return self
        kind = output_kind(out)
        if kind is not None and kind != self.kind:
            raise self._refuse(
                f"holds a robfilt {kind} output, not a {self.kind}; pick another {self.option} (nothing was changed)."
            )
        listed = ledger_files(out)
        if listed is None and self.legacy is not None:
            listed = self.legacy(out)
        foreign = foreign_files(out, listed or set())
        if self.top_only:
            foreign = [f for f in foreign if "/" not in f and not (out / f).is_dir()]
        if foreign and not self.overwrite:
            what = f"is not a robfilt {self.kind}: it holds" if listed is None else "holds"
            raise self._refuse(
                f"{what} {_say(foreign[0])}, which robfilt did not write"
                f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}; robfilt never touches files it "
                f"did not write: move them away, pick another {self.option}, or pass --overwrite to write beside "
                "them (they are kept)."
            )
        self.listed = set(listed or ())
        return self

    def path(self, rel: str | Path) -> Path:
        """Claim ``rel`` (relative to the folder) before writing it; refused when it is a file robfilt did not
        write. The ledger lists the file before it exists, so a killed command leaves none of its own unlisted."""
        return self.paths([rel])[0]

    def paths(self, rels: Iterable[str | Path]) -> list[Path]:
        names = [Path(r).as_posix() for r in rels]
        for name in names:
            target = self.out / name
            if (target.exists() or target.is_symlink()) and name not in self.listed and name not in self.written:
                raise self._refuse(
                    f"holds {_say(name)}, which robfilt did not write and would replace; move it away or pick "
                    f"another {self.option} (nothing of it was changed)."
                )
        new = [n for n in names if n not in self.written]
        if new:
            self.written += new
            self._save(sorted(self.listed | set(self.written)))
        out = [self.out / n for n in names]
        for p in out:
            p.parent.mkdir(parents=True, exist_ok=True)
        return out

    def keep(self, rels: Iterable[str]) -> None:
        """Carry listed files over into this output unchanged (e.g. figures a write-up was told not to redraw)."""
        self.written += [r for r in rels if r in self.listed and r not in self.written]

    def finish(self) -> list[Path]:
        """Remove the files an earlier output listed and this one did not write; record what this one wrote."""
        stale = self.listed - set(self.written) - {LEDGER, LOCK}
        removed = remove_files(self.out, stale)
        self._save(sorted(set(self.written)))
        self.listed = set(self.written)
        return removed

    def _save(self, files: list[str]) -> None:
        _io.atomic_write_json(
            self.out / LEDGER,
            {
                "format": LEDGER_FORMAT,
                "kind": self.kind,
                "updated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "files": files,
            },
        )


__all__ = [
    "LEDGER",
    "OutputFolder",
    "all_entries",
    "foreign_files",
    "legacy_report_files",
    "output_kind",
    "read_ledger",
    "remove_files",
    "remove_output",
    "robfilt_files",
    "run_folder_files",
    "training_folder_files",
]
