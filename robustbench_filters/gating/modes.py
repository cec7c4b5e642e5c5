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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..errors import RobfiltError, unknown


class Mode(str, Enum):
    PAIRED = "paired"
    INTERVAL = "interval"
    POINT = "point"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str | Mode) -> Mode:
        if isinstance(text, Mode):
            return text
        try:
            return cls(text)
        except ValueError:
            raise unknown("check mode", str(text), [m.value for m in cls]) from None


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value


THRESHOLD_MODES = (Mode.INTERVAL, Mode.POINT)


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

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL


__all__ = ["THRESHOLD_MODES", "Decision", "Mode", "Status", "threshold_mode"]
