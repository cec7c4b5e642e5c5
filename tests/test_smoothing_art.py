"""Cross-check against ART's randomized smoothing (art.estimators.certification.randomized_smoothing).

ART draws its noise from NumPy's global RNG, ours from per-example seeded generators, so single certificates
differ by Monte-Carlo error. The comparison is statistical: both estimators must return the same classes where
the top class is clear, and radii whose difference is within what the binomial counts allow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _smoothing_models import SHAPE, Linear3, TinyMLP, linear_examples

from robustbench_filters.smoothing import Sampling, certify, clopper_pearson_lower, sample_counts
from robustbench_filters.smoothing.bounds import radius_from_lower

pytest.importorskip("statsmodels")  # ART's certify() computes its bound with statsmodels
art_rs = pytest.importorskip("art.estimators.certification.randomized_smoothing")

SIGMA, N0, N, ALPHA = 0.25, 100, 1000, 0.001


def _art_certify(model: torch.nn.Module, x: torch.Tensor, classes: int) -> tuple[np.ndarray, np.ndarray]:
    np.random.seed(0)
    est = art_rs.PyTorchRandomizedSmoothing(
        model=model,
        loss=torch.nn.CrossEntropyLoss(),
        input_shape=SHAPE,
        nb_classes=classes,
        clip_values=(0.0, 1.0),
        sample_size=N0,
        scale=SIGMA,
        alpha=ALPHA,
        device_type="cpu",
    )
    pred, radius = est.certify(x.numpy().astype(np.float32), n=N, batch_size=500)
    return np.asarray(pred), np.asarray(radius)


def _radius_tolerance(p: float, z: float = 3.5) -> float:
    """Largest radius difference two independent CERTIFY runs produce when counts stay within z sd of n p."""
    sd = math.sqrt(2 * N * p * (1 - p))
    lo_k, hi_k = max(1, math.floor(N * p - z * sd)), min(N, math.ceil(N * p + z * sd))
    lo, hi = (float(radius_from_lower(clopper_pearson_lower(k, N, ALPHA), SIGMA)) for k in (lo_k, hi_k))
    return hi - lo


@pytest.mark.parametrize("which", ["linear", "mlp"])
def test_ours_and_art_agree_within_monte_carlo_error(which: str) -> None:
    if which == "linear":
        model = Linear3().eval()
        x, _ = linear_examples(model, [0.1, -0.2, 0.3, -0.4, 0.5])
        classes = 3
    else:
        model = TinyMLP(seed=3).eval()
        x = torch.rand(5, *SHAPE)
        classes = 10
    ids = list(range(len(x)))
    ours = certify(model, x, ids, SIGMA, Sampling.defaults(n0=N0, n=N, alpha=ALPHA, batch=500, seed=0))
    art_pred, art_radius = _art_certify(model, x, classes)
    # a precise reference for pA from many draws, to size the tolerance and judge which classes are clear
    ref = sample_counts(model, x, ids, SIGMA, 20_000, "reference", Sampling.defaults(seed=99, batch=2000))
    for i in ids:
        top = int(ref[i].argmax())
        p = ref[i, top] / ref[i].sum()
        tol = _radius_tolerance(p)
        assert abs(ours.radius[i] - art_radius[i]) <= tol, (i, p, ours.radius[i], art_radius[i], tol)
        if clopper_pearson_lower(ref[i, top], ref[i].sum(), ALPHA) > 0.55:  # clearly above 1/2: both must certify
            assert ours.prediction[i] == top == art_pred[i], (i, p)
    certified = ours.radius > 0
    assert certified.sum() >= 3  # the comparison covers real certificates, not only abstentions
