"""Judge every metric of a baseline against finished runs: find, pair, decide, time. The gate's baseline step.

This is the glue a gate needs between its runs and :func:`.decide.decide_baseline`: for each baseline metric
it finds the fresh metric (one line naming what exists when it is missing), pairs the per-example outcomes
when the mode is ``paired`` (refusing different examples), decides, and measures the wall time of the whole
check for the JUnit XML (:func:`junit_cases`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import RobfiltError
from ..report.metrics import Metric, find, metrics_from_run
from ..report.runs import family_of
from ..runs.folder import Run
from .baseline import Baseline
from .decide import decide_baseline
from .junit import Stopwatch, TimedCase
from .modes import Decision, Mode
from .power import DEFAULT_ALPHA, DEFAULT_DISCORDANCE

ModeChoice = Mode | str | Callable[[Metric], Mode | str]


@dataclass(frozen=True)
class Judged:
    """One baseline check: the two metrics, the decision, the run it came from and its wall time."""

    base: Metric
    fresh: Metric
    decision: Decision
    run: str
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.fresh.model} {self.fresh.condition} {self.fresh.metric}"


def _locate(base: Metric, runs: Sequence[Run], metrics: dict[str, list[Metric]], source: str) -> tuple[Run, Metric]:
    candidates = [r for r in runs if not base.family or family_of(r) == base.family]
    for run in candidates:
        m = find(metrics[run.run_id], base.model, base.condition, base.metric)
        if m is not None:
            return run, m
    have = sorted({m.condition for r in candidates for m in metrics[r.run_id] if m.model == base.model})
    where = f"it has {base.model} at: {', '.join(have)}" if have else "no run has that model"
    raise RobfiltError(f"metric '{base.key}' of baseline {source} is missing from the run(s) ({where}).")


def judge_baseline(
    baseline: Baseline,
    runs: Sequence[Run],
    *,
    mode: ModeChoice = Mode.PAIRED,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    fallback: bool = False,
    discordance: float = DEFAULT_DISCORDANCE,
    seed: int = 0,
) -> list[Judged]:
    """Decide every baseline metric against the runs; ``mode`` may be a function of the baseline metric."""
    if not baseline.metrics:
        raise RobfiltError(f"baseline {baseline.source} holds no metrics.")
    metrics = {r.run_id: metrics_from_run(r) for r in runs}
    out = []
    for base in baseline.metrics:
        with Stopwatch() as watch:
            run, fresh = _locate(base, runs, metrics, baseline.source)
            chosen = Mode.parse(mode(base) if callable(mode) else mode)
            pair, why = (None, "")
            if chosen is Mode.PAIRED:
                pair, why = baseline.paired(run, fresh.model, fresh.condition, fresh.metric)
            decision = decide_baseline(base, fresh, mode=chosen, tolerance=tolerance, alpha=alpha, pair=pair,
                                       unpaired_reason=why, fallback=fallback, discordance=discordance, seed=seed)  # fmt: skip
        out.append(Judged(base, fresh, decision, run.run_id, watch.seconds))
    return out


def junit_cases(judged: Sequence[Judged]) -> list[TimedCase]:
    """One timed JUnit case per baseline check."""
    return [
        TimedCase(
            f"robfilt.{j.fresh.family or j.base.family or 'run'}.{j.fresh.model}",
            f"[baseline] {j.name}",
            j.decision.status.value,
            j.decision.detail,
            j.seconds,
            j.run,
        )  # fmt: skip
        for j in judged
    ]


__all__ = ["Judged", "judge_baseline", "junit_cases"]
