"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019): certified L2 robustness of a Gaussian-smoothed model.

Modules: ``settings`` (:class:`Sampling`, the settings record every engine function takes), ``sampler`` (batched,
per-example-seeded Monte-Carlo counts), ``bounds`` (Clopper-Pearson, binomial test, radius), ``certify`` (CERTIFY
and PREDICT), ``rows`` (per-example rows and the certified-accuracy summary), ``attack`` (SmoothAdv PGD on the
smoothed classifier), ``soundness`` (checks), ``run`` (the measurement behind ``robfilt certify`` and
:func:`robustbench_filters.certify`, which certifies tensors too: ``data=(x, y)``) and ``zoo`` (certificates
recorded in the noise-trained zoo cards).
"""

from .attack import smooth_adv_pgd
from .bounds import clopper_pearson_interval, clopper_pearson_lower, max_certifiable_radius
from .certify import ABSTAIN, Certificates, certify, predict
from .rows import ROW_COLUMNS, accuracy_curve, certificate_rows, certified_accuracy, summarize
from .sampler import sample_counts
from .settings import Sampling
from .soundness import attack_rows, check_abstention, check_certified_below_attack, check_determinism

__all__ = [
    "ABSTAIN",
    "ROW_COLUMNS",
    "Certificates",
    "Sampling",
    "accuracy_curve",
    "attack_rows",
    "certificate_rows",
    "certified_accuracy",
    "certify",
    "check_abstention",
    "check_certified_below_attack",
    "check_determinism",
    "clopper_pearson_interval",
    "clopper_pearson_lower",
    "max_certifiable_radius",
    "predict",
    "sample_counts",
    "smooth_adv_pgd",
    "summarize",
]
