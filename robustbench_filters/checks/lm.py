"""Sanity checks for language-model runs: embedding attacks and word-swap contamination.

They mirror the image checks in :mod:`robustbench_filters.checks` (Carlini et al. 2019 checklist) where
perplexity replaces accuracy: a stronger or larger perturbation must not *lower* perplexity. Row checks work on
the per-example table alone, so ``robfilt report`` can re-run them on a finished run folder.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import nn

from .base import FAIL, PASS, WARN, Check, ball_tolerance, model_rows
from .logits import check_finite_rows

# PGD vs FGSM: in the near-linear regime of small eps both reach the same boundary point, so a relative
# perplexity shortfall up to PGD_FGSM_NOISE is numerical noise (PASS); up to PGD_FGSM_TOL it is a WARN, beyond a FAIL.
PGD_FGSM_NOISE = 1e-3
PGD_FGSM_TOL = 0.01


def ppl(rows: pd.DataFrame) -> float:
    """Corpus perplexity of a set of rows: exp(total NLL / total predicted tokens)."""
    n = float(rows.n_tokens.sum())
    return math.exp(float(rows.nll_sum.sum()) / n) if n > 0 else float("nan")


def _paired_equal(a: pd.DataFrame, b: pd.DataFrame, cols: tuple[str, ...]) -> tuple[int, int]:
    """(number of examples, number that differ in any of ``cols``) after pairing by example_id."""
    left, right = a.set_index("example_id")[list(cols)], b.set_index("example_id")[list(cols)]
    m = left.merge(right, left_index=True, right_index=True, how="inner", suffixes=("", "_b"))
    diff = np.zeros(len(m), dtype=bool)
    for c in cols:
        diff |= ~np.isclose(m[c].to_numpy(float), m[f"{c}_b"].to_numpy(float), rtol=0, atol=0, equal_nan=True)
    return len(m), int(diff.sum())


def check_finite_outputs(rows: pd.DataFrame, model: str) -> Check:
    """Every sequence of every kind was scored on finite logits (a NaN NLL is a sequence with no prediction)."""
    sub = model_rows(rows, model)
    return check_finite_rows(pd.Series(~np.isfinite(sub.nll_sum.to_numpy(float))), model, "documents")


def check_tokens_scored(rows: pd.DataFrame, model: str) -> Check:
    """Every document gave the model at least one token to predict: a perplexity over no tokens would read as the
    score of a perfect model (word perplexity 1), so a run with such a document fails."""
    clean = model_rows(rows, model, "clean")
    empty = clean[clean.n_tokens <= 0]
    if len(empty):
        first = int(empty.example_id.iloc[0])
        return Check(
            "every document has tokens", model, FAIL,
            f"{len(empty)} of {len(clean)} documents have no tokens under this model's tokenizer (first: document "
            f"{first}); its perplexities over them are not numbers; check the tokenizer",
        )  # fmt: skip
    return Check(
        "every document has tokens", model, PASS, f"{len(clean)} documents, {int(clean.n_tokens.sum())} tokens"
    )


def check_rate0_equals_clean(rows: pd.DataFrame, model: str, attack: str = "wordswap") -> Check | None:
    """Contamination at rate 0 must reproduce the clean numbers exactly (same text, same tokens, same NLL)."""
    sub = model_rows(rows, model, "contamination")
    zero = sub[(sub.attack == attack) & (sub.eps == 0.0)]
    if zero.empty:
        return None
    n, bad = _paired_equal(zero, model_rows(rows, model, "clean"), ("nll_sum", "n_tokens", "correct_tokens"))
    if bad or n != len(zero):
        return Check("rate 0 equals clean", model, FAIL, f"{bad} of {len(zero)} documents differ from clean")
    return Check("rate 0 equals clean", model, PASS, f"{n} documents identical to clean")


def check_eps0_equals_clean(rows: pd.DataFrame, model: str) -> Check | None:
    """An embedding attack at eps = 0 must not move anything (Carlini check 4)."""
    sub = model_rows(rows, model, "adversarial")
    zero = sub[sub.eps == 0.0]
    if zero.empty:
        return None
    clean = model_rows(rows, model, "clean")
    bad = sum(_paired_equal(g, clean, ("nll_sum", "correct_tokens"))[1] for _, g in zero.groupby("attack"))
    moved = int((zero.pert_norm > 0).sum())
    if bad or moved:
        return Check("eps=0 equals clean", model, FAIL, f"{moved} perturbations moved, {bad} documents changed")
    return Check("eps=0 equals clean", model, PASS, f"{len(zero)} documents unchanged")


def check_ppl_monotone(rows: pd.DataFrame, model: str) -> Check | None:
    """Perplexity under an embedding attack never decreases as eps grows (overall and per sequence)."""
    adv = model_rows(rows, model, "adversarial")
    if adv.empty:
        return None
    bad = []
    for attack, grp in adv.groupby("attack"):
        curve = [ppl(g) for _, g in grp.groupby("eps", sort=True)]
        if any(b < a * (1 - 1e-9) for a, b in zip(curve, curve[1:], strict=False)):
            bad.append(attack)
        per = grp.assign(nll=grp.nll_sum / grp.n_tokens.clip(lower=1)).sort_values("eps")
        if per.groupby("example_id").nll.apply(lambda s: bool((s.diff().dropna() < -1e-6).any())).any():
            bad.append(f"{attack} (per document)")
    if bad:
        return Check("perplexity non-decreasing in eps", model, FAIL, f"decreases for {', '.join(sorted(set(bad)))}")
    return Check("perplexity non-decreasing in eps", model, PASS, "monotone for every attack")


def check_pgd_vs_fgsm(rows: pd.DataFrame, model: str) -> Check | None:
    """Iterative beats single-step: perplexity under PGD >= under FGSM at every shared eps."""
    adv = model_rows(rows, model, "adversarial")
    if not {"pgd", "fgsm"} <= set(adv.attack.unique()):
        return None
    worst, n_eps = 0.0, 0
    for eps in sorted(set(adv[adv.attack == "pgd"].eps) & set(adv[adv.attack == "fgsm"].eps)):
        p, f = ppl(adv[(adv.attack == "pgd") & (adv.eps == eps)]), ppl(adv[(adv.attack == "fgsm") & (adv.eps == eps)])
        worst = max(worst, (f - p) / f if f > 0 else 0.0)
        n_eps += 1
    if worst <= PGD_FGSM_NOISE:
        return Check(
            "PGD at least as strong as FGSM", model, PASS, f"PGD perplexity >= FGSM (within 0.1%) at {n_eps} eps values"
        )
    status = WARN if worst <= PGD_FGSM_TOL else FAIL
    return Check(
        "PGD at least as strong as FGSM", model, status, f"PGD perplexity below FGSM by up to {100 * worst:.2f}%"
    )


def check_embedding_ball(rows: pd.DataFrame, model: str) -> Check | None:
    """Every embedding perturbation lies inside its per-token ball, and every NLL is finite."""
    adv = model_rows(rows, model, "adversarial")
    if adv.empty:
        return None
    over = adv.pert_norm > adv.eps_abs + adv.eps_abs.map(ball_tolerance)
    bad = ~np.isfinite(adv.nll_sum.to_numpy(float)) | ~np.isfinite(adv.pert_norm.to_numpy(float))
    if over.any() or bad.any():
        worst = float((adv.pert_norm - adv.eps_abs).max())
        return Check(
            "inside eps-ball, finite",
            model,
            FAIL,
            f"{int(over.sum())} outside the ball (worst excess {worst:.2e}), {int(bad.sum())} non-finite",
        )
    return Check("inside eps-ball, finite", model, PASS, f"{len(adv)} perturbations checked")


def check_contamination_rate(rows: pd.DataFrame, model: str) -> Check | None:
    """Word swap touches rate * eligible words, within one word per sequence (stochastic rounding)."""
    sub = model_rows(rows, model, "contamination")
    if sub.empty:
        return None
    off = (sub.n_swapped - sub.eps * sub.n_eligible).abs() > 1.0 + 1e-9
    if off.any():
        return Check(
            "swap rate as requested", model, FAIL, f"{int(off.sum())} of {len(sub)} documents miss it by >1 word"
        )
    got = ", ".join(
        f"{rate:g}: {100 * g.n_swapped.sum() / max(int(g.n_eligible.sum()), 1):.1f}%" for rate, g in sub.groupby("eps")
    )
    return Check("swap rate as requested", model, PASS, f"{len(sub)} documents within 1 word; swapped {got}")


def check_embedding_gradients(
    model: nn.Module, label: str, idx: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> Check:
    """Gradients of the loss w.r.t. the token embeddings are finite and non-zero (Carlini check 10)."""
    from ..models.lm_batch import sequence_nll

    emb = model.embed(idx).detach().requires_grad_(True)
    with torch.enable_grad():
        loss = sequence_nll(model.forward_embeddings(emb), targets, mask).sum()
        (grad,) = torch.autograd.grad(loss, emb)
    if not torch.isfinite(grad).all():
        return Check("finite, non-zero gradients", label, FAIL, "non-finite embedding gradients")
    zero = int((grad.flatten(1).abs().amax(1) == 0).sum())
    if zero == len(idx):
        return Check("finite, non-zero gradients", label, FAIL, "all embedding gradients are zero")
    if zero:
        return Check("finite, non-zero gradients", label, WARN, f"{zero}/{len(idx)} windows have zero gradient")
    return Check("finite, non-zero gradients", label, PASS, f"{len(idx)} windows")


def check_more_steps(ppl_base: float, ppl_more: float, label: str, factor: int) -> Check:
    """--check-masking: 5x more PGD steps must not lower perplexity beyond noise (1%)."""
    status = PASS if ppl_more >= ppl_base * (1 - PGD_FGSM_TOL) else FAIL
    return Check(
        f"{factor}x steps not weaker",
        label,
        status,
        f"perplexity {ppl_base:.3g} -> {ppl_more:.3g} with {factor}x steps",
    )
