"""``certify_smoothed``: randomized-smoothing certificates for one model, with their summary and checks.

The unit of work is :func:`~robustbench_filters.smoothing.rows.certificate_rows` (a slice of examples); this
function is the in-process driver around it: certify, summarise, check. A shared runner can call the unit on
slices instead and hand the concatenated rows to :func:`summarize` and the checks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import Check
from ..checks.logits import require_logits
from ..core.errors import RobfiltError
from ..data.labels import check_labels_fit, label_indices
from .attack import DEFAULT_DRAWS, DEFAULT_STEPS
from .bounds import max_certifiable_radius
from .certify import DEFAULT_ALPHA, DEFAULT_BATCH, DEFAULT_N, DEFAULT_N0, validate_settings
from .rows import DEFAULT_RADII, accuracy_curve, certificate_rows, summarize
from .sampler import model_device
from .soundness import (
    ATTACK_RADII,
    attack_rows,
    check_abstention,
    check_certified_below_attack,
    check_determinism,
    check_finite_draws,
)


@dataclass
class SmoothingResult:
    """Rows (one per example and sigma), the summary at ``radii``, the accuracy curve, checks and settings."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    curve: pd.DataFrame
    checks: list[Check]
    settings: dict[str, Any]
    attacks: pd.DataFrame | None = field(default=None)


def _classes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, label: str) -> int:
    """The model's class count from a probe of the first images (finite (batch, classes) logits, or a one-line
    error); ``y`` must index those classes."""
    with torch.no_grad():
        out = model(x[:2].to(model_device(model)))
    classes = require_logits(out, len(x[:2]), model=label)
    check_labels_fit(y, classes, model=label, data="y")
    return classes


def _validate(x: torch.Tensor, y: torch.Tensor, sigmas: Sequence[float]) -> list[float]:
    if not isinstance(x, torch.Tensor):
        raise RobfiltError(f"x must be a tensor of images (N, C, H, W), got {type(x).__name__}.")
    if x.ndim != 4 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise RobfiltError(f"expected images (N, C, H, W) and labels (N,), got {tuple(x.shape)} and {tuple(y.shape)}.")
    if not len(sigmas):
        raise RobfiltError("give at least one noise level sigma, e.g. 0.25.")
    out = [float(s) for s in sigmas]
    bad = [s for s in out if not (math.isfinite(s) and s > 0)]
    if bad:
        raise RobfiltError(f"sigma must be a positive number, got {bad[0]}.")
    return out


def certify_smoothed(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sigmas: float | Sequence[float],
    *,
    example_ids: Sequence[int] | None = None,
    n0: int = DEFAULT_N0,
    n: int = DEFAULT_N,
    alpha: float = DEFAULT_ALPHA,
    batch_size: int = DEFAULT_BATCH,
    seed: int = 0,
    radii: Sequence[float] = DEFAULT_RADII,
    model_label: str = "model",
    checks: bool = True,
    attack: bool = False,
    attack_radii: Sequence[float] = ATTACK_RADII,
    attack_steps: int = DEFAULT_STEPS,
    attack_draws: int = DEFAULT_DRAWS,
    noise_device: str | None = "cpu",
) -> SmoothingResult:
    """Certify the Gaussian-smoothed ``model`` on ``(x, y)`` at each sigma (CERTIFY of Cohen et al. 2019).

    ``example_ids`` seed each example's noise (default 0..N-1; pass dataset indices so a subset gives the same
    certificates as the full set). ``checks`` adds the abstention report and the determinism re-run (cheap);
    ``attack`` adds the SmoothAdv check (a PGD attack of ``attack_steps`` x ``attack_draws`` forward/backward
    passes per example and radius, plus one PREDICT). The model is put in eval mode.
    """
    x = x.detach() if isinstance(x, torch.Tensor) else x  # the caller's images, never its autograd graph
    y = label_indices(y, len(x) if isinstance(x, torch.Tensor) else None, "y")
    sigma_list = _validate(x, y, [sigmas] if np.ndim(sigmas) == 0 else list(sigmas))
    validate_settings(n0, n, alpha)
    ids = list(range(len(y))) if example_ids is None else [int(i) for i in example_ids]
    model.eval()
    classes = _classes(model, x, y, model_label)
    t0 = time.perf_counter()
    rows = certificate_rows(
        model, x, y, ids, sigma_list, model_label=model_label, n0=n0, n=n, alpha=alpha,
        batch_size=batch_size, seed=seed, noise_device=noise_device, num_classes=classes,
    )  # fmt: skip
    certify_s = time.perf_counter() - t0
    found: list[Check] = []
    attacks = None
    if checks:
        found += [
            check_finite_draws(rows, model_label),
            check_abstention(rows, model_label),
            check_determinism(model, x, y, rows, batch_size),
        ]
    if attack:
        attacks = attack_rows(
            model, x, y, rows, attack_radii, steps=attack_steps, draws=attack_draws, batch_size=batch_size,
            num_classes=classes,
        )  # fmt: skip
        found.append(check_certified_below_attack(attacks, model_label))
    samples = len(ids) * len(sigma_list) * (n0 + n)
    settings = {
        "sigmas": sigma_list,
        "n0": n0,
        "n": n,
        "alpha": alpha,
        "seed": seed,
        "batch_size": batch_size,
        "n_examples": len(ids),
        "radii": [float(r) for r in radii],
        "max_certifiable_radius": {str(s): max_certifiable_radius(s, n, alpha) for s in sigma_list},
        "certify_wall_s": round(certify_s, 3),
        "samples_per_s": round(samples / max(certify_s, 1e-9), 1),
        "noise_device": noise_device or "model",
    }
    if attack:
        settings.update(
            attack_radii=[float(r) for r in attack_radii], attack_steps=attack_steps, attack_draws=attack_draws
        )
    summary = summarize(rows, radii)
    if attacks is not None:
        robust = attacks.groupby(["model", "sigma", "radius"])["robust"].mean().rename("smoothed_robust_acc")
        summary = summary.merge(robust.reset_index(), on=["model", "sigma", "radius"], how="left")
    return SmoothingResult(rows, summary, accuracy_curve(rows), found, settings, attacks)


__all__ = ["SmoothingResult", "certify_smoothed"]
