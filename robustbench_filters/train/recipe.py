"""Training recipes: the hyper-parameters, their validation, their identity for checkpoint matching, the defaults
per family and the learning-rate schedule.

Kept apart from the training loop (:mod:`.loop`) because the study plan, the zoo cards and checkpoint reuse all
reason about recipes without training anything.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..configs.options import Bool, Declared, Int, Number, Text, Tokenizer, declaration, option
from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import Norm
from ..core.surface import Surface, flag, given

_NOT_IN_SPECS = {Surface.SPEC: "a gate spec measures models; it does not train them"}


class Trainee(str, Enum):
    """What ``robfilt train`` trains: each recipe option means something for some of these only."""

    IMAGE = "image"  # a registry DeiT, from scratch or from --init weights
    LM = "lm"  # a registry language model, from scratch
    HF = "hf"  # a Hugging Face causal LM, converted and fine-tuned

    @property
    def description(self) -> str:
        return {"image": "image models", "lm": "language models trained from scratch",
                "hf": "hf: fine-tuning"}[self.value]  # fmt: skip


_IMAGE, _LM, _HF = (Trainee.IMAGE.value,), (Trainee.LM.value,), (Trainee.HF.value,)
#: the adversarial-training methods ``adversarial`` takes (train.adversarial runs them)
ADVERSARIAL_METHODS: tuple[str, ...] = ("pgd",)
#: what a Hugging Face model can be converted to before fine-tuning (hf.convert), and ``none``: the plain model,
#: fine-tuned with the same recipe (the baseline a conversion is compared with)
NO_VARIANT = "none"
VARIANTS: tuple[str, ...] = ("bsa", "grc", "bsa-grc", NO_VARIANT)


def _train(default: Any, help: str, value: Any, kinds: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """A recipe option; ``kinds``: the trainees it means something for (empty: every one)."""
    return option(default, help=help, value=value, not_on=_NOT_IN_SPECS, panel="Training", kinds=kinds, **kwargs)


@dataclass
class Recipe(Declared):
    """A training recipe. ``steps`` wins over ``epochs`` when both are set."""

    epochs: int | None = _train(None, "Epochs (images).", Int(), kinds=_IMAGE)
    steps: int | None = _train(None, "Optimizer steps (wins over --epochs).", Int())
    batch_size: int = _train(128, "Examples per optimizer step.", Int())
    lr: float = _train(2e-3, "Peak learning rate.", Number())
    weight_decay: float = _train(0.05, "AdamW weight decay.", Number())
    warmup_frac: float = _train(0.05, "Share of the steps spent in linear warmup.", Number())
    min_lr_frac: float = _train(0.02, "Cosine decay ends at this fraction of the peak learning rate.", Number())
    grad_clip: float = _train(1.0, "Clip the gradient norm to this (0: no clipping).", Number())
    label_smoothing: float = _train(0.0, "Label smoothing of the image loss.", Number(), kinds=_IMAGE)
    augment: bool = _train(
        True, "Images: random shifts (pad 2) and horizontal flips.", Bool(), kinds=_IMAGE, negatable=True
    )
    noise_sigma: float = _train(
        0.0,
        "Images: add N(0, sigma^2) noise to the [0, 1] inputs while training (for randomized smoothing).",
        Number(),
        kinds=_IMAGE,
    )
    ckpt_every: int = _train(
        0, "Steps between resumable states (0: once per epoch for images, 200 steps for LMs).", Int()
    )
    eval_max: int | None = _train(
        None,
        "Cap on the test examples (images) or documents (LMs) of the final metric (none: all).",
        Int(),
    )
    tokenizer: str = _train(
        "char",
        "LM tokenizer: char (characters) or bpe (byte-level BPE trained on the data); for hf: models a tokenizer "
        "folder instead of the model's own.",
        Tokenizer(),
        kinds=_LM + _HF,
    )
    bpe_vocab: int = _train(512, "Vocabulary size of a BPE tokenizer (--tokenizer bpe).", Int(), kinds=_LM)
    variant: str | None = _train(
        None,
        "hf: models: convert to bsa, grc or bsa-grc before fine-tuning, or none: fine-tune the plain model.",
        Text(),
        kinds=_HF,
    )
    max_length: int | None = _train(
        None,
        "hf: models: tokens per training window (default: the model's positions, at most 256).",
        Int(),
        kinds=_HF,
    )
    init: str | None = _train(
        None,
        "Images: start from these weights, zoo (the model's bundled ones) or a checkpoint folder of the same model "
        "(default: seeded random weights).",
        Text(path=True),
        kinds=_IMAGE,
    )
    adversarial: str | None = _train(
        None,
        "Images: adversarial training, pgd (Madry et al.: every batch is replaced by its PGD points inside "
        "--train-eps; step 2.5 * eps / --train-steps, random start).",
        Text(),
        kinds=_IMAGE,
    )
    train_eps: float | None = _train(
        None, "Budget of --adversarial pgd on the [0, 1] scale (e.g. 0.05).", Number(), kinds=_IMAGE
    )
    train_steps: int = _train(10, "PGD steps per batch of --adversarial pgd.", Int(), kinds=_IMAGE)
    train_norm: str = _train("linf", "Norm of --adversarial pgd: linf or l2.", Text(), kinds=_IMAGE)

    def validate(self) -> None:
        for name in ("epochs", "steps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise RobfiltError(f"{flag(name)} must be positive, got {value}.")
        if self.epochs is None and self.steps is None:
            raise RobfiltError(f"give {flag('epochs')} or {flag('steps')}.")
        if self.batch_size <= 0:
            raise RobfiltError(f"{flag('batch_size')} must be positive, got {self.batch_size}.")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise RobfiltError(f"{flag('lr')} must be a positive number, got {self.lr}.")
        for name in ("weight_decay", "grad_clip", "label_smoothing"):
            if not (getattr(self, name) >= 0 and math.isfinite(getattr(self, name))):
                raise RobfiltError(f"{flag(name)} must be a finite number >= 0, got {getattr(self, name)}.")
        for name in ("warmup_frac", "min_lr_frac"):
            if not (0 <= getattr(self, name) <= 1):
                raise RobfiltError(f"{flag(name)} must be a fraction in [0, 1], got {getattr(self, name)}.")
        if not (math.isfinite(self.noise_sigma) and self.noise_sigma >= 0):
            raise RobfiltError(f"{flag('noise_sigma')} must be a finite number >= 0, got {self.noise_sigma}.")
        if self.ckpt_every < 0:
            raise RobfiltError(f"{flag('ckpt_every')} must be 0 or more, got {self.ckpt_every}.")
        if self.eval_max is not None and self.eval_max <= 0:
            raise RobfiltError(f"{flag('eval_max')} must be positive, got {self.eval_max}.")
        if self.variant is None and self.tokenizer not in ("char", "bpe"):  # hf: fine-tuning takes a folder
            raise RobfiltError(f"unknown {flag('tokenizer')} {self.tokenizer!r} for training; use char or bpe.")
        if self.variant is not None and self.variant not in VARIANTS:
            raise RobfiltError(f"unknown {flag('variant')} {self.variant!r}; use one of: {', '.join(VARIANTS)}.")
        if self.max_length is not None and self.max_length <= 0:
            raise RobfiltError(f"{flag('max_length')} must be positive, got {self.max_length}.")
        if self.bpe_vocab <= 0:
            raise RobfiltError(f"{flag('bpe_vocab')} must be positive, got {self.bpe_vocab}.")
        if self.adversarial is None and self.train_eps is not None:
            raise RobfiltError(f"{flag('train_eps')} sets the budget of {flag('adversarial')} pgd; add it, or drop it.")
        if self.adversarial is not None:
            self._validate_adversarial()

    def check_fits(self, trainee: Trainee, spelt: Collection[str] = ()) -> None:
        """Refuse, in one line, an option that means nothing for ``trainee``: one it does not apply to (an image
        setting for an LM, ``--init`` for hf: fine-tuning), or one that only shapes another option that is off
        (``--train-steps`` without ``--adversarial``). Such an option would train as if it were absent while the
        card and its rebuild command recorded it.

        ``spelt``: the options the user spelt out (the CLI knows them); an option set away from both the recipe's
        own default and ``trainee``'s default recipe counts as spelt out too (the API passes a whole recipe).
        """
        names = set(spelt) | self._changed(trainee)
        for f in dataclasses.fields(self):
            if f.name not in names or applies(f.name, trainee):
                continue
            owners = " and ".join(Trainee(k).description for k in declaration(Recipe, f.name).kinds)
            raise RobfiltError(f"{flag(f.name)} does not apply to {trainee.description} (only to {owners}); drop it.")
        if self.adversarial is None:
            for name in ("train_eps", "train_steps", "train_norm"):
                if name in names:
                    raise RobfiltError(
                        f"{flag(name)} is a setting of {flag('adversarial')} pgd; add {given('adversarial', 'pgd')}, "
                        "or drop it."
                    )
        if "bpe_vocab" in names and self.tokenizer != "bpe":
            raise RobfiltError(
                f"{flag('bpe_vocab')} sizes a BPE tokenizer; add {given('tokenizer', 'bpe')}, or drop it."
            )

    def _changed(self, trainee: Trainee) -> set[str]:
        """The fields at neither the recipe's own default nor ``trainee``'s default recipe."""
        base = HF_RECIPE if trainee is Trainee.HF else DEFAULT_RECIPES[Family(trainee.value)]
        own = Recipe()  # every field at its declared default
        return {
            f.name for f in dataclasses.fields(self)
            if getattr(self, f.name) not in (getattr(own, f.name), getattr(base, f.name))
        }  # fmt: skip

    def _validate_adversarial(self) -> None:
        if self.adversarial not in ADVERSARIAL_METHODS:
            raise RobfiltError(
                f"unknown {flag('adversarial')} {self.adversarial!r}; use {', '.join(ADVERSARIAL_METHODS)}."
            )
        if self.train_norm not in [n.value for n in Norm]:
            raise RobfiltError(f"unknown {flag('train_norm')} {self.train_norm!r}; use linf or l2.")
        ball = Norm(self.train_norm)
        eps = self.train_eps
        if eps is None or not (eps > 0 and math.isfinite(eps) and (eps <= 1 or ball is Norm.L2)):
            raise RobfiltError(
                f"{flag('adversarial')} pgd needs {flag('train_eps')}, a positive budget on the [0, 1] scale "
                f"(e.g. {given('train_eps', '0.05')}), got {eps}."
            )
        if self.train_steps <= 0:
            raise RobfiltError(f"{flag('train_steps')} must be positive, got {self.train_steps}.")


def applies(name: str, trainee: Trainee) -> bool:
    """Whether recipe option ``name`` means something for ``trainee`` (its declaration's ``kinds``)."""
    declared = declaration(Recipe, name)
    return declared is None or not declared.kinds or trainee.value in declared.kinds


# Fields added after checkpoints were already in circulation, with the value that reproduces the old behaviour.
# A card without such a field was trained with that value, and a recipe at that value keeps its old identity.
LATER_FIELDS: dict[str, Any] = {
    "noise_sigma": 0.0,
    "variant": None,
    "max_length": None,
    "init": None,
    "adversarial": None,
    "train_eps": None,
    "train_steps": 10,
    "train_norm": "linf",
}


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
#: Fine-tuning a Hugging Face model (``robfilt train --model hf:DIR``): a pretrained model needs fewer steps and a
#: smaller learning rate than training from scratch.
HF_RECIPE = Recipe(steps=200, batch_size=8, lr=3e-4, weight_decay=0.1, augment=False, ckpt_every=50)
#: The recipe fields fine-tuning uses, as its card records them: those that apply to hf: fine-tuning, less the
#: tokenizer, variant and window, which the card records apart.
FINETUNE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Recipe)
    if applies(f.name, Trainee.HF) and f.name not in ("tokenizer", "variant", "max_length")
)  # fmt: skip


def lr_at(step: int, total: int, recipe: Recipe) -> float:
    """Linear warmup, then cosine decay to ``min_lr_frac * lr``."""
    warmup = max(1, int(recipe.warmup_frac * total))
    if step < warmup:
        return recipe.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    floor = recipe.min_lr_frac * recipe.lr
    return floor + 0.5 * (recipe.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def rebuild_command(name: str, size: str, data: str, seed: int, out: Any, recipe: Recipe, family: Family) -> str:
    """A canonical command that retrains this checkpoint from scratch (recorded in the card)."""
    base = DEFAULT_RECIPES[family]
    parts = ["robfilt train", f"--model {name}", f"--size {size}", f"--data {data}", f"--seed {seed}"]
    for field_name, spelled in (
        ("epochs", "--epochs"),
        ("steps", "--steps"),
        ("batch_size", "--batch-size"),
        ("lr", "--lr"),
        ("tokenizer", "--tokenizer"),
        ("ckpt_every", "--ckpt-every"),
        ("noise_sigma", "--noise-sigma"),
        ("init", "--init"),
        ("adversarial", "--adversarial"),
        ("train_eps", "--train-eps"),
        ("train_steps", "--train-steps"),
        ("train_norm", "--train-norm"),
    ):
        value = getattr(recipe, field_name)
        if value != getattr(base, field_name) and value is not None:
            parts.append(f"{spelled} {value}")
    parts += [f"--out {out}", "--overwrite"]
    return " ".join(parts)
