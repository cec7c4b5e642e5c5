"""The public Python API: attack models (:func:`evaluate`), estimate Lipschitz constants (:func:`estimate_lipschitz`)
and certify models (:func:`certify`: smoothed models, or the models themselves by bound propagation), each through
the shared runner.

Every function takes its options explicitly, or a ready config object (:mod:`..configs`), and returns the merged,
checked rows and summary. An option that does not apply to the kind of run is an error, not silently ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..attacks.corruption import Corruptions
from ..attacks.image import ImageAttack
from ..attacks.lm import LMAttack
from ..configs import (
    CertifyConfig,
    CorruptionConfig,
    ImageAttackConfig,
    LipschitzConfig,
    LMAttackConfig,
    ModelLike,
    RunConfig,
    VerifiedConfig,
    attack_config_class,
    build,
    certify_config_class,
    read,
)
from ..configs.options import api_signature
from ..core import workers as _workers
from ..core.errors import RobfiltError
from ..core.progress import ProgressHook
from ..core.surface import Surface
from ..crown.run import Verified
from ..lipschitz.run import Lipschitz, LipschitzResult
from ..runs.measurement import Measurement
from ..runs.runner import RunResult, run
from ..smoothing.run import Certify

#: which measurement runs each kind of run config (the configs name their kind: ``KIND``, summaries/kinds.py)
MEASUREMENTS: dict[type[RunConfig], type[Measurement]] = {
    ImageAttackConfig: ImageAttack,
    LMAttackConfig: LMAttack,
    CorruptionConfig: Corruptions,
    LipschitzConfig: Lipschitz,
    CertifyConfig: Certify,
    VerifiedConfig: Verified,
}


def measurement_for(config: RunConfig) -> Measurement:
    """The measurement that runs ``config`` (:data:`MEASUREMENTS`)."""
    for cls in type(config).__mro__:
        if cls in MEASUREMENTS:
            return MEASUREMENTS[cls](config)
    raise RobfiltError(
        f"{type(config).__name__} is no run config robfilt can run; build one of {', '.join(c.__name__ for c in MEASUREMENTS)}."
    )


def run_config(config: RunConfig, *, workers: int = 1, **folder: Any) -> RunResult:
    """Run a ready ``config`` of any kind through the runner (``folder``: ``out``, ``resume``, ``overwrite``,
    ``progress``): what :func:`evaluate`, :func:`certify`, :func:`estimate_lipschitz`, the gate and the study do.

    ``workers`` > 1 computes the run in that many processes (this one and ``workers - 1`` it starts,
    :mod:`..core.workers`), with the one-process rows; inside a command's pool (``robfilt check``) the pool serves.
    """
    with _workers.pool(_workers.resolve(workers)):
        return run(measurement_for(config), **folder)


def _config(
    config: RunConfig | None, kinds: tuple[type[RunConfig], ...], given: dict[str, Any], what: str
) -> RunConfig:
    """The config of an API call: ``config`` as given, or one built from the keyword options (read as Python
    values, refused when they do not apply), exactly as the CLI and specs build theirs."""
    if config is not None:
        if any(v is not None for v in given.values()):
            raise RobfiltError(f"{what} takes either config or models and options, not both.")
        if not isinstance(config, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise RobfiltError(f"{what} takes a {names} as config, not {type(config).__name__}.")
        return config
    if given.get("models") is None:
        raise RobfiltError("no model given; pass models=[...] (a reference such as 'deit-grc' or a module) or config.")
    values = read(given, Surface.API)
    if len(kinds) == 1:
        return build(kinds[0], values)
    if CertifyConfig in kinds:
        return build(certify_config_class(values), values)
    return build(attack_config_class(values["models"], values.get("attacks", ())), values)


def evaluate(
    models: ModelLike | Sequence[ModelLike] | None = None,
    attacks: str | Sequence[str] | None = None,
    eps: float | Sequence[float] | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
    workers: int = 1,
    config: ImageAttackConfig | LMAttackConfig | CorruptionConfig | None = None,
    **options: Any,
) -> RunResult:
    """Attack models on the same examples; returns per-example rows and a summary with its sanity checks.

    The kind of run follows from the models and attacks: image models with catalogue attacks (eps cascade),
    language models with ``fgsm``/``pgd`` in embedding space and ``wordswap``, or image models with
    ``corruption`` / ``corruption:<name>``. Every other keyword is an option of that kind of run, with the name it
    has everywhere (``robfilt attack --n-examples`` is ``n_examples=``; see :mod:`..configs`); an option that does
    not apply to the kind raises :class:`RobfiltError`, and options left out take the kind's defaults.

    Args:
        models: registry names (``deit-grc``), ``timm:<arch>``, ``hf:<folder>``, ``pkg.mod:factory`` or modules
            (a ``transformers`` causal LM too, with ``tokenizer``); one model alone works too (an ``nn.Sequential``
            is one model, never the list of its layers).
        attacks: catalogue names (``robustbench_filters.attacks.catalogue.ATTACKS``), ``wordswap`` or
            ``corruption[:<name>]``; None: the strongest attack robfilt has for the models (``apgd-adaptive``
            for images, embedding PGD for language models). ``fgsm`` and ``pgd`` are weaker (upper bounds).
        eps: perturbation budgets ([0, 1] image scale; relative embedding radii for LMs); default: the data's grid.
        data: dataset spec (bundled ``fashion-mnist`` for images, ``austen`` for LMs by default), or for images an
            ``(x, y)`` pair of tensors/numpy arrays or a torch ``Dataset`` (then pass ``eps``).
        n_examples: examples drawn (seeded) from the test split, shared by all models; default at most 256 images
            or 64 documents (all of them when the data has fewer); None: every example.
        out: run folder; None keeps everything in a temporary folder.
        workers: processes that compute the run (default 1: this one). More start that many minus one worker
            processes for the call, one torch thread each, with the same rows (docs/scaling.md); models and data
            given as Python objects must pickle, and a notebook's own classes cannot reach them.
        tokenizer: LMs: the tokenizer object (or folder) of the model(s); default: the one saved with each model.
        split: LMs: the documents of ``data`` scored: ``all``, ``train``, ``val`` or ``test`` (default).
        max_length, stride, precision: LMs: lm-eval's rolling window in tokens (default: a Hugging Face model's
            positions, at most 1024; robfilt's block size), tokens newly predicted per window (default: max_length),
            and ``fp32`` or ``bf16`` weights.
        config: a ready config instead of models and options.
    """
    given = {"models": models, "attacks": attacks, "eps": eps, **options}
    config = _config(config, (ImageAttackConfig, LMAttackConfig, CorruptionConfig), given, "evaluate")
    return run_config(config, out=out, resume=resume, overwrite=overwrite, progress=progress, workers=workers)


def certify(
    models: ModelLike | Sequence[ModelLike] | None = None,
    sigmas: float | Sequence[float] | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
    workers: int = 1,
    config: CertifyConfig | VerifiedConfig | None = None,
    **options: Any,
) -> RunResult:
    """Certify image models on shared examples: rows, summary and checks.

    ``method="smoothing"`` (the default) certifies Gaussian-smoothed models (Cohen et al. 2019): the noise-trained
    zoo (sigma 0.25) on at most 64 bundled test images with n0 = 100, n = 1000 and alpha = 0.001 by default.
    ``method="ibp"``, ``"crown-ibp"`` or ``"crown"`` verifies the models themselves at Linf ``eps`` by bound
    propagation (:mod:`..crown.run`): per example verified, broken by the default attack, or unknown. Every other
    keyword is a :class:`CertifyConfig` or :class:`VerifiedConfig` option, named as on the command line
    (``robfilt certify --attack-radii`` is ``attack_radii=``); one of the other method's is refused.
    """
    given = {"models": models, "sigmas": sigmas, **options}
    config = _config(config, (CertifyConfig, VerifiedConfig), given, "certify")
    return run_config(config, out=out, resume=resume, overwrite=overwrite, progress=progress, workers=workers)


def estimate_lipschitz(
    models: ModelLike | Sequence[ModelLike] | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
    workers: int = 1,
    config: LipschitzConfig | None = None,
    **options: Any,
) -> LipschitzResult:
    """Lower and certified upper Lipschitz bounds for each model, per example (see :mod:`..lipschitz.run`).

    Every keyword is a :class:`LipschitzConfig` option, named as on the command line (``--per-layer`` is
    ``per_layer=``); ``inputs`` (and ``input_labels``) give your own tensors instead of data.
    """
    from ..lipschitz.run import lipschitz_result

    config = _config(config, (LipschitzConfig,), {"models": models, **options}, "estimate_lipschitz")
    folder = {"out": out, "resume": resume, "overwrite": overwrite, "progress": progress}
    return lipschitz_result(run_config(config, workers=workers, **folder))


api_signature(evaluate, ImageAttackConfig, LMAttackConfig, CorruptionConfig)
api_signature(certify, CertifyConfig, VerifiedConfig)
api_signature(estimate_lipschitz, LipschitzConfig)


__all__ = [
    "LipschitzResult",
    "RunResult",
    "certify",
    "estimate_lipschitz",
    "evaluate",
    "measurement_for",
    "run_config",
]
