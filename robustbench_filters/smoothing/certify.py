"""CERTIFY and PREDICT of Cohen, Rosenfeld & Kolter (2019), "Certified Adversarial Robustness via Randomized
Smoothing", Section 3.2 / Algorithm 1, vectorised over examples.

CERTIFY(f, sigma, x, n0, n, alpha):
    counts0 = SAMPLE(f, x, n0, sigma);  cA = argmax counts0          # guess the top class
    counts  = SAMPLE(f, x, n, sigma);   pA_lower = LowerConf(counts[cA], n, 1 - alpha)
    if pA_lower > 1/2: return cA with radius sigma * Phi^-1(pA_lower)  else ABSTAIN

PREDICT(f, sigma, x, n, alpha):
    counts = SAMPLE(f, x, n, sigma);  nA, nB = the top two counts
    if BinomPValue(nA, nA + nB, 0.5) <= alpha: return cA  else ABSTAIN

The two sample sets of CERTIFY are independent (different noise phases), as the paper's guarantee needs: with
probability at least 1 - alpha per example, a returned class is the smoothed classifier's class and the whole
L2 ball of the returned radius gets that class.

A draw on which the base classifier returns no prediction (non-finite or malformed logits, see
:func:`.sampler.sample_counts`) is nobody's vote, and an example with any such draw abstains in both CERTIFY and
PREDICT: the smoothed classifier of a model that is not a function to classes is not defined there. The run's
"model outputs finite on every noise draw" check then fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .bounds import binom_test_half, clopper_pearson_lower, radius_from_lower
from .sampler import sample_counts
from .settings import Sampling

ABSTAIN = -1

# The defaults (the certify config's, robustbench_filters.configs.CertifyConfig) and why: n0 = 100 and
# alpha = 0.001 are the paper's. n = 1000 (the paper uses 100,000) keeps CERTIFY at 1,100 forward passes per example,
# affordable on a CPU for the micro zoo; the price is a cap on the radius of sigma * Phi^-1(alpha^(1/n)) = 2.46
# sigma, which still reaches r = 0.5 at sigma = 0.25.


@dataclass(frozen=True)
class Certificates:
    """CERTIFY's output for k examples at one sigma (arrays of length k)."""

    sigma: float
    prediction: np.ndarray  # class, or ABSTAIN (-1)
    top_class_n0: np.ndarray  # the guess cA from the n0 selection draws (kept even when abstaining)
    count_top_n0: np.ndarray  # its count among the n0 draws
    count_top: np.ndarray  # count of cA among the n estimation draws
    p_lower: np.ndarray  # one-sided (1 - alpha) Clopper-Pearson lower bound on pA
    radius: np.ndarray  # sigma * Phi^-1(p_lower); 0 when abstaining
    nonfinite: np.ndarray  # draws (n0 + n) on which the model gave no prediction; > 0 forces abstention

    @property
    def abstain(self) -> np.ndarray:
        return self.prediction == ABSTAIN


def certify_from_counts(
    counts0: np.ndarray, counts: np.ndarray, sigma: float, alpha: float, n0: int | None = None, n: int | None = None
) -> Certificates:
    """CERTIFY's decision from the selection counts ``(k, C)`` and the estimation counts ``(k, C)``.

    ``n0`` / ``n``: the draws made (default: the counts' sums); draws missing from the counts were no prediction,
    and an example with any abstains. pA's bound uses all ``n`` draws, so a missing draw never helps it.
    """
    drawn0 = counts0.sum(axis=1) if n0 is None else np.full(len(counts0), n0)
    drawn = counts.sum(axis=1) if n is None else np.full(len(counts), n)
    nonfinite = (drawn0 - counts0.sum(axis=1)) + (drawn - counts.sum(axis=1))
    top = counts0.argmax(axis=1)  # ties go to the lowest class index (deterministic)
    rows = np.arange(len(top))
    count_top = counts[rows, top]
    p_lower = clopper_pearson_lower(count_top, drawn, alpha)
    certified = (p_lower > 0.5) & (nonfinite == 0)
    return Certificates(
        sigma=float(sigma),
        prediction=np.where(certified, top, ABSTAIN).astype(np.int64),
        top_class_n0=top.astype(np.int64),
        count_top_n0=counts0[rows, top].astype(np.int64),
        count_top=count_top.astype(np.int64),
        p_lower=p_lower,
        radius=np.where(certified, radius_from_lower(p_lower, sigma), 0.0),
        nonfinite=nonfinite.astype(np.int64),
    )


def certify(model: nn.Module, x: torch.Tensor, example_ids: Sequence[int], sigma: float, s: Sampling) -> Certificates:
    """CERTIFY for a batch of examples with ``s.n0`` selection and ``s.n`` estimation draws at failure probability
    ``s.alpha`` (see the module docstring); the model must be in eval mode."""
    counts0 = sample_counts(model, x, example_ids, sigma, s.n0, "select", s)
    counts = sample_counts(model, x, example_ids, sigma, s.n, "estimate", s)
    return certify_from_counts(counts0, counts, sigma, s.alpha, n0=s.n0, n=s.n)


def predict_from_counts(counts: np.ndarray, alpha: float, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """PREDICT's decision from counts ``(k, C)``: (class or ABSTAIN, two-sided p-value of top vs runner-up).

    ``n``: the draws made; an example whose counts miss some (draws with no prediction) abstains.
    """
    order = np.argsort(-counts, axis=1, kind="stable")  # ties: the lower class index ranks first
    rows = np.arange(counts.shape[0])
    top = order[:, 0]
    count_a = counts[rows, top]
    count_b = counts[rows, order[:, 1]] if counts.shape[1] > 1 else np.zeros_like(count_a)
    p_value = binom_test_half(count_a, count_b)
    complete = np.ones(len(top), dtype=bool) if n is None else counts.sum(axis=1) == n
    return np.where((p_value <= alpha) & complete, top, ABSTAIN).astype(np.int64), p_value


def predict(
    model: nn.Module, x: torch.Tensor, example_ids: Sequence[int], sigma: float, s: Sampling, phase: str = "predict"
) -> tuple[np.ndarray, np.ndarray]:
    """PREDICT for a batch of examples with ``s.n`` draws: (class or ABSTAIN, p-value). Wrong with probability at
    most ``s.alpha``."""
    counts = sample_counts(model, x, example_ids, sigma, s.n, phase, s)
    return predict_from_counts(counts, s.alpha, s.n)


__all__ = ["ABSTAIN", "Certificates", "certify", "certify_from_counts", "predict", "predict_from_counts"]
