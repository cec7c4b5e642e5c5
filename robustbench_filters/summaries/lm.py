"""The summary of a language-model attack run (kind ``attack``, family ``lm``): perplexity and next-token accuracy
per model, clean and per (attack, eps or word-swap rate), as :meth:`robustbench_filters.attacks.lm.LMAttack.summarise`
writes it. Runs since documents (every model scored lm-eval style) add lm-eval's three metrics with their intervals and
the compute ledger; older runs' summaries lack them and read as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Check, Checked, ChecksSummary, Summary
from .record import Record, optional, present

#: lm-eval's metrics, present for models scored lm-eval style (robustbench_filters.models.hf.rolling)
LM_EVAL: tuple[str, ...] = ("word_perplexity", "byte_perplexity", "bits_per_byte")


class _LMEval:
    """lm-eval's metrics of an entry, by name (only those the entry has)."""

    def lm_eval(self) -> dict[str, tuple[float, float | None, float | None]]:
        """metric -> (value, lo, hi) for each of :data:`LM_EVAL` the entry holds."""
        out = {}
        for name in LM_EVAL:
            value = present(getattr(self, name))
            if value is not None:
                out[name] = (value, present(getattr(self, f"{name}_lo")), present(getattr(self, f"{name}_hi")))
        return out


@dataclass(frozen=True, kw_only=True)
class _Scores:
    """What every LM entry holds: token perplexity with its 95% bootstrap interval over documents, next-token
    accuracy and totals; lm-eval's metrics with their intervals; and the compute ledger (``cost``: forward and
    backward passes, in total and per document)."""

    ppl: float
    ppl_lo: float
    ppl_hi: float
    acc: float
    nll: float
    n_tokens: int
    n_sequences: int
    ppl_median_seq: float
    n_windows: int = optional()
    word_perplexity: float = optional()
    word_perplexity_lo: float = optional()
    word_perplexity_hi: float = optional()
    byte_perplexity: float = optional()
    byte_perplexity_lo: float = optional()
    byte_perplexity_hi: float = optional()
    bits_per_byte: float = optional()
    bits_per_byte_lo: float = optional()
    bits_per_byte_hi: float = optional()
    cost: dict[str, Any] = optional()


@dataclass(frozen=True, kw_only=True)
class _Condition:
    attack: str
    kind: str  # adversarial | contamination
    eps: float


@dataclass(frozen=True, kw_only=True)
class LMScores(_LMEval, _Scores, Record):
    """The clean scores of a model."""


@dataclass(frozen=True, kw_only=True)
class LMAttackResult(_LMEval, _Scores, _Condition, Record):
    """One (attack, eps) of a model: an embedding attack (``eps_abs``) or word swap (``rate``, ``words_swapped``);
    its fields are the condition's, then the scores', then these."""

    ppl_ratio: float
    rate: float = optional()
    words_swapped: float = optional()
    eps_abs: float = optional()


@dataclass(frozen=True, kw_only=True)
class LMModelResults(Record):
    clean: LMScores
    results: list[LMAttackResult]
    cost: dict[str, dict[str, float]] = optional()  # per attack, over its whole eps or rate grid


@dataclass(frozen=True, kw_only=True)
class LMAttackSummary(Checked, Summary):
    kind: str
    family: str
    data: str
    split: str = optional()
    n_examples: int
    seed: int
    attacks: list[str]
    eps: list[float]
    rates: list[float]
    norm: str
    eps_mode: str
    eps_scale: dict[str, float]
    eps_scale_definition: str
    steps: int
    step_size: float | None  # --step-size as given; None: PGD's own 0.15 * eps (format 2 wrote "0.15*eps")
    seq_chars: int = optional()  # runs from before documents: characters per scored chunk
    windows: dict[str, dict[str, int]] = optional()  # per model: lm-eval's max_length, stride, prefix token
    replacement: str
    precision: str = optional()
    perplexity_metric: dict[str, str] = optional()
    models: dict[str, LMModelResults]
    checks: list[Check]
    checks_summary: ChecksSummary


__all__ = ["LM_EVAL", "LMAttackResult", "LMAttackSummary", "LMModelResults", "LMScores"]
