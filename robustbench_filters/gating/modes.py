"""The vocabulary of gate decisions: how a check judges (its mode), what it says (status), and why.

Three modes, chosen per check:

- ``paired`` (the default against a baseline): a one-sided test on the same examples, "is the fresh run
  worse than the baseline by more than the tolerance?" (exact McNemar for accuracies, a score test when a
  tolerance margin is set, a sign-flip permutation test for perplexity and token accuracy). FAIL when
  p < alpha. Needs per-example outcomes of both runs.
- ``interval``: the 95% intervals rule. A threshold fails when the whole interval misses it; a baseline fails
  when the intervals, widened by the tolerance, no longer overlap. Conservative: at n = 500 it misses
  regressions of 5-10 points that the paired test sees.
- ``point``: strict, on point estimates alone (fails at any miss beyond the tolerance; a model whose outcome
  changes on a few examples by chance fails about half the time at the boundary).

A threshold check (no baseline) supports ``interval`` and ``point``; a baseline check all three.

Several paired checks in one gate form a family: :class:`Correction` ``holm`` (the default) adjusts their
p-values so that a model no worse than its baseline fails *any* of them with probability at most alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Self

from ..core.errors import RobfiltError, unknown


class _Word(str, Enum):
    """A word of the gate's vocabulary: printed as its value (details, JSON, JUnit) and parsed from a spec's or a
    flag's text with the refusal every such word gives."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str | Self) -> Self:
        if isinstance(text, cls):
            return text
        try:
            return cls(text)
        except ValueError:
            raise unknown(cls.noun(), str(text), [m.value for m in cls]) from None

    @classmethod
    def noun(cls) -> str:
        """What a refusal calls the word (the class name unless that would not read well)."""
        return cls.__name__.lower()


class Mode(_Word):
    PAIRED = "paired"
    INTERVAL = "interval"
    POINT = "point"

    @classmethod
    def noun(cls) -> str:
        return "check mode"


class Status(_Word):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


class Correction(_Word):
    """Multiple-testing correction across a gate's paired p-values."""

    HOLM = "holm"
    NONE = "none"


THRESHOLD_MODES = (Mode.INTERVAL, Mode.POINT)
DEFAULT_ALPHA = 0.05
# Share of examples whose outcome differs between the baseline and a changed model. Measured at n = 500:
# two training seeds of the study's deit differ on 14-18% of examples (clean and FGSM/PGD up to eps 0.02,
# reports/study/runs/s0 vs s1); zoo deit vs deit-bsa / deit-grc / deit-bsa-grc on 8-9% clean and 10-23% under
# PGD (reports/vision/tables/paired_vs_baseline.csv). A patched model differs less than a retrained one, so
# 0.20 errs on the large side of the printed paired MDE.
DEFAULT_DISCORDANCE = 0.20


def threshold_mode(mode: Mode | str) -> Mode:
    """A threshold check's mode; ``paired`` is refused (there is nothing to pair a threshold with)."""
    mode = Mode.parse(mode)
    if mode is Mode.PAIRED:
        raise RobfiltError(
            "a threshold check has no baseline to pair with, so mode = 'paired' cannot apply; use mode = "
            "'interval' or 'point' for thresholds (paired needs baseline = ...)."
        )
    return mode


@dataclass(frozen=True)
class Decision:
    """One judged check: status and a one-line reason; the p-value and effect where a test ran."""

    status: Status
    mode: Mode
    detail: str
    p_value: float | None = None
    effect: float | None = None  # how much worse the fresh value is (acc: absolute drop; ppl: relative rise)
    mde: float | None = None  # the smallest such effect this check detects with 80% power (None: unknown)
    mde_text: str = ""  # the MDE with its assumptions, for the summary
    mde_assumption: str = ""  # the assumptions alone (one line), for footnotes
    p_adjusted: float | None = None  # the p-value after the gate's multiple-testing correction

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL


@dataclass(frozen=True)
class BaselinePolicy:
    """How a gate compares with a baseline (the spec's ``[baseline]`` table); the defaults are the spec's."""

    mode: Mode = Mode.PAIRED
    alpha: float = DEFAULT_ALPHA
    tolerance: float = 0.0
    interval_fallback: bool = True  # no per-example outcomes in the baseline: use the interval rule, say so
    discordance: float = DEFAULT_DISCORDANCE  # planning only: share of examples assumed to change outcome (the MDE)
    correction: Correction = Correction.HOLM

    def describe(self) -> str:
        text = f"{self.mode} mode"
        if self.mode is Mode.PAIRED:
            text += f", one-sided alpha {self.alpha:g}"
            text += ", Holm across paired checks" if self.correction is Correction.HOLM else ", no correction"
        if self.tolerance:
            text += f", tolerance {self.tolerance:g}"
        return text


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_DISCORDANCE",
    "THRESHOLD_MODES",
    "BaselinePolicy",
    "Correction",
    "Decision",
    "Mode",
    "Status",
    "threshold_mode",
]
