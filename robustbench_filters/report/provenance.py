"""``figures/provenance.json``: what each figure was drawn from, kept next to the figures.

A paper figure carries neither its setting (n, threat model) nor its sources (run ids), so they live here and in
the index pages. The file is rewritten whole with every report (or study write-up) that writes figures, so it
never describes a figure that is gone; each run is named with its fingerprint and the sha256 of its rows and
summary, the hashes :func:`robustbench_filters.runs.folder.verify_run` checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from ..core.io import atomic_write_json

if TYPE_CHECKING:
    from ..runs.folder import Run

PROVENANCE = "provenance.json"


def provenance_entry(
    fig: Figure,
    title: str,
    caption: str,
    setting: str,
    sources: Sequence[str],
    runs: Sequence[Run],
    files: Sequence[Path],
    paper: bool,
) -> dict[str, Any]:
    """One figure's record in ``provenance.json``: files, size, caption, setting, sources and each run's hashes."""
    return {
        "title": title,
        "files": [p.name for p in files],
        "paper": paper,
        "width_in": fig.get_figwidth(),
        "height_in": round(fig.get_figheight(), 4),
        "caption": caption,
        "setting": setting,
        "sources": list(sources),
        "runs": [
            {
                "id": r.run_id,
                "path": str(r.path),
                "kind": r.kind,
                "fingerprint": r.manifest.get("fingerprint"),
                "rows_sha256": r.manifest.get("rows_sha256"),
                "summary_sha256": r.manifest.get("summary_sha256"),
                "git_commit": r.manifest.get("git_commit"),
                "created": r.manifest.get("created"),
            }
            for r in runs
        ],
    }


def write_provenance(folder: Path, entries: dict[str, dict[str, Any]], written: bool) -> Path | None:
    """Write ``folder/provenance.json`` (figure name -> :func:`provenance_entry`) when figure files were written;
    otherwise remove the one an earlier report left, so it never describes figures that are gone."""
    path = folder / PROVENANCE
    if not written:
        path.unlink(missing_ok=True)
        return None
    written_entries = {k: v for k, v in entries.items() if v["files"]}
    return atomic_write_json(path, {"figures": written_entries})
