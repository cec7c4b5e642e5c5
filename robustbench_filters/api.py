"""The public Python API: attack models (:func:`evaluate`), estimate Lipschitz constants (:func:`estimate_lipschitz`)
and certify smoothed models (:func:`certify`), each through the shared runner.

Every function takes its options explicitly, or a ready config object (:mod:`.configs`), and returns the merged,
checked rows and summary. An option that does not apply to the kind of run is an error, not silently ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from .configs import (
    CertifyConfig,
    CorruptionConfig,
    ImageAttackConfig,
    LMAttackConfig,
    ModelLike,
    RunConfig,
    attack_config_class,
    build,
)
from .errors import RobfiltError
from .lipschitz.run import LipschitzResult, estimate_lipschitz
from .progress import ProgressHook
from .runs.measurement import Measurement
from .runs.runner import RunResult, run
from .smoothing.run import certify

EvalResult = RunResult


def measurement_for(config: RunConfig) -> Measurement:
    """The measurement that runs ``config`` (one per kind of run)."""
    if isinstance(config, ImageAttackConfig):
        from .attacks.image import ImageAttack

        return ImageAttack(config)
    if isinstance(config, LMAttackConfig):
        from .attacks.lm import LMAttack

        return LMAttack(config)
    if isinstance(config, CorruptionConfig):
        from .attacks.corruption import Corruptions

        return Corruptions(config)
    if isinstance(config, CertifyConfig):
        from .smoothing.run import Certify

        return Certify(config)
    from .lipschitz.run import Lipschitz

    return Lipschitz(config)


def evaluate(
    models: ModelLike | Sequence[ModelLike] | None = None,
    attacks: str | Sequence[str] | None = None,
    eps: Sequence[float] | None = None,
    data: Any = None,
    n_examples: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    *,
    norm: str | None = None,
    steps: int | None = None,
    step_size: float | None = None,
    batch_size: int | None = None,
    size: str = "micro",
    checkpoint: str | None = "zoo",
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    check_masking: bool = False,
    data_root: str | None = None,
    amp: str | None = None,
    amp_attacks: bool = False,
    allow_pickle: bool = False,
    rates: Sequence[float] | None = None,
    replacement: str | None = None,
    eps_mode: str | None = None,
    tokenizer: Any = None,
    severities: Sequence[int] | None = None,
    baseline: str | None = None,
    progress: ProgressHook | None = None,
    config: ImageAttackConfig | LMAttackConfig | CorruptionConfig | None = None,
) -> RunResult:
    """Attack models on the same examples; returns per-example rows and a summary with its sanity checks.

    The kind of run follows from the models and attacks: image models with catalogue attacks (eps cascade),
    language models with ``fgsm``/``pgd`` in embedding space and ``wordswap``, or image models with
    ``corruption`` / ``corruption:<name>``. Options left at None take that kind's defaults (see
    :mod:`.configs`); an option given for a kind it does not apply to raises :class:`RobfiltError`.

    Args:
        models: registry names (``deit-grc``), ``timm:<arch>``, ``pkg.mod:factory`` or modules; one model alone
            works too (an ``nn.Sequential`` is one model, never the list of its layers).
        attacks: catalogue names (``robustbench_filters.attacks.catalogue.ATTACKS``), ``wordswap`` or
            ``corruption[:<name>]``; None: the strongest attack robfilt has for the models (``autoattack-fast``
            for images, embedding PGD for language models). ``fgsm`` and ``pgd`` are weaker (upper bounds).
        eps: perturbation budgets ([0, 1] image scale; relative embedding radii for LMs); default: the data's grid.
        data: dataset spec (bundled ``fashion-mnist`` for images, ``austen`` for LMs by default), or for images an
            ``(x, y)`` pair of tensors/numpy arrays or a torch ``Dataset`` (then pass ``eps``).
        n_examples: examples drawn (seeded) from the test split, shared by all models.
        out: run folder; None keeps everything in a temporary folder.
        device: ``cpu`` or ``cuda`` (under torchrun: each rank's own GPU).
        config: a ready config instead of the options above (then pass neither ``models`` nor options).
    """
    if config is None:
        if models is None:
            raise RobfiltError("no model given; pass models=[...] or a config.")
        models = [models] if isinstance(models, str | nn.Module) else list(models)
        attacks = [] if attacks is None else [attacks] if isinstance(attacks, str) else list(attacks)
        options = {
            "eps": eps, "data": data, "n_examples": n_examples, "norm": norm, "steps": steps, "step_size": step_size,
            "batch_size": batch_size, "data_root": data_root, "amp": amp, "rates": rates, "replacement": replacement,
            "eps_mode": eps_mode, "tokenizer": tokenizer, "severities": severities, "baseline": baseline,
            "check_masking": check_masking or None, "amp_attacks": amp_attacks or None,
            "allow_pickle": allow_pickle or None,
        }  # fmt: skip
        given = {k: (tuple(v) if isinstance(v, list) else v) for k, v in options.items() if v is not None}
        cls = attack_config_class(models, attacks)
        named = {"attacks": tuple(attacks)} if attacks else {}  # none named: the kind's default (the strongest)
        config = build(
            cls, {"models": tuple(models), **named, "seed": seed, "size": size, "checkpoint": checkpoint,
                  "device": device, **given},
        )  # fmt: skip
    elif models is not None:
        raise RobfiltError("pass either a config or models and options, not both.")
    if not isinstance(config, ImageAttackConfig | LMAttackConfig | CorruptionConfig):
        raise RobfiltError(f"evaluate takes an attack or corruption config, not {type(config).__name__}.")
    return run(measurement_for(config), out=out, resume=resume, overwrite=overwrite, progress=progress)


__all__ = ["EvalResult", "LipschitzResult", "RunResult", "certify", "estimate_lipschitz", "evaluate", "measurement_for"]
