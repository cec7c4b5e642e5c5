"""What the study runs: models, seeds, the short training recipes, and every measurement's settings.

The zoo recipes (``train.DEFAULT_RECIPES``) take ~4.5 min per DeiT and ~4 min per LM on two idle cores; with
4 + 4 variants and three seeds that is over 1.5 hours of training alone, before any evaluation. The study
therefore trains with a *shorter* recipe (6 epochs at batch 128 for DeiT, 800 steps for the LM: about 23 min of
training and evaluation per seed), which the write-up states: the verdicts are about micro models trained
briefly, not about the paper's ImageNet / WikiText-103 models.

Every piece of work is a :class:`Piece` with a stable id; the runner records finished pieces, so a killed
study resumes where it stopped. Evaluation uses one fixed ``eval_seed`` for every training seed, so all
models of all seeds are measured on the same examples and can be compared pairwise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import RobfiltError
from ..family import Family
from ..models.registry import parse_name
from ..names import DEFAULT_IMAGE_ATTACK
from ..train import Recipe, recipe_identity

VISION_MODELS: tuple[str, ...] = ("deit", "deit-bsa", "deit-grc", "deit-bsa-grc")
LM_MODELS: tuple[str, ...] = ("lm", "lm-bsa", "lm-grc", "lm-bsa-grc")

# The study recipes. DeiT: 6 epochs over the 15k bundled training images; LM: 800 steps of 32 x 128 characters.
STUDY_VISION_RECIPE = Recipe(epochs=6, batch_size=128, lr=2e-3, weight_decay=0.05, eval_max=1000)
STUDY_LM_RECIPE = Recipe(
    steps=800, batch_size=32, lr=3e-3, weight_decay=0.1, augment=False, ckpt_every=200, eval_max=200
)
QUICK_VISION_RECIPE = Recipe(steps=60, batch_size=128, lr=2e-3, weight_decay=0.05, eval_max=500)
QUICK_LM_RECIPE = Recipe(steps=60, batch_size=32, lr=3e-3, weight_decay=0.1, augment=False, ckpt_every=30, eval_max=50)


@dataclass(frozen=True)
class VisionEval:
    """Image measurements: Linf eps sweeps under the default attack (autoattack-fast, which judges the claims)
    and, as secondary lines, PGD-20 and FGSM (weaker: they show where a verdict depended on the attack); and the
    corruption suite, all on shared test examples."""

    n_examples: int = 500
    attacks: tuple[str, ...] = (DEFAULT_IMAGE_ATTACK, "pgd", "fgsm")
    eps: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1)
    pgd_steps: int | None = None  # None: each attack's own (PGD 20 steps of 0.15 * eps, the group's protocol)
    corruption_examples: int = 500
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class LMEval:
    """LM measurements: clean perplexity, word-swap contamination rates, embedding FGSM/PGD (relative L2 eps)."""

    n_sequences: int = 64
    rates: tuple[float, ...] = (0.0, 0.015, 0.05, 0.1, 0.2)
    eps: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
    attack_steps: int = 20  # with 10, PGD (step 0.15 eps) can end weaker than FGSM: the engine's check fails


@dataclass(frozen=True)
class LipschitzEval:
    """Lipschitz lower/upper bounds with per-block profiles (images: exact Jacobians; LMs: power iteration)."""

    vision_examples: int = 32
    vision_method: str = "exact"
    lm_examples: int = 16
    lm_method: str = "power"
    lm_seq_len: int = 64
    vision_gap: bool = True  # layerwise estimate per example (claim c); no second-order bound (too slow here)
    gap_rho: float = 1e-3


@dataclass(frozen=True)
class CertifyEval:
    """Randomized-smoothing certificates of the (standard-trained) DeiTs: certified L2 radius per example (claim c).

    sigma 0.12 keeps the smoothed classifiers of models trained without noise accurate enough to certify."""

    n_examples: int = 64
    sigma: float = 0.12
    n0: int = 100
    n: int = 500
    alpha: float = 0.001
    attack_examples: int = 4


@dataclass(frozen=True)
class SeqlenEval:
    """Perturbation vs sequence length, on the trained LMs and on one synthetic attention layer."""

    lm_ns: tuple[int, ...] = (8, 16, 32, 64, 128)
    lm_windows: int = 64
    lm_noise: float = 1e-2  # per-token noise, relative to the mean token-embedding norm
    layer_ns: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    layer_trials: int = 8


@dataclass(frozen=True)
class StudyPlan:
    """Everything that determines the study's numbers (the manifest stores it; see :func:`plan_fingerprint`)."""

    name: str = "full"
    seeds: tuple[int, ...] = (0, 1, 2)
    vision_models: tuple[str, ...] = VISION_MODELS
    lm_models: tuple[str, ...] = LM_MODELS
    size: str = "micro"
    vision_data: str = "fashion-mnist"
    lm_data: str = "austen"
    vision_recipe: Recipe = field(default_factory=lambda: dataclasses.replace(STUDY_VISION_RECIPE))
    lm_recipe: Recipe = field(default_factory=lambda: dataclasses.replace(STUDY_LM_RECIPE))
    eval_seed: int = 0
    vision: VisionEval = field(default_factory=VisionEval)
    lm: LMEval = field(default_factory=LMEval)
    lipschitz: LipschitzEval = field(default_factory=LipschitzEval)
    certify: CertifyEval = field(default_factory=CertifyEval)
    seqlen: SeqlenEval = field(default_factory=SeqlenEval)

    def validate(self) -> None:
        if not self.seeds:
            raise RobfiltError("the study needs at least one seed; pass --seeds 1 or more.")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise RobfiltError(f"seeds must be distinct non-negative integers, got {list(self.seeds)}.")
        for names, family in ((self.vision_models, Family.IMAGE), (self.lm_models, Family.LM)):
            for n in names:
                if parse_name(n)[0] is not family:
                    raise RobfiltError(f"{n!r} is not a {family.value} model; list it with the other family.")
        self.vision_recipe.validate()
        self.lm_recipe.validate()
        if self.lm_recipe.steps is None:
            raise RobfiltError("the LM study recipe must be step-based (set steps).")

    def recipe(self, model: str) -> Recipe:
        return self.vision_recipe if parse_name(model)[0] is Family.IMAGE else self.lm_recipe

    def data(self, model: str) -> str:
        return self.vision_data if parse_name(model)[0] is Family.IMAGE else self.lm_data

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))


def digest(obj: Any, n: int = 12) -> str:
    """A short stable hash of any JSON-able object (keys sorted)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def recipe_tag(plan: StudyPlan, model: str) -> str:
    """Names a checkpoint folder by what determines its weights (recipe + data + size), not by the study."""
    return digest({"recipe": recipe_identity(plan.recipe(model)), "data": plan.data(model), "size": plan.size}, 8)


def full_plan(seeds: int = 3) -> StudyPlan:
    """The study as reported: 4 + 4 variants x ``seeds`` training seeds, short recipes, full measurements."""
    if seeds < 1:
        raise RobfiltError(f"--seeds must be at least 1, got {seeds}.")
    return StudyPlan(name="full", seeds=tuple(range(seeds)))


def quick_plan(seeds: int = 1) -> StudyPlan:
    """``--quick``: every piece of the pipeline on tiny budgets (~5 min on 2 cores); the numbers mean little."""
    return StudyPlan(
        name="quick",
        seeds=tuple(range(seeds)),
        vision_recipe=dataclasses.replace(QUICK_VISION_RECIPE),
        lm_recipe=dataclasses.replace(QUICK_LM_RECIPE),
        vision=VisionEval(n_examples=128, pgd_steps=10, corruption_examples=128, severities=(1, 3, 5)),
        lm=LMEval(n_sequences=16),
        lipschitz=LipschitzEval(vision_examples=8, lm_examples=4, lm_seq_len=32),
        certify=CertifyEval(n_examples=8, n0=20, n=100, attack_examples=2),
        seqlen=SeqlenEval(lm_windows=16, layer_ns=(16, 64, 256), layer_trials=4),
    )


# --- pieces ---------------------------------------------------------------------------------------------------

TRAIN = "train"
VISION_ATTACK = "vision-attack"
VISION_CORRUPTION = "vision-corruption"
LM_ATTACK = "lm-attack"
LIPSCHITZ_VISION = "lipschitz-vision"
CERTIFY_VISION = "certify-vision"
LIPSCHITZ_LM = "lipschitz-lm"
SEQLEN_LM = "seqlen-lm"
SEQLEN_LAYER = "seqlen-layer"
MEASUREMENTS: tuple[str, ...] = (
    VISION_ATTACK, VISION_CORRUPTION, LIPSCHITZ_VISION, CERTIFY_VISION, LM_ATTACK, LIPSCHITZ_LM, SEQLEN_LM,
    SEQLEN_LAYER,
)  # fmt: skip


@dataclass(frozen=True)
class Piece:
    """One resumable unit: training one model for one seed, or one measurement over a family for one seed."""

    kind: str
    seed: int
    model: str | None = None  # training pieces only

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.model}/s{self.seed}" if self.model else f"{self.kind}/s{self.seed}"

    @property
    def folder(self) -> str:
        """Run folder (measurements) relative to the study folder."""
        return f"runs/s{self.seed}/{self.kind}"


def pieces(plan: StudyPlan) -> list[Piece]:
    """Execution order: per seed, train a family then measure it, so early seeds finish early."""
    out: list[Piece] = []
    for s in plan.seeds:
        if plan.vision_models:
            out += [Piece(TRAIN, s, m) for m in plan.vision_models]
            out += [Piece(k, s) for k in (VISION_ATTACK, VISION_CORRUPTION, LIPSCHITZ_VISION, CERTIFY_VISION)]
        if plan.lm_models:
            out += [Piece(TRAIN, s, m) for m in plan.lm_models]
            out += [Piece(k, s) for k in (LM_ATTACK, LIPSCHITZ_LM, SEQLEN_LM)]
        out.append(Piece(SEQLEN_LAYER, s))
    return out
