"""Soundness checks for randomized-smoothing certificates, as :class:`robustbench_filters.checks.Check` objects.

(a) A certificate is a claim about every point of an L2 ball, so no attack may beat it: certified accuracy at
    radius r must not exceed the smoothed classifier's empirical robust accuracy under a SmoothAdv PGD attack
    of radius r, and no example certified at r may be confidently assigned another class at its adversarial
    point. (b) The abstention rate is reported, since certified accuracy counts abstentions as failures and a
    high rate says sigma is too large for the model (or n too small). (c) Same seed, same certificates: a small
    batch is re-certified with a different batch size and must give identical rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import FAIL, PASS, WARN, Check
from ..checks.logits import FINITE_OUTPUTS
from .attack import smooth_adv_pgd
from .certify import ABSTAIN, predict_from_counts
from .rows import certificate_rows
from .sampler import sample_counts
from .settings import Sampling

ABSTAIN_WARN = 0.25  # above this abstention rate the certified numbers mostly measure indecision
DETERMINISM_EXAMPLES = 4


def attack_rows(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rows: pd.DataFrame,
    radii: Sequence[float],
    s: Sampling,
) -> pd.DataFrame:
    """Attack the smoothed classifier at each radius and re-decide with PREDICT at the adversarial point.

    ``rows`` are the certificate rows of exactly these examples (one model, any sigmas), in the order of ``x``.
    Only examples certified correct at radius 0 are attacked: for the others the zero perturbation already defeats
    the smoothed classifier. PREDICT uses ``s`` (phase "adversarial:<radius>"), the settings the rows were
    certified with.
    One row per (example, sigma, radius): robust (PREDICT == label at the adversarial point and correct at x),
    certified (certified_correct_radius >= radius), adversarial_prediction (-1 abstain or not attacked),
    nonfinite_draws (PREDICT's draws with no prediction: PREDICT then abstains).
    """
    out = []
    for sigma, grp in rows.groupby("sigma", sort=True):
        ids = grp["example_id"].to_numpy()
        if len(ids) != len(x):
            raise ValueError(f"rows for sigma {sigma} hold {len(ids)} examples but x holds {len(x)}")
        n = s.n
        correct = grp["correct"].to_numpy()
        attacked = np.flatnonzero(correct)
        for r in radii:
            pred_adv = np.full(len(ids), ABSTAIN, dtype=np.int64)
            nonfinite = np.zeros(len(ids), dtype=np.int64)
            if len(attacked):
                sel = torch.as_tensor(attacked)
                x_adv = smooth_adv_pgd(model, x[sel], y[sel], ids[attacked], float(sigma), float(r), s)
                counts = sample_counts(model, x_adv, ids[attacked], float(sigma), n, f"adversarial:{float(r)!r}", s)
                pred_adv[attacked], _ = predict_from_counts(counts, s.alpha, n)
                nonfinite[attacked] = n - counts.sum(axis=1)
            labels = grp["label"].to_numpy()
            out.append(
                pd.DataFrame(
                    {
                        "model": grp["model"].to_numpy(),
                        "example_id": ids,
                        "sigma": float(sigma),
                        "radius": float(r),
                        "attacked": correct,
                        "adversarial_prediction": pred_adv,
                        "robust": correct & (pred_adv == labels),
                        "certified": grp["certified_correct_radius"].to_numpy() >= r,
                        "contradicted": (grp["certified_correct_radius"].to_numpy() >= r)
                        & (pred_adv != labels)
                        & (pred_adv != ABSTAIN),
                        "nonfinite_draws": nonfinite,
                    }
                )
            )
    return pd.concat(out, ignore_index=True)


def check_certified_below_attack(attacks: pd.DataFrame, model: str) -> Check:
    """(a) Certified accuracy <= empirical smoothed robust accuracy at every attacked radius.

    FAIL when an example certified at r is confidently (PREDICT, p <= alpha) given another class at its
    adversarial point. Every other certified-but-not-robust example is one PREDICT abstained on, so when
    certified accuracy still exceeds robust accuracy the check WARNs: near the edge of its ball the smoothed
    classifier's top-class probability approaches 1/2, where PREDICT may abstain without contradicting anything.
    """
    name = "certified <= robust accuracy (SmoothAdv PGD)"
    sub = attacks[attacks["model"] == model]
    if sub.empty:
        return Check(name, model, PASS, "no attack rows")
    parts, status = [], PASS
    for (sigma, r), grp in sub.groupby(["sigma", "radius"], sort=True):
        cert, rob = grp["certified"].mean(), grp["robust"].mean()
        contradicted = int(grp["contradicted"].sum())
        abstained = int((grp["certified"] & (grp["adversarial_prediction"] == ABSTAIN)).sum())
        parts.append(f"s={sigma:g} r={r:g}: certified {100 * cert:.1f}% vs robust {100 * rob:.1f}%")
        if contradicted:
            status = FAIL
            parts[-1] += f" ({contradicted} certified examples confidently misclassified)"
        elif cert > rob:
            status = WARN if status == PASS else status
            parts[-1] += f" ({abstained} certified examples abstained at the adversarial point)"
    return Check(name, model, status, "; ".join(parts))


def check_finite_draws(rows: pd.DataFrame, model: str) -> Check:
    """Every noise draw (certificate and attack rows) gave finite logits; a draw that did not is no vote and its
    example abstained, but the numbers no longer describe a smoothed classifier, so the check fails."""
    name = f"{FINITE_OUTPUTS} on every noise draw"
    sub = rows[rows["model"] == model]
    bad = sub["nonfinite_draws"].fillna(0) if "nonfinite_draws" in sub else pd.Series(0, index=sub.index)
    if int(bad.sum()):
        return Check(name, model, FAIL, f"{int(bad.sum())} draws over {int((bad > 0).sum())} rows gave NaN/inf or "
                     "malformed logits; those examples abstain")  # fmt: skip
    return Check(name, model, PASS, f"{len(sub)} rows, no draw without a prediction")


def check_abstention(rows: pd.DataFrame, model: str, warn_above: float = ABSTAIN_WARN) -> Check:
    """(b) The abstention rate per sigma; WARN above ``warn_above``."""
    sub = rows[rows["model"] == model]
    rates = sub.groupby("sigma")["abstain"].mean()
    detail = ", ".join(f"sigma {s:g}: {100 * v:.1f}% of {int((sub.sigma == s).sum())}" for s, v in rates.items())
    status = WARN if (rates > warn_above).any() else PASS
    return Check("abstention rate", model, status, detail or "no rows")


def check_determinism(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rows: pd.DataFrame,
    s: Sampling,
    k: int = DETERMINISM_EXAMPLES,
) -> Check:
    """(c) Re-certify the first ``k`` examples with another noise batch; the rows must be identical.

    ``rows`` are :func:`certificate_rows` of ``(x, y)`` with ``s``, in the order of ``x`` (so its first ids are x's
    first rows).
    """
    name = "same seed, same certificates"
    label = str(rows["model"].iloc[0])
    first = rows[rows["example_id"].isin(rows["example_id"].iloc[:k])]
    ids = first["example_id"].unique()[:k]
    other = max(1, s.batch // 3 + 1) if s.batch > 1 else 7
    sigmas = sorted(first["sigma"].unique())
    again = certificate_rows(model, x[: len(ids)], y[: len(ids)], ids, sigmas, s.replace(batch=other), label)
    key = ["sigma", "example_id"]
    a = first.sort_values(key).reset_index(drop=True)
    b = again.sort_values(key).reset_index(drop=True)
    cols = ["prediction", "count_top_n0", "count_top", "p_lower", "certified_radius"]
    if len(a) != len(b) or not a[cols].equals(b[cols]):
        return Check(name, label, FAIL, f"re-running {len(ids)} examples with batch size {other} changed the rows")
    return Check(name, label, PASS, f"{len(ids)} examples re-certified with batch size {other} (was {s.batch})")


__all__ = ["attack_rows", "check_abstention", "check_certified_below_attack", "check_determinism", "check_finite_draws"]
