"""The study folder as an output: which of its files robfilt wrote, so ``--overwrite`` and a rewritten write-up
never touch anything else (the rule of :mod:`robustbench_filters.runs.outfolder`).

The study lists its own files (``study.json``, the write-up and its figures) in the folder's ledger; the run
folders under ``runs/``, the checkpoints under ``checkpoints/`` and the report under ``report/`` list theirs in
their own records. A study written before ledgers is recognised by its ``study.json``.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import RunStateError
from ..runs.folder import check_writable
from ..runs.outfolder import LEDGER, OutputFolder, output_kind, remove_files, remove_output
from .readme import REPORT_DIR

KIND = "study"
MANIFEST = "study.json"
FIGURE_DIR = "figures"
WRITE_UP = ("README.md", "results.json", "scores.csv")
#: the study's figures (study/figures.py) in every format it has written
FIGURE_STEMS = ("claims_forest", "accuracy_seeds", "perplexity_seeds", "lipschitz_seeds", "seqlen_seeds")
FIGURE_FORMATS = ("pdf", "png", "svg")


def legacy_files(out: Path) -> set[str] | None:
    """The files of a study written before ledgers: its manifest, write-up and figures by their known names."""
    if not (out / MANIFEST).is_file():
        return None
    figures = {f"{FIGURE_DIR}/{s}.{fmt}" for s in FIGURE_STEMS for fmt in FIGURE_FORMATS}
    figures.add(f"{FIGURE_DIR}/provenance.json")  # paper mode's sidecar (which runs each figure shows)
    return {MANIFEST, *WRITE_UP, *(f for f in figures if (out / f).exists())}


def nested_outputs(out: Path) -> list[Path]:
    """The robfilt outputs the study made inside its folder: run folders, checkpoints and the report."""
    found = [out / REPORT_DIR] if output_kind(out / REPORT_DIR) == "report" else []
    for pattern, kind in (("runs/*/*", "run"), ("checkpoints/*", "training")):
        found += [p for p in sorted(out.glob(pattern)) if p.is_dir() and output_kind(p) == kind]
    return found


def open_study_folder(out: Path, *, resume: bool, overwrite: bool) -> OutputFolder:
    """Check ``out`` for a study run; with ``overwrite`` remove the earlier study's own files (and only those)."""
    check_writable(out)
    folder = OutputFolder(out, KIND, overwrite=overwrite, legacy=legacy_files).open()
    if (out / MANIFEST).exists() and not (resume or overwrite):
        raise RunStateError(f"--out {out} already holds a study; pass --resume to continue it, or --overwrite.")
    if overwrite:
        remove_files(out, folder.listed | {LEDGER})  # the next claim writes the new study's ledger
        for nested in nested_outputs(out):
            remove_output(nested)
        folder.listed = set()
    return folder


def open_write_up(out: Path) -> OutputFolder:
    """The folder of a finished study whose write-up is redrawn: files no study wrote are refused, none removed."""
    return OutputFolder(out, KIND, legacy=legacy_files).open()
