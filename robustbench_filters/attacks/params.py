"""What every attack is built from: the threat model (norm) and :class:`AttackParams`.

Apart from the catalogue so that the attack modules (e.g. :mod:`.strong`) can take the parameters without importing
the catalogue that lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.names import Norm, parse_norm  # noqa: F401 - the attack modules take them from here

AttackFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttackParams:
    """Everything an attack needs besides the model and the data."""

    eps: float
    norm: Norm
    steps: int | None  # None: the attack's documented default
    step_size: float | None  # None: the attack's documented default (PGD: 0.15 * eps)
    seed: int
    n_classes: int
    early_stop: bool = True  # an example leaves the batch once fooled (robfilt's own loops; see .early)
    converge: bool = False  # the convergence check's rerun: twice the steps (or queries) and one more restart
    probe: bool = False  # the eps = 0 check: a structural run, every fixed budget at its minimum

    def iterations(self, default: int) -> int:
        """Steps of an iterative attack: ``steps`` when given, else its default; doubled for the convergence rerun."""
        base = default if self.steps is None else self.steps
        return 2 * base if self.converge else base

    def restarts(self, default: int = 1) -> int:
        return default + 1 if self.converge else default
