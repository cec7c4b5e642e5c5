"""The study's own figures, drawn from every seed: the claims forest plot and the seed-averaged curves.

:func:`study_figures` writes them under ``<study>/figures/`` (PDF and 300 dpi PNG) and returns the PNGs for
the README. The numbers are the ones the README's tables and verdicts use (the per-seed scores and the claims),
so a figure cannot disagree with the text next to it. Each figure states n and the threat model above the
panels and names its sources (the study's plan fingerprint and the run ids) below them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ..report.figures import save_figure
from . import plan as P
from .claims import ClaimResult
from .curves import accuracy_seeds_figure, lipschitz_seeds_figure, perplexity_seeds_figure, seqlen_seeds_figure
from .forest import claims_frame, forest_figure
from .plan import StudyPlan
from .scores import StudyScores

log = logging.getLogger(__name__)

FIGURE_DIR = "figures"
FORMATS: tuple[str, ...] = ("pdf", "png")
SEP = " \u00b7 "


def run_ids(out: Path, kinds: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """``<folder>@<fingerprint>`` of each finished piece run (what the reporter calls a run id)."""
    ids = []
    for seed in seeds:
        for kind in kinds:
            folder = P.Piece(kind, seed).folder
            try:
                fingerprint = json.loads((out / folder / "manifest.json").read_text())["fingerprint"]
            except (OSError, ValueError, KeyError):
                continue
            ids.append(f"{folder}@{fingerprint}")
    return ids


def _seeds(plan: StudyPlan) -> str:
    k = len(plan.seeds)
    return (
        f"{k} training seed{'s' if k != 1 else ''} ({', '.join(map(str, plan.seeds))}): mean (thick), each seed (thin)"
    )


def subtitles(plan: StudyPlan) -> dict[str, str]:
    """n and threat model of each figure, from the plan that produced the numbers."""
    v, lm, lip, sq = plan.vision, plan.lm, plan.lipschitz, plan.seqlen
    k = len(plan.seeds)
    return {
        "claims": f"per claim: paired difference variant - baseline per training seed ({k} seeds, the same "
        f"examples for every model); bar: 95% t-interval across seeds; diamond: mean",
        "accuracy": SEP.join([f"n = {v.n_examples} test images", "white-box L\u221e, \u03b5 on the [0, 1] pixel "
                              "scale", ", ".join(v.attacks), _seeds(plan)]),
        "perplexity": SEP.join([f"n = {lm.n_sequences} sequences", f"FGSM, PGD-{lm.attack_steps} on embeddings: "
                                "per-token L2, \u03b5 \u00d7 mean embedding norm", "word swap: share of words "
                                "replaced", _seeds(plan)]),
        "lipschitz": SEP.join([f"n = {lip.vision_examples} images ({lip.vision_method}), {lip.lm_examples} text "
                               f"windows of {lip.lm_seq_len} tokens ({lip.lm_method}) per model", "no attack: l2 "
                               "Lipschitz constants, geometric mean over seeds", _seeds(plan)]),
        "seqlen": SEP.join([f"n = {sq.lm_windows} windows per N (LMs, noise {sq.lm_noise:g} \u00d7 mean embedding "
                            f"norm), {sq.layer_trials} trials per N (layer)", _seeds(plan)]),
    }  # fmt: skip


def _plans(plan: StudyPlan, data: StudyScores, claims: Sequence[ClaimResult], out: Path, fingerprint: str):
    s, seeds, sub = data.scores, plan.seeds, subtitles(plan)
    models = [*plan.vision_models, *plan.lm_models]
    study_src = [f"study {plan.name} {fingerprint}".strip(), "scores.csv", "results.json"]
    return [
        ("claims_forest", "Every claim: per-seed paired differences and 95% intervals",
         lambda: forest_figure(claims_frame(claims), study_src, sub["claims"])),
        ("accuracy_seeds", "Robust accuracy vs eps, all seeds",
         lambda: accuracy_seeds_figure(s, plan.vision_models, run_ids(out, [P.VISION_ATTACK], seeds), sub["accuracy"])),
        ("perplexity_seeds", "Perplexity vs eps and contamination rate, all seeds",
         lambda: perplexity_seeds_figure(s, plan.lm_models, run_ids(out, [P.LM_ATTACK], seeds), sub["perplexity"])),
        ("lipschitz_seeds", "Per-block Lipschitz profile, all seeds",
         lambda: lipschitz_seeds_figure(s, models, run_ids(out, [P.LIPSCHITZ_VISION, P.LIPSCHITZ_LM], seeds),
                                        sub["lipschitz"])),
        ("seqlen_seeds", "Perturbation vs sequence length, all seeds",
         lambda: seqlen_seeds_figure(s, plan.lm_models, run_ids(out, [P.SEQLEN_LM, P.SEQLEN_LAYER], seeds),
                                     sub["seqlen"])),
    ]  # fmt: skip


def study_figures(
    plan: StudyPlan,
    data: StudyScores,
    claims: Sequence[ClaimResult],
    out: Path,
    fingerprint: str = "",
    formats: Sequence[str] = FORMATS,
) -> tuple[list[tuple[str, str]], list[str]]:
    """Write the study figures; returns (title, PNG path relative to ``out``) pairs and notes on what was left out."""
    figs: list[tuple[str, str]] = []
    notes: list[str] = []
    folder = out / FIGURE_DIR
    for stem, title, make in _plans(plan, data, claims, out, fingerprint):
        fig: Figure | None = _safe(make, stem, notes)
        if fig is None:
            for fmt in formats:  # an earlier write-up's version would now contradict the README
                (folder / f"{stem}.{fmt}").unlink(missing_ok=True)
            continue
        paths = save_figure(fig, folder, stem, formats)
        png = next((p for p in paths if p.suffix == ".png"), paths[0])
        figs.append((title, str(png.relative_to(out))))
    return figs, notes


def _safe(make: Callable[[], Figure | None], stem: str, notes: list[str]) -> Figure | None:
    try:
        fig = make()
    except Exception as exc:  # noqa: BLE001 - one broken figure must not lose the study's write-up
        log.warning("study figure %s failed: %s", stem, exc)
        notes.append(f"figure {stem} skipped: {type(exc).__name__}: {exc}")
        return None
    if fig is None:
        notes.append(f"figure {stem} skipped: no scores for it in this study")
    return fig
