"""One call in RobustBench's style: ``benchmark(model, data, threat_model, eps)`` -> clean and robust accuracy.

RobustBench's ``benchmark`` returns two bare numbers. This one runs the same engine as :func:`.evaluate`
(config -> runner -> image measurement -> run folder) for one model, one attack and one eps, and returns what
makes those numbers trustworthy: each accuracy with its 95% Wilson interval and n, and the sanity checks. A
failed check is a field of the result and a logged warning, never dropped. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..attacks.catalogue import Norm
from ..checks import FAIL, WARN
from ..configs import (
    CORRUPTION,
    CorruptionConfig,
    ImageAttackConfig,
    LMAttackConfig,
    RunConfig,
    build,
    model_family,
    read,
)
from ..configs.options import api_signature
from ..core.errors import RobfiltError, unknown
from ..core.family import Family
from ..core.names import ATTACK_SPECS
from ..core.progress import ProgressHook
from ..core.surface import Surface
from ..runs.runner import RunResult
from ..stats.aggregates import mean_cell_accuracy
from ..summaries import CorruptionSummary, ImageAttackSummary
from ..summaries import image as summaries
from ..summaries.corruption import CorruptionModelResults
from ..summaries.image import RobustAccuracy
from .benchmark_lm import Benchmarked, LMBenchmarkResult, benchmark_lm, given_run, one_eps
from .evaluate import evaluate
from .robustbench_args import robustbench_options

log = logging.getLogger(__name__)

#: RobustBench's threat models, spelt as RobustBench spells them, and the norm each one attacks in.
THREAT_MODELS: dict[str, Norm | None] = {"Linf": Norm.LINF, "L2": Norm.L2, "corruptions": None}


@dataclass(frozen=True)
class AccuracyInterval:
    """What ``benchmark`` reports of an accuracy: the value with its 95% interval over ``n`` examples."""

    acc: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class BenchmarkResult(Benchmarked[AccuracyInterval]):
    """Clean and robust accuracy of one model, the checks behind them, and where the run folder is.

    ``robust`` is the accuracy under ``attack`` at ``eps`` (Linf/L2), or, for ``corruptions``, the mean accuracy
    over every corruption and severity. ``run_dir`` is None when the run went to a temporary folder.
    ``run`` holds the full rows and summary (what :func:`.evaluate` returns).
    """

    @property
    def accuracies(self) -> tuple[float, float]:
        """``(clean_accuracy, robust_accuracy)``: what RobustBench's ``benchmark`` returns."""
        return self.clean.acc, self.robust.acc

    def adversarial(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, x_adv)`` of a run made with ``save_adversarial=True``: the example ids (ascending) and their
        adversarial points under ``attack`` at ``eps`` (float32, CPU); see :meth:`..runs.runner.RunResult.adversarial`."""
        if self.threat_model == "corruptions":
            raise RobfiltError("threat_model='corruptions' attacks nothing, so there are no adversarial examples.")
        return self.run.adversarial(eps=self.eps)


def _threat_model(value: Any) -> str:
    name = str(getattr(value, "value", value))  # RobustBench's ThreatModel enum works too
    for key in THREAT_MODELS:
        if name.lower() == key.lower():
            return key
    raise unknown("threat_model", name, THREAT_MODELS)


def _check_model(model: Any) -> None:
    if isinstance(model, list | tuple):
        raise RobfiltError("benchmark takes one model; to compare several, use evaluate([model_a, model_b], ...).")
    if not isinstance(model, nn.Module | str):
        got = f"the class {model.__name__}; pass an instance" if isinstance(model, type) else type(model).__name__
        raise RobfiltError(
            f"model must be a torch nn.Module or a model reference such as 'timm:resnet18?num_classes=10', got {got}."
        )


def _config(threat: str, attack: str | None, eps: Any, given: dict[str, Any]) -> RunConfig:
    """The run of one benchmark: corruptions, or ``attack`` at ``eps`` in the threat model's norm. Every default
    and rule is the config's; benchmark adds only that it measures one eps."""
    if threat == "corruptions":  # attack or eps given are refused by the config: a corruption run has neither
        return build(CorruptionConfig, {"attacks": (CORRUPTION,), "baseline": None, **given, **given_run(attack, eps)})
    if "attacks" in given:
        raise RobfiltError("corruptions= applies to threat_model='corruptions'; drop it.")
    norm = THREAT_MODELS[threat]
    if (
        attack is not None
        and isinstance(attack, str)
        and attack in ATTACK_SPECS
        and norm not in ATTACK_SPECS[attack].norms
    ):
        fits = sorted(n for n, a in ATTACK_SPECS.items() if norm in a.norms and Family.IMAGE in a.families)
        raise RobfiltError(  # the config's rule, said for threat_model (benchmark has no norm parameter)
            f"attack {attack!r} has no {norm.value} version; for this threat model use one of: {', '.join(fits)}."
        )
    config = build(ImageAttackConfig, {"norm": norm, **given, **given_run(attack, eps)})
    one_eps(config)
    return config


def _accuracy(entry: summaries.Accuracy | RobustAccuracy) -> AccuracyInterval:
    return AccuracyInterval(float(entry.acc), float(entry.lo), float(entry.hi), int(entry.n))


def _result(label: str, threat: str, attack: str, eps: float | None, run: RunResult, row_label: str) -> BenchmarkResult:
    summary = run.summary
    assert isinstance(summary, ImageAttackSummary | CorruptionSummary)
    per_model = summary.models[row_label]
    clean = _accuracy(per_model.clean)
    if isinstance(per_model, CorruptionModelResults):
        robust = AccuracyInterval(**mean_cell_accuracy(run.rows[run.rows["model"] == row_label]))
    else:
        (entry,) = per_model.robust
        robust = _accuracy(entry)
    checks = tuple(summary.checks)
    for c in checks:
        if c.status == FAIL:
            log.warning("benchmark of %s: sanity check FAILED: %s: %s", label, c.name, c.detail)
        elif c.status == WARN:
            log.info("benchmark of %s: sanity check warns: %s: %s", label, c.name, c.detail)
    passed = all(c.passed for c in checks)
    return BenchmarkResult(label, threat, attack, eps, clean, robust, checks, passed, run.out, run)


def benchmark(
    model: nn.Module | str,
    data: Any = None,
    threat_model: Any = "Linf",
    eps: float | None = None,
    *,
    attack: str | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
    workers: int = 1,
    dataset: Any = None,
    data_dir: str | Path | None = None,
    to_disk: bool = False,
    model_name: str | None = None,
    corruptions: Any = None,
    **options: Any,
) -> BenchmarkResult | LMBenchmarkResult:
    """Clean and robust accuracy of ``model`` on ``data``, with intervals and sanity checks (RobustBench's style).

    Runs through :func:`.evaluate` (one model, one attack, one eps), so its numbers equal evaluate's for the
    same inputs and seed. The default attack is robfilt's default everywhere, ``apgd-adaptive``: the per-example
    worst case of APGD-CE and APGD-T on targets chosen per example (torchattacks' APGD with early exit), the
    second on the survivors of the first, with a convergence check that bounds how much robust accuracy may be
    overstated. B9 measures it against AutoAttack's standard version at the reference settings
    (``attack="autoattack-standard"``, many times its cost), on adversarially trained models too (docs/attacks.md
    gives the cells and every difference);
    ``attack="pgd"`` (20 steps of 0.15 eps; ``steps=``) is faster but weaker.
    ``threat_model="corruptions"`` runs robfilt's corruption suite instead (Gaussian and impulse noise, Gaussian
    blur, contrast and JPEG at severities 1-5, computed on the fly): ``robust`` is the mean accuracy over those
    cells. It is not CIFAR-10-C (15 fixed corruptions), so its numbers are not RobustBench's leaderboard numbers.

    Args:
        model: an ``nn.Module`` taking [0, 1] images and returning logits, or a model reference
            (``deit-grc``, ``timm:resnet18?num_classes=10``, ``models.py:build``).
        data: a data spec (``fashion-mnist``, ``cifar10``, ``imagefolder:<path>``, ``hf-disk:<path>``), an
            ``(x, y)`` pair of tensors or numpy arrays, or a torch ``Dataset`` of (image, label).
        threat_model: ``"Linf"``, ``"L2"`` or ``"corruptions"`` (case-insensitive; RobustBench's enum works).
        eps: the one budget on the [0, 1] scale, required for Linf and L2 as in RobustBench (8/255 and 0.5 are
            RobustBench's CIFAR budgets); an eps grid is ``evaluate(model, eps=[...])``.
        attack: the attack (default: the strongest robfilt offers, see above).
        options: any option of an image attack run, named as everywhere (``n_examples``, ``batch_size``,
            ``device``, ``seed``, ``steps``, ``checkpoint``, ``data_root``, ``img_size``, ...); ``n_examples``
            defaults to every example (as RobustBench's does); None means the same.
        out: keep the run folder there; None runs in a temporary folder that is removed (``run_dir`` None).
        workers: processes that compute the run (default 1: this one; see :func:`.evaluate.run_config`).
        save_adversarial: keep the adversarial examples; ``result.adversarial()`` returns ``(ids, x_adv)``.
        dataset, data_dir, to_disk, model_name, corruptions: RobustBench's keywords with RobustBench's meanings
            (:mod:`.robustbench_args`); RobustBench's ``log_path``, ``preprocessing`` and ``aa_state_path`` are
            refused with what to use instead.

    A language model (``lm``, ``hf:DIR``, or a ``transformers`` causal LM with ``tokenizer``) gets an
    :class:`.benchmark_lm.LMBenchmarkResult` instead: clean and attacked perplexity (token perplexity with its
    95% interval, and lm-eval's word/byte perplexity and bits per byte for Hugging Face models) under embedding
    ``pgd`` (or ``fgsm``) at one relative eps (e.g. 0.05) on up to 64 sequences of ``data`` (default ``austen``);
    ``tokenizer``, ``max_length``, ``stride`` and ``precision`` apply to it.
    """
    _check_model(model)
    robustbench = {"dataset": dataset, "data_dir": data_dir, "to_disk": to_disk, "model_name": model_name,
                   "corruptions": corruptions}  # fmt: skip
    options, data, kept = robustbench_options({**options, **robustbench}, data)
    model_name = options.pop("model_name", None)
    if model_name is not None and isinstance(model, str):
        from ..models.ref import parse_model_ref

        model = str(dataclasses.replace(parse_model_ref(model), name=model_name))
    threat = _threat_model(threat_model)
    out = out if out is not None else kept
    if model_family(model) is Family.LM:
        given = {**read(options, Surface.API), **given_run(attack, eps)}
        return benchmark_lm(model, data or "austen", threat, THREAT_MODELS[threat], given, out=out, resume=resume,
                            overwrite=overwrite, workers=workers)  # fmt: skip
    data = "fashion-mnist" if data is None else data
    given = read({"n_examples": None, **options, "models": (model,), "data": data}, Surface.API)
    config = _config(threat, attack, eps, given)
    run = evaluate(config=config, out=out, resume=resume, overwrite=overwrite, progress=progress, workers=workers)  # type: ignore[arg-type]
    value = config.eps[0] if isinstance(config, ImageAttackConfig) else None
    return _result(model_name or config.labels[0], threat, config.attacks[0], value, run, config.labels[0])


api_signature(
    benchmark,
    ImageAttackConfig,
    CorruptionConfig,
    LMAttackConfig,
    skip=("models", "attacks", "norm", "eps", "severities", "baseline"),
)

__all__ = ["AccuracyInterval", "BenchmarkResult", "LMBenchmarkResult", "THREAT_MODELS", "benchmark"]
