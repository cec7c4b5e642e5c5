"""PGD adversarial training's inner maximisation (Madry et al. 2018) and the robust metric a training card records.

Training on PGD points is what makes a model robust; measuring robustness is what the attacks package does. The
training side reuses the engine's PGD (:class:`..attacks.early.EarlyPGD`, torchattacks' loop) with early exit off:
every example gets all its steps, as in Madry et al., because a point that barely fools the model is a weaker
training signal than the last iterate. Step size ``2.5 * eps / steps`` (Madry et al.'s rule: the steps can walk
across the ball and back), a uniform random start.

Determinism: the random start of training step ``t`` is drawn from a generator seeded by (seed, t) inside a forked
random state, so a resumed training draws exactly what an uninterrupted one drew, and the training's own random
state is untouched. The model is attacked in eval mode with frozen weights (the attack needs input gradients only);
its mode and flags come back afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..attacks.early import EarlyPGD, EarlyPGDL2
from ..attacks.image_models import frozen
from ..attacks.params import Norm, parse_norm
from ..core.seeds import derived_seed
from .recipe import Recipe

#: the robust metric a card records: PGD with this many steps at the training eps (a weaker attack than the
#: default; the card says which, and ``robfilt attack`` measures the model with the default)
EVAL_STEPS = 20


@dataclass(frozen=True)
class PGDTraining:
    """PGD adversarial training's settings: the ball (``eps``, ``norm``) and the inner steps."""

    eps: float
    steps: int
    norm: Norm = Norm.LINF

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> PGDTraining | None:
        """The settings of a recipe's ``adversarial``/``train_*`` fields (validated there); None without one."""
        if recipe.adversarial is None:
            return None
        return cls(float(recipe.train_eps or 0.0), int(recipe.train_steps), parse_norm(recipe.train_norm) or Norm.LINF)

    @property
    def step_size(self) -> float:
        return 2.5 * self.eps / self.steps

    def _attack(self, model: nn.Module, steps: int, step_size: float) -> nn.Module:
        cls = EarlyPGD if self.norm is Norm.LINF else EarlyPGDL2
        return cls(model, self.eps, step_size, steps, early_stop=False)

    def points(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> torch.Tensor:
        """The PGD points of a training batch (full steps, no early exit), drawn from ``seed`` alone."""
        return _attacked(self._attack(model, self.steps, self.step_size), model, x, y, seed)

    @torch.no_grad()
    def robust_accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int, batch: int = 500) -> float:
        """Accuracy under PGD-``EVAL_STEPS`` (step 0.15 eps, the catalogue's ``pgd``) at the training ball: the
        card's robust metric (a fixed attack, so cards compare; an upper bound on robust accuracy)."""
        atk = self._attack(model, EVAL_STEPS, 0.15 * self.eps)
        atk.early_stop = True  # the same examples broken, fewer passes
        hits = 0
        for i in range(0, len(y), batch):
            xa = _attacked(atk, model, x[i : i + batch], y[i : i + batch], derived_seed(seed, 1, i))
            hits += int((model(xa).argmax(-1) == y[i : i + batch]).sum())
        return hits / max(len(y), 1)


def _attacked(atk: nn.Module, model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> torch.Tensor:
    """``atk(x, y)`` in eval mode with frozen weights and a private random state seeded by ``seed``."""
    training = [(m, m.training) for m in model.modules()]
    try:
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []), frozen([model]):
            torch.manual_seed(seed)
            model.eval()
            with torch.enable_grad():
                return atk(x, y).detach()
    finally:
        for m, mode in training:
            m.training = mode


__all__ = ["EVAL_STEPS", "PGDTraining"]
