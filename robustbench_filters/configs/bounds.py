"""Configs of bound runs: Lipschitz estimation and randomized-smoothing certification."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import RobfiltError
from ..family import Family
from .base import (
    ImageDataConfig,
    RunConfig,
    _positive,
    _unique,
)


@dataclass(frozen=True, kw_only=True)
class LipschitzConfig(RunConfig):
    """Lower and certified upper Lipschitz bounds per example (see :mod:`.lipschitz.run`)."""

    KIND: ClassVar[str] = "lipschitz"
    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = "Lipschitz"

    method: str = "exact"
    bounds: bool = True
    per_layer: bool = False
    gap: bool = False
    gap_rhos: tuple[float, ...] = (1e-3,)
    gap_taylor: bool = True
    rho: float = 0.1
    power_iters: int = 50
    tol: float = 1e-5
    ratio_steps: int = 20
    seq_len: int = 64
    dtype: str | None = None
    inputs: Any = field(default=None, compare=False)
    input_labels: Any = field(default=None, compare=False)
    n_examples: int = 16
    batch_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        from ..lipschitz.methods import parse_method

        self._set("method", parse_method(self.method).value)
        self._set("gap_rhos", _unique(map(float, self.gap_rhos), "--gap-rho"))
        _positive(self.power_iters, "power iterations")
        _positive(self.seq_len, "--seq-len")
        if isinstance(self.ratio_steps, bool) or int(self.ratio_steps) < 0:
            raise RobfiltError(f"ratio steps must be >= 0, got {self.ratio_steps}.")
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise RobfiltError(f"--rho must be a positive finite l2 radius, got {self.rho}; pass e.g. 0.1.")
        if not (math.isfinite(self.tol) and self.tol >= 0):
            raise RobfiltError(f"tolerance must be >= 0, got {self.tol}.")
        if self.dtype not in (None, "float32", "float64"):
            raise RobfiltError("dtype must be 'float32' or 'float64' (never half precision for certificates).")
        if self.inputs is not None and len(self.inputs) < self.n_examples:
            raise RobfiltError(f"inputs hold {len(self.inputs)} examples but n_examples is {self.n_examples}.")


@dataclass(frozen=True, kw_only=True)
class CertifyConfig(ImageDataConfig):
    """Randomized-smoothing certificates (Cohen et al. 2019) of image models (see :mod:`.smoothing.run`).

    The default checkpoint is the noise-trained zoo (``zoo:sigma0.25``): a smoothed classifier is only as good as
    its base model is at classifying noisy inputs. Every run also attacks the smoothed classifier (SmoothAdv PGD)
    on its first ``attack_examples`` examples to check that no certificate claims more than an attack can refute.
    """

    KIND: ClassVar[str] = "certify"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "certify"

    sigmas: tuple[float, ...] = (0.25,)
    n0: int = 100
    n: int = 1000
    alpha: float = 0.001
    radii: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    attack_examples: int = 8
    attack_radii: tuple[float, ...] = (0.25, 0.5)
    attack_steps: int = 20
    attack_draws: int = 16
    checkpoint: str | None = "zoo:sigma0.25"
    n_examples: int = 64
    batch_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        sigmas = _unique(map(float, self.sigmas), "--sigma")
        if not sigmas or any(not (s > 0 and math.isfinite(s)) for s in sigmas):
            raise RobfiltError(f"--sigma needs positive noise levels, got {list(sigmas)}; e.g. --sigma 0.12,0.25,0.5.")
        self._set("sigmas", tuple(sorted(sigmas)))
        _positive(self.n0, "--n0")
        _positive(self.n, "--n")
        if not (0.0 < self.alpha < 0.5):
            raise RobfiltError(
                f"--alpha must be in (0, 0.5), got {self.alpha}; it is the failure probability of a certificate."
            )
        for what, values in (("--radii", self.radii), ("--attack-radii", self.attack_radii)):
            if any(not (r >= 0 and math.isfinite(r)) for r in values):
                raise RobfiltError(f"{what} must be L2 radii >= 0, got {list(values)}.")
        self._set("radii", tuple(sorted(_unique(map(float, self.radii), "--radii"))))
        self._set("attack_radii", tuple(sorted(_unique(map(float, self.attack_radii), "--attack-radii"))))
        if isinstance(self.attack_examples, bool) or int(self.attack_examples) < 0:
            raise RobfiltError(f"--attack-examples must be 0 or more, got {self.attack_examples}.")
        _positive(self.attack_steps, "--attack-steps")
        _positive(self.attack_draws, "--attack-draws")
