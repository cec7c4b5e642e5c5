"""One call in RobustBench's style: ``benchmark(model, data, threat_model, eps)`` -> clean and robust accuracy.

RobustBench's ``benchmark`` returns two bare numbers. This one runs the same engine as :func:`.api.evaluate`
(config -> runner -> image measurement -> run folder) for one model, one attack and one eps, and returns what
makes those numbers trustworthy: each accuracy with its 95% Wilson interval and n, and the sanity checks. A
failed check is a field of the result and a logged warning, never dropped. Nothing is downloaded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn
from torch.utils.data import Dataset

from .api import evaluate
from .attacks.catalogue import ATTACKS, DEFAULT_IMAGE_ATTACK, Norm, get_attack
from .checks import FAIL, WARN
from .configs import CORRUPTION, CorruptionConfig, ImageAttackConfig, RunConfig, build
from .errors import RobfiltError, unknown
from .runs.runner import RunResult
from .stats import wilson_interval

log = logging.getLogger(__name__)

#: RobustBench's threat models, spelt as RobustBench spells them, and the norm each one attacks in.
THREAT_MODELS: dict[str, Norm | None] = {"Linf": Norm.LINF, "L2": Norm.L2, "corruptions": None}
#: RobustBench's standard CIFAR budgets, used when ``eps`` is not given.
DEFAULT_BENCH_EPS: dict[Norm, float] = {Norm.LINF: 8 / 255, Norm.L2: 0.5}
DEFAULT_ATTACK = DEFAULT_IMAGE_ATTACK


@dataclass(frozen=True)
class Accuracy:
    """An accuracy with its 95% Wilson interval over ``n`` examples."""

    acc: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class SanityCheck:
    """One sanity check of the run: ``status`` is ``pass``, ``warn`` or ``fail``; ``detail`` says what was seen."""

    name: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status != FAIL


@dataclass(frozen=True)
class BenchmarkResult:
    """Clean and robust accuracy of one model, the checks behind them, and where the run folder is.

    ``robust`` is the accuracy under ``attack`` at ``eps`` (Linf/L2), or, for ``corruptions``, the mean accuracy
    over every corruption and severity. ``run_dir`` is None when the run went to a temporary folder.
    ``run`` holds the full rows and summary (what :func:`.api.evaluate` returns).
    """

    model: str
    threat_model: str
    attack: str
    eps: float | None
    clean: Accuracy
    robust: Accuracy
    checks: tuple[SanityCheck, ...]
    all_checks_passed: bool
    run_dir: Path | None
    run: RunResult = field(repr=False, compare=False)

    @property
    def failed_checks(self) -> tuple[SanityCheck, ...]:
        return tuple(c for c in self.checks if c.status == FAIL)

    @property
    def accuracies(self) -> tuple[float, float]:
        """``(clean_accuracy, robust_accuracy)``: what RobustBench's ``benchmark`` returns."""
        return self.clean.acc, self.robust.acc


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
        raise RobfiltError(
            f"model must be a torch nn.Module or a model reference such as 'timm:resnet18?num_classes=10', "
            f"got {type(model).__name__}."
        )


def _check_n_examples(n_examples: Any, data: Any) -> None:
    if n_examples is None:
        return
    if isinstance(n_examples, bool) or not isinstance(n_examples, int) or n_examples <= 0:
        raise RobfiltError(f"n_examples must be a positive whole number, got {n_examples!r}; e.g. n_examples=1000.")
    size = _size(data)
    if size is not None and n_examples > size:
        raise RobfiltError(
            f"n_examples={n_examples} is larger than the data ({size} examples); pass n_examples={size} or fewer."
        )


def _size(data: Any) -> int | None:
    """How many examples in-memory data hold (None for spec strings: the engine checks those when it opens them)."""
    if isinstance(data, tuple | list) and len(data) == 2:
        return len(data[0])
    if isinstance(data, Dataset) or (not isinstance(data, str) and hasattr(data, "take")):
        return len(data)  # type: ignore[arg-type]
    return None


def _pool_size(data: Any, data_root: str | None, img_size: int | None) -> int:
    """The whole data's size (``n_examples=None`` benchmarks every example, as RobustBench's default does)."""
    size = _size(data)
    if size is not None:
        return size
    from .data.sources import open_image_source

    return len(open_image_source(data, "test", data_root, img_size=img_size))


def _eps(eps: Any, norm: Norm | None) -> float | None:
    if norm is None:
        if eps is not None:
            raise RobfiltError("eps does not apply to threat_model='corruptions' (severities 1-5 are run); drop eps.")
        return None
    if eps is None:
        return DEFAULT_BENCH_EPS[norm]
    if isinstance(eps, Sequence) and not isinstance(eps, str):
        raise RobfiltError("benchmark takes one eps; for an eps grid use evaluate(model, eps=[...]).")
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise RobfiltError(f"eps must be a number such as 8/255, got {eps!r}.") from None
    if not (value > 0 and math.isfinite(value)):
        raise RobfiltError(f"eps must be a positive finite budget on the [0, 1] image scale, got {eps!r}; e.g. 8/255.")
    return value


def _attack(attack: str | None, norm: Norm | None, steps: int | None) -> str:
    if norm is None:
        if attack is not None or steps is not None:
            raise RobfiltError("threat_model='corruptions' runs no attack; drop attack and steps.")
        return CORRUPTION
    name = DEFAULT_ATTACK if attack is None else str(attack)
    info = get_attack(name)
    if norm not in info.norms:
        fits = sorted(n for n, a in ATTACKS.items() if norm in a.norms)
        raise RobfiltError(
            f"attack {name!r} has no {norm.value} version; for this threat model use one of: {', '.join(fits)}."
        )
    return name


def _config(model: Any, threat: str, attack: str, eps: float | None, options: dict[str, Any]) -> RunConfig:
    given = {k: v for k, v in options.items() if v is not None}
    if threat == "corruptions":
        return build(CorruptionConfig, {"models": (model,), "attacks": (CORRUPTION,), "baseline": None, **given})
    norm = THREAT_MODELS[threat]
    return build(ImageAttackConfig, {"models": (model,), "attacks": (attack,), "eps": (eps,), "norm": norm, **given})


def _corruption_accuracy(rows: pd.DataFrame, n: int) -> Accuracy:
    """Mean accuracy over every corruption and severity, with a Wilson interval over the ``n`` examples.

    The cells of one example are correlated, so they are not n x cells independent trials. Each example's
    score (its share of correct cells) lies in [0, 1] with variance at most p(1 - p), so a Wilson interval at
    the example count is at least as wide as the truth needs (asymptotically): conservative, never too narrow.
    """
    cells = rows[rows.kind == "contamination"]
    per_example = cells.groupby("example_id").correct.mean()
    p = float(per_example.mean())
    lo, hi = wilson_interval(p * n, n)  # type: ignore[arg-type]
    return Accuracy(p, lo, hi, n)


def _accuracy(entry: dict[str, Any]) -> Accuracy:
    return Accuracy(float(entry["acc"]), float(entry["lo"]), float(entry["hi"]), int(entry["n"]))


def _result(label: str, threat: str, attack: str, eps: float | None, run: RunResult, n: int) -> BenchmarkResult:
    per_model = run.summary["models"][label]
    clean = _accuracy(per_model["clean"])
    if threat == "corruptions":
        robust = _corruption_accuracy(run.rows, n)
    else:
        (entry,) = per_model["robust"]
        robust = _accuracy(entry)
    checks = tuple(SanityCheck(c["name"], c["status"], c["detail"]) for c in run.summary["checks"])
    for c in checks:
        if c.status == FAIL:
            log.warning("benchmark of %s: sanity check FAILED: %s: %s", label, c.name, c.detail)
        elif c.status == WARN:
            log.info("benchmark of %s: sanity check warns: %s: %s", label, c.name, c.detail)
    passed = all(c.passed for c in checks)
    return BenchmarkResult(label, threat, attack, eps, clean, robust, checks, passed, run.out, run)


def benchmark(
    model: nn.Module | str,
    data: Any = "fashion-mnist",
    threat_model: Any = "Linf",
    eps: float | None = None,
    n_examples: int | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
    seed: int = 0,
    *,
    attack: str | None = None,
    steps: int | None = None,
    checkpoint: str | None = "zoo",
    data_root: str | None = None,
    img_size: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
) -> BenchmarkResult:
    """Clean and robust accuracy of ``model`` on ``data``, with intervals and sanity checks (RobustBench's style).

    Runs through :func:`.api.evaluate` (one model, one attack, one eps), so its numbers equal evaluate's for the
    same inputs and seed. The default attack is robfilt's default everywhere, ``autoattack-fast``: the per-example
    worst case of APGD-CE, APGD-T (3 targets) and APGD-DLR (torchattacks' APGD with early exit), each on the
    survivors of the last, with a convergence check. It has fewer iterations and components than the reference
    AutoAttack (see docs/attacks.md for every difference), so read it as an upper bound on what reference
    AutoAttack would report; ``attack="autoattack"`` adds FAB-T and Square (about 3x the time), and
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
        eps: the budget on the [0, 1] scale; default 8/255 (Linf) or 0.5 (L2), RobustBench's CIFAR budgets.
        n_examples: examples drawn (seeded) from the test split; default all of them.
        batch_size, device, seed: as in :func:`.api.evaluate` (same seed, same numbers).
        checkpoint: weights for a model given by reference (``zoo``, a ``.safetensors`` file or ``none``).
        out: keep the run folder there; None runs in a temporary folder that is removed (``run_dir`` None).
    """
    _check_model(model)
    threat = _threat_model(threat_model)
    norm = THREAT_MODELS[threat]
    value = _eps(eps, norm)
    name = _attack(attack, norm, steps)
    _check_n_examples(n_examples, data)
    n = n_examples if n_examples is not None else _pool_size(data, data_root, img_size)
    options = {
        "data": data, "n_examples": n, "batch_size": batch_size, "device": str(device), "seed": seed,
        "checkpoint": checkpoint, "data_root": data_root, "img_size": img_size, "steps": steps,
    }  # fmt: skip
    config = _config(model, threat, name, value, options)
    run = evaluate(config=config, out=out, resume=resume, overwrite=overwrite)  # type: ignore[arg-type]
    return _result(config.labels[0], threat, name, value, run, n)


__all__ = ["Accuracy", "BenchmarkResult", "SanityCheck", "THREAT_MODELS", "benchmark"]
