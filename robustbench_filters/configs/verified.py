"""Configs of ``robfilt certify``: the method option both kinds of certificate share, and the verified-robustness
run (``--method ibp|crown-ibp|crown``, see :mod:`robustbench_filters.crown.run`).

``robfilt certify`` makes one of two kinds of run, chosen by ``method``: randomized smoothing (the default,
:class:`~.bounds.CertifyConfig`, kind ``certify``) or a bound propagation through the model (:class:`VerifiedConfig`,
kind ``verified``). ``method`` is declared once, on :class:`CertifyMethod`, which both configs extend; every other
option belongs to one kind, and :func:`~robustbench_filters.configs.certify_config_class` refuses an option of the
other kind in one line that names the method it belongs to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..core.counts import UpTo
from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import BOUND_METHODS, BOUND_REFRESH, SMOOTHING
from ..core.surface import flag, given
from ..summaries.kinds import VERIFIED
from .base import ImageDataConfig, _unique
from .options import Many, Number, option

#: the Linf eps of a verified run by default: where the micro zoo DeiTs verify some examples (docs/certify.md)
DEFAULT_VERIFIED_EPS = (1e-4, 3e-4, 1e-3)


@dataclass(frozen=True, kw_only=True)
class CertifyMethod(ImageDataConfig):
    """What both kinds of ``robfilt certify`` run share: the method, declared here once."""

    method: str = option(
        SMOOTHING,
        help="smoothing (randomized smoothing, L2 radii of the smoothed classifier), or a verification of the model "
        "itself at Linf eps: ibp, crown-ibp or crown (the tightest; see docs/certify.md).",
        panel="Certify",
    )

    def _check_method(self, allowed: tuple[str, ...]) -> None:
        if self.method not in allowed:
            raise RobfiltError(
                f"{flag('method')} must be one of {', '.join(allowed)} here, got {self.method!r}; "
                f"e.g. {given('method', 'crown')}."
            )


@dataclass(frozen=True, kw_only=True)
class VerifiedConfig(CertifyMethod):
    """Verified robust accuracy by bound propagation (see :mod:`robustbench_filters.crown.run`): per example and
    Linf eps, verified (every wrong class's margin lower bound over the box is positive), broken (the default
    attack found a misclassified point) or unknown."""

    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "--method ibp/crown-ibp/crown"
    KIND: ClassVar[str] = VERIFIED

    eps: tuple[float, ...] | None = option(
        None, help="--method ibp/crown-ibp/crown: Linf budgets on the [0, 1] scale (default: 1e-4,3e-4,1e-3).",
        value=Many(Number()), panel="Certify",
    )  # fmt: skip
    refresh: str = option(
        "deep", help="--method crown: re-tighten intermediate bounds back to the input at the residual after "
        "each attention sublayer (deep), at every residual and LayerNorm variance (full: about twice deep's cost, "
        "verifies about twice the eps), at every bound a relaxation reads, attention logits and softmax included "
        "(all: about 6 times full's cost; the one that verifies the normally trained zoo DeiTs at 1e-3), within "
        "each sublayer (inner: about a third of deep's cost, looser beyond eps ~ 1e-4), or less (residual, none).",
        panel="Certify",
    )  # fmt: skip
    min_margin: float = option(
        1e-4, help="A margin lower bound must exceed this (logits) to verify: keeps float32 rounding of the model "
        "an attack runs from contradicting a float64 bound.", value=Number(), panel="Certify",
    )  # fmt: skip
    n_examples: int | None = UpTo(16)
    batch_size: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_method(BOUND_METHODS)
        eps = DEFAULT_VERIFIED_EPS if self.eps is None else _unique(map(float, self.eps), "eps")
        if not eps or any(not (e >= 0 and math.isfinite(e)) for e in eps):
            raise RobfiltError(
                f"{flag('eps')} must be Linf budgets >= 0, got {list(eps)}; e.g. {given('eps', '1e-4,1e-3')}."
            )
        self._set("eps", tuple(sorted(eps)))
        if self.refresh not in BOUND_REFRESH:
            raise RobfiltError(f"{flag('refresh')} must be one of {', '.join(BOUND_REFRESH)}, got {self.refresh!r}.")
        if self.method != "crown" and self.refresh != "deep":
            raise RobfiltError(f"{flag('refresh')} is read by {given('method', 'crown')} only; drop it.")
        if not (math.isfinite(self.min_margin) and self.min_margin >= 0):
            raise RobfiltError(f"{flag('min_margin')} must be a finite number >= 0, got {self.min_margin}.")
