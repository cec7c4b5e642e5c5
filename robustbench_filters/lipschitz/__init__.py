"""Lipschitz estimation: empirical lower bounds, certified upper bounds, per-layer profiles.

Lower bounds (per example, rigorous): dense Jacobian + SVD (``exact``), jvp/vjp power iteration (``power``) and
pair-ratio ascent (``ratio``). Upper bounds (certified): exact per-layer constants composed along the model's
:class:`.chain.Chain` with the residual and boosting (GRC) rules, globally and on a ball around each input, plus
the certified radius that follows. Whether a certified number is vacuous is decided by
:mod:`robustbench_filters.stats.vacuity`. The gap analysis, the ablations and the second-order bound live in
:mod:`.research`. The formulas and their sources are in notes/lipschitz.md; each module's docstring names the
section it uses.
"""

from .certify import certified_radius, trace_bounds
from .jacobian import jacobian_norm_exact, jacobian_norm_power
from .ratio import pair_ratio_ascent
from .run import Lipschitz, LipschitzResult
from .seqlen import sequence_length_study
from .target import Target, make_target

__all__ = [
    "Lipschitz",
    "LipschitzResult",
    "Target",
    "certified_radius",
    "jacobian_norm_exact",
    "jacobian_norm_power",
    "make_target",
    "pair_ratio_ascent",
    "sequence_length_study",
    "trace_bounds",
]
