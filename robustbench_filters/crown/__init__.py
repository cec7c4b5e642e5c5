"""Linear bound propagation (CROWN-style) through robfilt's DeiTs: verified robustness and local Lipschitz bounds.

The measurement tier's bound engine (no CLI yet). Public surface:

- :class:`Verifier` / :func:`verify`: lower bounds of the margins ``z_y - z_t`` over ``B_inf(x0, eps) ∩ [0, 1]^d``
  per example (:class:`Verdict`), by ``ibp``, ``crown-ibp`` or ``crown``;
- :func:`local_lipschitz`: a certified l2 Lipschitz constant of pixels -> logits on ``B_2(x0, rho) ∩ [0, 1]^d``
  (:class:`LocalLipschitz`);
- :func:`build_graph` and :data:`SUPPORTED`: which models are covered (others raise a one-line RobfiltError).

Design: every relaxation has equal lower and upper slopes (a linearisation plus an interval error), so a bound is
one linear map of the input plus an interval (:mod:`.form`); see :mod:`.propagate` for the passes.
"""

from .build import build_graph
from .lipschitz import LocalLipschitz, local_lipschitz
from .support import SUPPORTED
from .verify import METHODS, Verdict, Verifier, verify

__all__ = ["METHODS", "SUPPORTED", "LocalLipschitz", "Verdict", "Verifier", "build_graph", "local_lipschitz", "verify"]
