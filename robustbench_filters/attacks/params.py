"""What every attack is built from: the threat model (norm) and :class:`AttackParams`.

Apart from the catalogue so that the attack modules (e.g. :mod:`.strong`) can take the parameters without importing
the catalogue that lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

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
    #: the convergence check's rerun, its level: 0 none; level r doubles the steps (or queries) r times and adds r
    #: restarts (an escalating attack's round r + 1 reruns at level r + 1: twice the effort of the round before it)
    converge: int = 0
    probe: bool = False  # the eps = 0 check: a structural run, every fixed budget at its minimum

    @property
    def norm_name(self) -> str:
        """The threat model as torchattacks names it ("Linf" / "L2"): the one translation every builder uses."""
        return "Linf" if self.norm is Norm.LINF else "L2"

    def iterations(self, default: int) -> int:
        """Steps (or queries) of an iterative component whose own count is ``default``: ``steps`` when given, else
        the default. The convergence rerun never starts below the component's own count (a check that kept a budget
        the user cut would be as weak as the attack it judges) and doubles it per level."""
        base = default if self.steps is None else self.steps
        if self.converge:
            base = max(base, default)
        return base * 2 ** int(self.converge)

    def step(self, default: float) -> float:
        """The fixed step of a PGD-style component whose own step is ``default``: ``step_size`` when given; the
        convergence rerun never takes a step below the component's own."""
        if self.step_size is None:
            return default
        return max(self.step_size, default) if self.converge else self.step_size

    def restarts(self, default: int = 1) -> int:
        return default + int(self.converge)


def within_ball(attack: AttackFn, eps: float, norm: Norm) -> AttackFn:
    """A minimum-norm attack that returns x itself wherever its result lies outside the eps-ball.

    CW ignores eps altogether (and FAB may overshoot it), so without this its points at eps = 0 move and the
    "eps = 0 equals clean" check fails. Success only counts inside the ball anyway; this makes the attack
    function say so, for every caller. The slack matches the engine's float32 tolerance.
    """

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_adv = attack(x, y)
        flat = (x_adv - x).flatten(1)
        size = flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)
        inside = size <= eps * (1 + 1e-5) + 1e-6
        return torch.where(inside.view(-1, *[1] * (x.dim() - 1)), x_adv, x)

    run.attack = attack  # type: ignore[attr-defined] - what it wraps, for tests and introspection
    return run


#: ``build(model, params) -> [(component, attack(x, y) -> x_adv), ...]``: how each attack of the catalogue is built
Builder = Callable[[nn.Module, AttackParams], list[tuple[str, AttackFn]]]
