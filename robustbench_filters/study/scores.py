"""Per-seed numbers from the study's run folders, as one tidy table (and McNemar counts per seed).

``scores`` has one row per (family, model, seed, metric, condition) with the value recomputed by the engines
from their per-example rows. Families: ``image``, ``lm`` (models by registry name) and ``layer`` (the synthetic
attention-layer kinds of the sequence-length study). Metrics:

- image: ``acc`` (condition ``clean`` or ``<attack>@<eps>``), ``acc_mean`` (condition = attack; mean over the
  eps grid), ``corruption_acc`` (``mean`` or a corruption; mean over severities), ``mce``;
- lm: ``log_ppl`` (``clean`` or ``<attack>@<eps or rate>``), ``log_ppl_mean`` (condition = attack; mean over
  eps, or over the rates > 0 for word swap), ``log_ppl_increase`` (same conditions, minus the clean log ppl);
- both: ``lip_lower_mean``, ``lip_lower_max``, ``lip_log10_upper`` (condition ``model``) and per block
  ``lip_layer_lower_mean`` / ``lip_layer_log10_upper`` (condition = the block); with gap rows also
  ``lip_log10_layerwise`` (product of exact per-sublayer Jacobian norms, not certified) and ``lip_log10_local``;
- image: ``certified_radius_mean`` and ``certified_acc`` (condition ``sigma=<s>``) of the smoothed classifiers;
- lm / layer: ``seqlen_gain`` / ``seqlen_perturbation`` (condition ``N=<n>``) and ``seqlen_slope``.

Log scales for perplexity and Lipschitz bounds make seed averages geometric means and differences ratios.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..core.errors import RobfiltError
from ..runs.folder import Run
from ..stats import vacuity
from ..stats.intervals import mcnemar_exact
from ..summaries import (
    CorruptionSummary,
    ImageAttackSummary,
    LipschitzSummary,
    LMAttackSummary,
    StudySeqlenSummary,
    Summary,
)
from ..summaries.lipschitz import LipschitzLayer, LipschitzModel
from ..summaries.record import present
from .seqlen import growth_slope

S = TypeVar("S", bound=Summary)

SCORE_COLUMNS = ("family", "model", "seed", "metric", "condition", "value")
CHECK_COLUMNS = ("piece", "model", "name", "status", "detail")
MCNEMAR_COLUMNS = ("baseline", "variant", "seed", "attack", "eps", "n", "acc_baseline", "acc_variant", "b", "c", "p")


def condition(attack: str, eps: float) -> str:
    return f"{attack}@{eps:g}"


def _row(family: str, model: str, seed: int, metric: str, cond: str, value: Any) -> dict:
    v = float(value) if value is not None else float("nan")
    return {"family": family, "model": str(model), "seed": int(seed), "metric": metric, "condition": cond, "value": v}


def image_attack_scores(summary: ImageAttackSummary, seed: int) -> list[dict]:
    out = []
    for model, m in summary.models.items():
        out.append(_row("image", model, seed, "acc", "clean", m.clean.acc))
        by_attack: dict[str, list[float]] = {}
        for r in m.robust:
            out.append(_row("image", model, seed, "acc", condition(r.attack, r.eps), r.acc))
            by_attack.setdefault(r.attack, []).append(r.acc)
        out += [_row("image", model, seed, "acc_mean", a, np.mean(v)) for a, v in by_attack.items()]
    return out


def corruption_scores(summary: CorruptionSummary, seed: int) -> list[dict]:
    out = []
    for model, m in summary.models.items():
        out.append(_row("image", model, seed, "corruption_acc", "mean", m.mean_acc))
        out += [_row("image", model, seed, "corruption_acc", n, c.mean_acc) for n, c in m.corruptions.items()]
        if m.mce is not None:
            out.append(_row("image", model, seed, "mce", "all", m.mce))
    return out


def lm_scores(summary: LMAttackSummary, seed: int) -> list[dict]:
    out = []
    for model, m in summary.models.items():
        clean = math.log(m.clean.ppl)
        out.append(_row("lm", model, seed, "log_ppl", "clean", clean))
        by_attack: dict[str, list[float]] = {}
        for r in m.results:
            lp = math.log(r.ppl)
            out.append(_row("lm", model, seed, "log_ppl", condition(r.attack, r.eps), lp))
            if r.attack != "wordswap" or r.eps > 0:
                by_attack.setdefault(r.attack, []).append(lp)
        for attack, values in by_attack.items():
            out.append(_row("lm", model, seed, "log_ppl_mean", attack, np.mean(values)))
            out.append(_row("lm", model, seed, "log_ppl_increase", attack, np.mean(values) - clean))
    return out


#: certified score -> the score that says whether it is vacuous (1.0) or not (0.0) (robustbench_filters.stats.vacuity)
VACUOUS_SCORES: dict[str, str] = {
    "lip_log10_upper": "lip_upper_vacuous",
    "lip_layer_log10_upper": "lip_layer_upper_vacuous",
    "lip_log10_local": "lip_local_vacuous",
    "lip_log10_crown": "lip_crown_vacuous",
}


def _flag_rows(family: str, model: str, seed: int, metric: str, cond: str, flag: Any) -> list[dict]:
    return [] if flag is None else [_row(family, model, seed, VACUOUS_SCORES[metric], cond, float(bool(flag)))]


def _global_flag(rows: pd.DataFrame | None, entry: LipschitzModel | LipschitzLayer, model: str, layer: str) -> Any:
    """Whether a certified global constant is vacuous: the rule applied to the run's rows (so run folders written
    before the summaries carried the flag are judged too), else the summary's flag."""
    recorded = present(entry.global_upper_vacuous)
    if rows is None or "layer" not in rows.columns:
        return recorded
    sel = rows[(rows["model"] == model) & (rows["layer"] == layer)]
    return vacuity.block_vacuity(sel)["global_upper_vacuous"] if len(sel) else recorded


def lipschitz_scores(summary: LipschitzSummary, family: str, seed: int, rows: pd.DataFrame | None = None) -> list[dict]:
    out = []
    for model, m in summary.models.items():
        out.append(_row(family, model, seed, "lip_lower_mean", "model", m.lower_mean))
        out.append(_row(family, model, seed, "lip_lower_max", "model", m.lower_max))
        out.append(_row(family, model, seed, "lip_log10_upper", "model", m.log10_global_upper))
        out += _flag_rows(family, model, seed, "lip_log10_upper", "model", _global_flag(rows, m, model, "model"))
        for layer in m.layers:
            out.append(_row(family, model, seed, "lip_layer_lower_mean", layer.layer, layer.lower_mean))
            upper = layer.global_upper
            log_upper = math.log10(upper) if upper and upper > 0 and math.isfinite(upper) else None
            out.append(_row(family, model, seed, "lip_layer_log10_upper", layer.layer, log_upper))
            flag = _global_flag(rows, layer, model, layer.layer)
            out += _flag_rows(family, model, seed, "lip_layer_log10_upper", layer.layer, flag)
    for rec in present(summary.gap_log10_median, []):  # --gap: median log10 over examples, per layer and rho
        if rec.layer == "model":
            out.append(_row(family, rec.model, seed, "lip_log10_layerwise", "model", rec.layerwise_estimate))
            cond = f"rho={rec.rho:g}"
            out.append(_row(family, rec.model, seed, "lip_log10_local", cond, rec.local_upper))
            flag = vacuity.log10_vacuous(rec.local_upper, rec.empirical)
            out += _flag_rows(family, rec.model, seed, "lip_log10_local", cond, flag)
    return out


def crown_scores(summary: LipschitzSummary, seed: int) -> list[dict]:
    """The CROWN piece: per model and radius, the median log10 of linear bound propagation's certified local
    constant over the examples (``lip_log10_crown``, condition ``rho=<r>``), flagged when vacuous. Its other gap
    columns repeat what the lipschitz-vision piece scores on more examples, so they are left out."""
    out = []
    for rec in present(summary.gap_log10_median, []):
        if rec.layer == "model":
            cond, crown = f"rho={rec.rho:g}", present(rec.local_crown)
            out.append(_row("image", rec.model, seed, "lip_log10_crown", cond, crown))
            out += _flag_rows(
                "image", rec.model, seed, "lip_log10_crown", cond, vacuity.log10_vacuous(crown, rec.empirical)
            )
    return out


def vacuous_cells(scores: pd.DataFrame, family: str, metric: str) -> set[tuple[str, str]]:
    """(model, condition) of a certified score that is vacuous in at least one seed."""
    flag = VACUOUS_SCORES.get(metric)
    if flag is None or scores.empty:
        return set()
    sel = scores[(scores["family"] == family) & (scores["metric"] == flag) & (scores["value"] > 0)]
    return set(zip(sel["model"], sel["condition"], strict=True))


def certify_scores(rows: pd.DataFrame, seed: int) -> list[dict]:
    """Per model and sigma: mean certified L2 radius of the true class (0 where not certified) and certified accuracy
    at radius 0 (the smoothed classifier's certified clean accuracy)."""
    certs = rows[rows["kind"] == "certificate"] if "kind" in rows.columns else rows
    out = []
    for (model, sigma), grp in certs.groupby(["model", "sigma"], sort=False):
        radius = grp["certified_correct_radius"].astype(float).fillna(0.0).clip(lower=0.0)
        cond = f"sigma={float(sigma):g}"
        out.append(_row("image", model, seed, "certified_radius_mean", cond, radius.mean()))
        out.append(_row("image", model, seed, "certified_acc", cond, float((radius > 0).mean())))
    return out


def seqlen_lm_scores(summary: StudySeqlenSummary, seed: int) -> list[dict]:
    out = []
    for model, m in summary.models.items():
        out.append(_row("lm", model, seed, "seqlen_slope", "last-token gain", m.slope))
        out += [_row("lm", model, seed, "seqlen_gain", f"N={n}", v) for n, v in m.mean_by_n.items()]
    return out


def seqlen_layer_scores(rows: pd.DataFrame, seed: int) -> list[dict]:
    out = []
    for kind, grp in rows.groupby("kind", sort=False):
        grp = grp.sort_values("n")
        out += [_row("layer", kind, seed, "seqlen_perturbation", f"N={int(r.n)}", r.mean_perturbation)
                for r in grp.itertuples()]  # fmt: skip
        out.append(_row("layer", kind, seed, "seqlen_slope", "attention layer",
                        growth_slope(list(grp["n"]), list(grp["mean_perturbation"]))))  # fmt: skip
    return out


def mcnemar_rows(rows: pd.DataFrame, baseline: str, seed: int) -> list[dict]:
    """Per (variant, attack, eps): accuracies of both models on the same examples and McNemar's exact p."""
    out = []
    if baseline not in set(rows["model"]):
        return out
    key = ["example_id", "attack", "eps"]
    base = rows[rows["model"] == baseline][key + ["correct"]]
    for variant in [m for m in pd.unique(rows["model"]) if m != baseline]:
        var = rows[rows["model"] == variant][key + ["correct"]]
        both = base.merge(var, on=key, suffixes=("_b", "_v"))
        for (attack, eps), g in both.groupby(["attack", "eps"], sort=True):
            b = int((g.correct_b & ~g.correct_v).sum())
            c = int((~g.correct_b & g.correct_v).sum())
            out.append(
                {
                    "baseline": baseline, "variant": str(variant), "seed": int(seed), "attack": str(attack),
                    "eps": float(eps), "n": int(len(g)), "acc_baseline": float(g.correct_b.mean()),
                    "acc_variant": float(g.correct_v.mean()), "b": b, "c": c, "p": mcnemar_exact(b, c),
                }
            )  # fmt: skip
    return out


@dataclass
class StudyScores:
    """Everything the claims and the write-up are computed from."""

    scores: pd.DataFrame
    mcnemar: pd.DataFrame
    failed_checks: pd.DataFrame  # the engines' sanity checks that did not pass (warn or fail), per piece

    @classmethod
    def from_records(
        cls, scores: Iterable[dict], mcnemar: Iterable[dict] = (), checks: Iterable[dict] = ()
    ) -> StudyScores:
        s = pd.DataFrame(list(scores), columns=list(SCORE_COLUMNS))
        m = pd.DataFrame(list(mcnemar), columns=list(MCNEMAR_COLUMNS))
        c = pd.DataFrame(list(checks), columns=list(CHECK_COLUMNS))
        return cls(s, m, c)


def failed_checks(run: Run, piece_id: str) -> list[dict]:
    """The run's sanity checks whose status is not ``pass``."""
    return [
        {"piece": piece_id, "model": c.model, "name": c.name, "status": c.status, "detail": c.detail}
        for c in run.summary.sanity_checks()
        if c.status != "pass"
    ]


def scores_from_run(kind: str, run: Run, seed: int, baseline: str | None = None) -> tuple[list[dict], list[dict]]:
    """(score rows, McNemar rows) of one finished piece's run folder."""
    from . import plan as P

    def summary(cls: type[S]) -> S:
        if not isinstance(run.summary, cls):
            raise RobfiltError(f"{run.path} holds a {run.kind} run, not the study's {kind} piece; re-run the study.")
        return run.summary

    if kind == P.VISION_ATTACK:
        scores = image_attack_scores(summary(ImageAttackSummary), seed)
        return scores, mcnemar_rows(run.rows, baseline, seed) if baseline else []
    if kind == P.VISION_CORRUPTION:
        return corruption_scores(summary(CorruptionSummary), seed), []
    if kind == P.LM_ATTACK:
        return lm_scores(summary(LMAttackSummary), seed), []
    if kind == P.LIPSCHITZ_VISION:
        return lipschitz_scores(summary(LipschitzSummary), "image", seed, run.rows), []
    if kind == P.CERTIFY_VISION:
        return certify_scores(run.rows, seed), []
    if kind == P.LIPSCHITZ_CROWN:
        return crown_scores(summary(LipschitzSummary), seed), []
    if kind == P.LIPSCHITZ_LM:
        return lipschitz_scores(summary(LipschitzSummary), "lm", seed, run.rows), []
    if kind == P.SEQLEN_LM:
        return seqlen_lm_scores(summary(StudySeqlenSummary), seed), []
    if kind == P.SEQLEN_LAYER:
        return seqlen_layer_scores(run.rows, seed), []
    raise ValueError(f"unknown piece kind {kind!r}")
