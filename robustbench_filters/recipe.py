"""Training recipes: the hyper-parameters, their validation, their identity for checkpoint matching, the defaults
per family and the learning-rate schedule.

Kept apart from the training loop (:mod:`.train`) because the study plan, the zoo cards and checkpoint reuse all
reason about recipes without training anything.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .errors import RobfiltError
from .family import Family


@dataclass
class Recipe:
    """A training recipe. ``steps`` wins over ``epochs`` when both are set."""

    epochs: int | None = None
    steps: int | None = None
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.02
    grad_clip: float = 1.0
    label_smoothing: float = 0.0
    augment: bool = True  # images: random shifts (pad 2) and horizontal flips
    noise_sigma: float = 0.0  # images: Gaussian data augmentation N(0, sigma^2) on the [0, 1] inputs (Cohen et al.)
    ckpt_every: int = 0  # steps between resumable states; 0 = once per epoch (images) or every 200 steps (LM)
    eval_max: int | None = None  # cap on test examples/windows for the final metric (None = all)
    tokenizer: str = "char"
    bpe_vocab: int = 512

    def validate(self) -> None:
        for name in ("epochs", "steps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise RobfiltError(f"--{name} must be positive, got {value}.")
        if self.epochs is None and self.steps is None:
            raise RobfiltError("give --epochs or --steps.")
        if self.batch_size <= 0:
            raise RobfiltError(f"--batch-size must be positive, got {self.batch_size}.")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise RobfiltError(f"--lr must be a positive number, got {self.lr}.")
        if not (math.isfinite(self.noise_sigma) and self.noise_sigma >= 0):
            raise RobfiltError(f"--noise-sigma must be a finite number >= 0, got {self.noise_sigma}.")
        if self.tokenizer not in ("char", "bpe"):
            raise RobfiltError(f"unknown tokenizer {self.tokenizer!r}; use 'char' or 'bpe'.")


# Fields added after checkpoints were already in circulation, with the value that reproduces the old behaviour.
# A card without such a field was trained with that value, and a recipe at that value keeps its old identity.
LATER_FIELDS: dict[str, Any] = {"noise_sigma": 0.0}


def recipe_identity(recipe: Recipe) -> dict[str, Any]:
    """The recipe as a dict for digests and card matching: later fields at their neutral value are left out,
    so checkpoint folders named before those fields existed keep their names."""
    return {k: v for k, v in dataclasses.asdict(recipe).items() if not (k in LATER_FIELDS and v == LATER_FIELDS[k])}


def card_recipe_value(card_recipe: dict[str, Any], key: str) -> Any:
    """A recipe field as recorded in a card, reading a missing later field as its neutral value."""
    return card_recipe.get(key, LATER_FIELDS.get(key))


DEFAULT_RECIPES: dict[Family, Recipe] = {
    Family.IMAGE: Recipe(epochs=14, batch_size=64, lr=2e-3, weight_decay=0.05, augment=False),
    Family.LM: Recipe(steps=1500, batch_size=32, lr=3e-3, weight_decay=0.1, augment=False, ckpt_every=250),
}


def lr_at(step: int, total: int, recipe: Recipe) -> float:
    """Linear warmup, then cosine decay to ``min_lr_frac * lr``."""
    warmup = max(1, int(recipe.warmup_frac * total))
    if step < warmup:
        return recipe.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    floor = recipe.min_lr_frac * recipe.lr
    return floor + 0.5 * (recipe.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))
