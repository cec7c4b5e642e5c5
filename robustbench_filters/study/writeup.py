"""The study's write-up files: ``README.md`` (text from :mod:`.readme`), ``results.json``, ``scores.csv`` and the
figures.

The figures are drawn from every seed (:mod:`.figures`): the claims forest plot (the headline: each claim's per-seed
paired differences and 95% interval) and the seed-averaged curves; the reporter's report of the first seed is
linked for detail. A figure that fails becomes a note in the README, never a lost write-up.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from ..core.io import as_json, atomic_write_json, atomic_write_text
from ..runs.outfolder import OutputFolder
from . import plan as P
from .changes import changes_since
from .claims import ClaimResult
from .plan import StudyPlan
from .readme import REPORT_DIR, render_readme
from .scores import StudyScores

log = logging.getLogger(__name__)


def _build_figures(plan: StudyPlan, out: Path, manifest: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """The reporter's report of the first seed's runs; (title, relative png path) pairs, and notes."""
    from ..report import build_report

    seed = plan.seeds[0]
    kinds = (P.VISION_ATTACK, P.VISION_CORRUPTION, P.LM_ATTACK, P.LIPSCHITZ_VISION, P.LIPSCHITZ_LM, P.SEQLEN_LAYER)
    dirs = [
        out / P.Piece(k, seed).folder
        for k in kinds
        if manifest["pieces"].get(P.Piece(k, seed).id, {}).get("status") == "done"
    ]
    if not dirs:
        return [], ["figures skipped: no finished measurement of the first seed"]
    try:
        res = build_report(
            dirs, out / REPORT_DIR, formats=("md", "csv"), figures=("png",), allow_mixed=True, attention=False
        )
    except Exception as exc:  # noqa: BLE001 - the reporter is a separate component; a failure must not lose the study
        log.warning("the reporter failed: %s", exc)
        return [], [f"figures skipped: the reporter failed ({type(exc).__name__}: {exc})"]
    figs = []
    for name, paths in res.figures.items():
        png = next((p for p in paths if p.suffix == ".png"), None)
        if png is not None:
            figs.append((name.replace("_", " "), str(png.relative_to(out))))
    notes = [f"reporter: {n}" for n in res.notes] + [f"reporter skipped {s}" for s in res.skipped]
    return figs, notes


def _study_figures(
    plan: StudyPlan, folder: OutputFolder, manifest: dict, data: StudyScores, claims: list[ClaimResult]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The all-seed figures (forest plot first); a failure is a note, never a lost write-up."""
    from .figures import study_figures

    fingerprint = str(manifest.get("plan_fingerprint", ""))
    return study_figures(plan, data, claims, folder.out, fingerprint, claim=folder.paths)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_outputs(
    plan: StudyPlan, folder: OutputFolder | Path, manifest: dict, data: StudyScores, result: Any, report: bool
) -> Path:
    """Write results.json, scores.csv, the figures (optional: the study's own and the reporter's) and README.md,
    each claimed in the study folder's ledger first (a file robfilt did not write is never replaced)."""
    if not isinstance(folder, OutputFolder):
        from .folder import open_write_up

        folder = open_write_up(Path(folder))
    out = folder.out
    claims = as_json(_json_safe([c.to_dict() for c in result.claims]))  # as results.json holds them
    changes = changes_since(out / "results.json", result.claims, claims)  # before results.json is replaced
    atomic_write_text(folder.path("scores.csv"), data.scores.to_csv(index=False))
    atomic_write_json(
        folder.path("results.json"),
        _json_safe(
            {
                "plan": plan.to_dict(),
                "claims": claims,
                "scores": data.scores.to_dict(orient="records"),
                "mcnemar": data.mcnemar.to_dict(orient="records"),
                "failed_checks": data.failed_checks.to_dict(orient="records"),
                "verdict_changes": changes,
            }
        ),
    )
    if report:
        figures, notes = _study_figures(plan, folder, manifest, data, result.claims)
        report_figures, report_notes = _build_figures(plan, out, manifest)
        notes += report_notes
    else:  # the figures of an earlier write-up stay as they are (the README does not link them)
        folder.keep(f for f in sorted(folder.listed) if f.startswith("figures/"))
        figures, report_figures, notes = [], [], ["figures not requested"]
    text = render_readme(plan, manifest, data, result.claims, figures, notes, report_figures, changes)
    return atomic_write_text(folder.path("README.md"), text)
