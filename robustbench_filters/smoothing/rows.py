"""Per-example certificate rows and their summary (certified accuracy against radius).

One row per (model, example, sigma). Column meanings:

- ``prediction``: CERTIFY's class, ``-1`` when it abstains; ``correct`` is ``prediction == label`` (False when
  abstaining); ``abstain`` the abstention flag.
- ``certified_radius``: the certified L2 radius of the *predicted* class, 0.0 when abstaining. A wrong
  prediction keeps its radius: it certifies that the smoothed classifier is (confidently) wrong in that ball.
- ``certified_correct_radius``: ``certified_radius`` when the prediction is correct, otherwise NaN (there is
  no certificate for the true label). Certified accuracy at r is ``mean(certified_correct_radius >= r)``; NaN
  compares False, so wrong and abstaining examples count as not certified. Never average this column with
  ``mean()`` (pandas would skip the NaNs); use :func:`certified_accuracy`.
- ``count_top_n0`` / ``count_top``: counts of the guessed class cA among the n0 selection and the n estimation
  draws; ``p_lower`` the one-sided (1 - alpha) Clopper-Pearson bound on pA.
- ``nonfinite_draws``: draws (of n0 + n) on which the model returned no prediction (NaN/inf or malformed
  logits). Such a draw is nobody's vote, the example abstains, and the run's finite-outputs check fails.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from .bounds import clopper_pearson_interval
from .certify import certify
from .settings import Sampling

ROW_COLUMNS = [
    "model",
    "example_id",
    "label",
    "sigma",
    "prediction",
    "correct",
    "abstain",
    "top_class_n0",
    "count_top_n0",
    "count_top",
    "p_lower",
    "certified_radius",
    "certified_correct_radius",
    "n0",
    "n",
    "alpha",
    "seed",
    "nonfinite_draws",
]


def certificate_rows(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    example_ids: Sequence[int],
    sigmas: float | Sequence[float],
    s: Sampling,
    model_label: str = "model",
) -> pd.DataFrame:
    """CERTIFY every example at every sigma: a DataFrame with :data:`ROW_COLUMNS` (see the module docstring).

    This is the unit a runner calls on a slice of examples; the rows of two slices concatenate to the rows of
    the union (noise is seeded per example id), so slices can run anywhere and in any order.
    """
    sigma_list = [float(sigmas)] if np.ndim(sigmas) == 0 else [float(s) for s in sigmas]
    ids = np.asarray([int(i) for i in example_ids], dtype=np.int64)
    labels = y.detach().cpu().numpy().astype(np.int64)
    frames = []
    for sigma in sigma_list:
        cert = certify(model, x, ids, sigma, s)
        correct = cert.prediction == labels
        frame = pd.DataFrame(
            {
                "model": model_label,
                "example_id": ids,
                "label": labels,
                "sigma": sigma,
                "prediction": cert.prediction,
                "correct": correct,
                "abstain": cert.abstain,
                "top_class_n0": cert.top_class_n0,
                "count_top_n0": cert.count_top_n0,
                "count_top": cert.count_top,
                "p_lower": cert.p_lower,
                "certified_radius": cert.radius,
                "certified_correct_radius": np.where(correct, cert.radius, np.nan),
                "n0": s.n0,
                "n": s.n,
                "alpha": s.alpha,
                "seed": s.seed,
                "nonfinite_draws": cert.nonfinite,
            }
        )
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)[ROW_COLUMNS]


def certified_accuracy(rows: pd.DataFrame, radius: float) -> float:
    """Fraction of rows whose true label is certified at L2 radius ``radius`` (NaN radii count as not certified)."""
    if rows.empty:
        return float("nan")
    return float((rows["certified_correct_radius"].to_numpy() >= radius).mean())


def summarize(rows: pd.DataFrame, radii: Sequence[float], level: float = 0.95) -> pd.DataFrame:
    """Certified accuracy per (model, sigma, radius) with an exact Clopper-Pearson interval at ``level``.

    Columns: model, sigma, radius, n_examples, certified, certified_acc, ci_low, ci_high, abstain_rate,
    clean_smoothed_acc (= certified accuracy at radius 0), n0, n, alpha. The interval covers the sampling of
    examples only; the Monte-Carlo failure probability alpha per certificate comes on top.
    """
    out = []
    for (model, sigma), grp in rows.groupby(["model", "sigma"], sort=True):
        radius_col = grp["certified_correct_radius"].to_numpy()
        k_examples = len(grp)
        for r in radii:
            certified = int((radius_col >= r).sum())
            low, high = clopper_pearson_interval(certified, k_examples, level)
            out.append(
                {
                    "model": model,
                    "sigma": float(sigma),
                    "radius": float(r),
                    "n_examples": k_examples,
                    "certified": certified,
                    "certified_acc": certified / k_examples,
                    "ci_low": float(low),
                    "ci_high": float(high),
                    "abstain_rate": float(grp["abstain"].mean()),
                    "clean_smoothed_acc": float(grp["correct"].mean()),
                    "n0": int(grp["n0"].iloc[0]),
                    "n": int(grp["n"].iloc[0]),
                    "alpha": float(grp["alpha"].iloc[0]),
                }
            )
    return pd.DataFrame(out)


def accuracy_curve(rows: pd.DataFrame, step: float = 0.05) -> pd.DataFrame:
    """Certified accuracy on a radius grid 0, step, 2 step, ... up to the largest certified radius (the paper's plot)."""
    finite = rows["certified_correct_radius"].dropna()
    top = float(finite.max()) if len(finite) else 0.0
    grid = np.round(np.arange(0.0, top + step, step), 10)
    return summarize(rows, radii=grid.tolist())[["model", "sigma", "radius", "certified_acc", "ci_low", "ci_high"]]


__all__ = ["ROW_COLUMNS", "accuracy_curve", "certificate_rows", "certified_accuracy", "summarize"]
