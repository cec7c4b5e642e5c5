"""``benchmark`` for language models: clean and attacked perplexity of one model, RobustBench's one-call style.

The image ``benchmark`` returns accuracies; a language model has none that means much, so this returns perplexities:
the token perplexity with its 95% bootstrap interval over documents, plus lm-eval's ``word_perplexity``,
``byte_perplexity`` and ``bits_per_byte`` (every model is scored on whole documents in lm-eval's rolling windows).
It runs :func:`.evaluate` with one embedding attack at one eps, so its numbers equal evaluate's for the same
inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..checks import FAIL, Check
from ..configs import LMAttackConfig, build, read
from ..core.errors import RobfiltError
from ..core.names import Norm
from ..core.surface import Surface
from ..runs.runner import RunResult
from ..summaries import LMAttackSummary
from ..summaries import lm as summaries
from ..summaries.lm import LMAttackResult

S = TypeVar("S")


@dataclass(frozen=True)
class PerplexityInterval:
    """Token perplexity [95% CI] over ``n`` documents, and lm-eval's metrics."""

    ppl: float
    lo: float
    hi: float
    n: int
    word_perplexity: float | None = None
    byte_perplexity: float | None = None
    bits_per_byte: float | None = None


@dataclass(frozen=True)
class Benchmarked(Generic[S]):
    """What ``benchmark`` returns for one model: its ``clean`` and ``robust`` score (an accuracy or a perplexity
    with its interval) under ``attack`` at ``eps``, the sanity checks behind them, where the run folder is (None:
    a temporary one) and the whole run (``run``: rows and summary, what :func:`.evaluate.evaluate` returns)."""

    model: str
    threat_model: str
    attack: str
    eps: float | None
    clean: S
    robust: S
    checks: tuple[Check, ...]
    all_checks_passed: bool
    run_dir: Path | None
    run: RunResult = field(repr=False, compare=False)

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == FAIL)


@dataclass(frozen=True)
class LMBenchmarkResult(Benchmarked[PerplexityInterval]):
    """Clean and attacked perplexity of one language model, the checks behind them, and the run folder."""

    @property
    def perplexities(self) -> tuple[float, float]:
        """``(clean, attacked)`` token perplexity."""
        return self.clean.ppl, self.robust.ppl


def _perplexity(entry: summaries.LMScores | LMAttackResult) -> PerplexityInterval:
    extra = {name: value for name, (value, _, _) in entry.lm_eval().items()}
    return PerplexityInterval(
        float(entry.ppl), float(entry.ppl_lo), float(entry.ppl_hi), int(entry.n_sequences), **extra
    )


def given_run(attack: Any, eps: Any) -> dict[str, Any]:
    """benchmark's ``attack`` and ``eps`` as the run's options (read as Python values); left out when not given,
    so the config's defaults and rules apply."""
    given = {"attacks": attack} if attack is not None else {}
    return read({**given, "eps": eps} if eps is not None else given, Surface.API)


def one_eps(config: Any) -> None:
    """A benchmark measures one budget: its config (the given eps, or the config's default grid) must hold one."""
    if len(config.eps) != 1:
        shown = ", ".join(f"{e:g}" for e in config.eps)
        raise RobfiltError(
            f"benchmark measures one eps, as RobustBench's does (where eps is required), not {shown}; pass one, e.g. "
            "eps=8/255 (Linf) or eps=0.5 (L2) for images, eps=0.05 for a language model; for an eps grid use "
            "evaluate(model, eps=[...])."
        )


def benchmark_lm(
    model: Any, data: Any, threat: str, norm: Norm | None, given: dict[str, Any], **folder: Any
) -> LMBenchmarkResult:
    """The language-model branch of :func:`.benchmark.benchmark` (see there): ``given`` are the run's options
    (``attack`` and ``eps`` among them), ``norm`` the threat model's (None: corruptions) and ``folder`` the run
    folder's (``out``, ``resume``, ``overwrite``) and the processes (``workers``)."""
    from .evaluate import evaluate

    if norm is None:
        raise RobfiltError(
            "threat_model='corruptions' is for image models; for a language model use "
            "evaluate(model, attacks=['wordswap'], tokenizer=...) for word-swap contamination."
        )
    if not isinstance(data, str):
        raise RobfiltError(
            f"a language model reads text: pass data='austen', 'text:FILE' or 'hf-disk:DIR', not {type(data).__name__}."
        )
    attacks = given.get("attacks", ())
    if any(a not in ("fgsm", "pgd") for a in attacks):
        raise RobfiltError(
            f"attack {attacks[0]!r} has no language-model version; use 'pgd' or 'fgsm' (embedding space)."
        )
    given = {k: v for k, v in given.items() if v is not None}
    config = build(LMAttackConfig, {"models": (model,), "norm": norm, "data": data, **given})
    assert isinstance(config, LMAttackConfig)
    one_eps(config)
    run = evaluate(config=config, **folder)
    name, value = config.attacks[0], config.eps[0]
    label = config.labels[0]
    summary = run.summary
    assert isinstance(summary, LMAttackSummary)
    per_model = summary.models[label]
    (entry,) = [r for r in per_model.results if r.attack == name]
    checks = tuple(Check(c.name, c.model, c.status, c.detail) for c in summary.checks)
    return LMBenchmarkResult(
        label, threat, name, value, _perplexity(per_model.clean), _perplexity(entry), checks,
        all(c.status != FAIL for c in checks), run.out, run,
    )  # fmt: skip
