"""The sequence-length study of :mod:`.seqlen` as a run: a measurement the shared runner writes and verifies.

The study is not per-example (one row per length N and attention kind), but it is still a measurement: its folder
gets the same fingerprint, hashes, lock, resume and output-folder safety as every other run, which is why it goes
through :func:`robustbench_filters.runs.runner.run` instead of writing a folder by hand. The fingerprint records
the synthetic layers' weights (drawn from the seed), so two seeds are two different runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
from torch import nn

from ..core.errors import RobfiltError
from ..core.progress import ProgressHook
from ..runs.measurement import Measurement, PrepareContext, Tick
from ..runs.runner import RunResult, run
from ..runs.units import Unit
from ..summaries import SEQLEN, SeqlenSummary
from .seqlen import DEFAULT_NS, _layers, sequence_length_study

LABEL = "attention-layer"


@dataclass(frozen=True)
class SeqlenConfig:
    """How the one-layer study is drawn (see :func:`.seqlen.sequence_length_study` for what each field means)."""

    FAMILY: ClassVar[None] = None  # neither image nor LM: a synthetic layer
    KIND: ClassVar[str] = SEQLEN

    ns: tuple[int, ...] = DEFAULT_NS
    dim: int = 64
    heads: int = 4
    noise: float = 1e-3
    trials: int = 8
    sigma_range: tuple[float, float] = (2.0, 64.0)
    seed: int = 0
    device: str = "cpu"

    def validate(self) -> None:
        if not self.ns or any(int(n) != n or n < 1 for n in self.ns) or len(set(self.ns)) != len(self.ns):
            raise RobfiltError(f"ns must be distinct positive sequence lengths, got {list(self.ns)}.")
        if self.dim < 1 or self.heads < 1 or self.dim % self.heads:
            raise RobfiltError(f"dim {self.dim} must split evenly into {self.heads} heads; change either.")
        if not (math.isfinite(self.noise) and self.noise > 0):
            raise RobfiltError(f"noise must be a positive number, got {self.noise}.")
        if self.trials < 1:
            raise RobfiltError(f"trials must be at least 1, got {self.trials}.")
        lo, hi = self.sigma_range
        if not (0 < lo <= hi and math.isfinite(hi)):
            raise RobfiltError(f"sigma_range must be 0 < low <= high, got {self.sigma_range}.")


class SeqlenLayer(Measurement):
    """One unit: the whole study (its draws come from one generator, so it is not split)."""

    def __init__(self, config: SeqlenConfig) -> None:
        config.validate()
        super().__init__(config)
        self._modules: nn.ModuleDict | None = None

    def prepare(self, ctx: PrepareContext) -> None:
        c = self.config
        layers = _layers(c.dim, c.heads, tuple(c.sigma_range), c.seed)
        self._modules = nn.ModuleDict({"softmax": layers["softmax"], "bsa_gaussian": layers["bsa-gaussian"]})

    @property
    def labels(self) -> list[str]:
        return [LABEL]

    def modules(self) -> list[nn.Module]:
        assert self._modules is not None, "prepare() first"
        return [self._modules]

    def describe(self) -> dict[str, Any]:
        c = asdict(self.config)
        c.pop("device")
        return {"study": "sequence_length", **c, "ns": list(c["ns"]), "sigma_range": list(c["sigma_range"])}

    def plan(self) -> list[Unit]:
        return [Unit(0, "study", 0)]

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        c = self.config
        rows = sequence_length_study(
            tuple(c.ns), dim=c.dim, heads=c.heads, noise=c.noise, trials=c.trials,
            sigma_range=tuple(c.sigma_range), seed=c.seed,
        )  # fmt: skip
        tick(1)
        return rows

    def summarise(self, rows: pd.DataFrame, checks: list[Any]) -> SeqlenSummary:
        return SeqlenSummary(kind=SEQLEN, n_values=sorted(int(n) for n in rows["n"].unique()))


def sequence_length_run(
    out: str | Path | None = None,
    config: SeqlenConfig | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
) -> RunResult:
    """Run the one-layer sequence-length study into the run folder ``out`` (kind ``seqlen``; reports read it)."""
    return run(SeqlenLayer(config or SeqlenConfig()), out=out, resume=resume, overwrite=overwrite, progress=progress)


__all__ = ["SeqlenConfig", "SeqlenLayer", "sequence_length_run"]
