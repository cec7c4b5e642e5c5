"""Perturbation vs sequence length on *trained* language models (claim e).

The paper argues that additive positions inject content-position cross terms whose effect on attention grows
with the context length N, and that BSA avoids them. :func:`robustbench_filters.lipschitz.sequence_length_study`
checks that on one synthetic attention layer; here we ask the trained models. For each N, windows of N tokens
from the test text get a random embedding perturbation of fixed per-token norm (``noise`` x the model's mean
token-embedding norm); the response is the change of the next-token logits at the last position (the position
that attends over all N tokens), divided by the per-token noise norm:

    gain(N) = || f(E + delta)[N-1] - f(E)[N-1] ||_2 / (noise * mean_v ||E_v||)

The growth exponent is the least-squares slope of log(mean gain) against log N: ``slope = 0.5`` means the
response grows like sqrt(N). Windows and noise directions are drawn from one seeded generator per model, so
every model sees the same windows and directions (a paired comparison). Computed in float64.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..core.errors import RobfiltError
from ..runs.measurement import Measurement, PrepareContext, Tick
from ..runs.units import Unit
from ..summaries import STUDY_SEQLEN, StudySeqlenSummary
from ..summaries.seqlen import SeqlenModel

COLUMNS = ("model", "n", "window", "start", "gain")


def lm_seqlen_rows(
    model: nn.Module,
    label: str,
    token_ids: torch.Tensor,
    ns: Sequence[int],
    n_windows: int,
    noise: float,
    seed: int,
) -> pd.DataFrame:
    """One row per (N, window): the last-position logit gain for a per-token embedding noise."""
    block = int(model.config.block_size)
    if max(ns) > block:
        raise RobfiltError(f"sequence length {max(ns)} exceeds {label}'s block size {block}; use shorter lengths.")
    if len(token_ids) <= max(ns):
        raise RobfiltError(f"the test text has {len(token_ids)} tokens, fewer than the longest length {max(ns)}.")
    m = copy.deepcopy(model).double().eval()
    scale = float(m.tok_embed.weight.detach().norm(dim=1).mean())
    gen = torch.Generator().manual_seed(seed)
    frames = []
    for n in sorted(ns):
        starts = torch.randint(0, len(token_ids) - n, (n_windows,), generator=gen)
        idx = torch.stack([token_ids[s : s + n] for s in starts.tolist()])
        direction = torch.randn(n_windows, n, m.config.n_embd, generator=gen, dtype=torch.float64)
        delta = noise * scale * direction / direction.norm(dim=-1, keepdim=True)
        with torch.no_grad():
            emb = m.embed(idx)
            change = m.forward_embeddings(emb + delta)[:, -1] - m.forward_embeddings(emb)[:, -1]
        gain = change.norm(dim=-1) / (noise * scale)
        frames.append(
            pd.DataFrame(
                {
                    "model": label,
                    "n": n,
                    "window": np.arange(n_windows),
                    "start": starts.numpy().astype(np.int64),
                    "gain": gain.numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def growth_slope(ns: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) on log(n); NaN when fewer than two positive points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values, strict=True) if n > 0 and v > 0 and math.isfinite(v)]
    if len(pts) < 2:
        return float("nan")
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def summarize_seqlen(rows: pd.DataFrame, value: str = "gain") -> dict[str, SeqlenModel]:
    """Per model: mean response per N and the growth slope of the means."""
    out: dict[str, SeqlenModel] = {}
    for label, grp in rows.groupby("model", sort=False):
        means = grp.groupby("n")[value].mean().sort_index()
        out[str(label)] = SeqlenModel(
            mean_by_n={int(n): float(v) for n, v in means.items()},
            slope=growth_slope(list(means.index), list(means.values)),
        )
    return out


DEFINITION = (
    "gain(N) = ||delta logits at the last position|| / per-token embedding noise; slope = d log mean gain / d log N"
)


@dataclass(frozen=True)
class SeqlenLMConfig:
    """What the trained-LM study measures: the lengths, windows and noise, on ``data``'s test text.

    ``settings`` is the study plan's record of the piece (with the checkpoints' tag): it goes into the run's
    fingerprint as it is, so the study can check the folder is the piece its plan asks for.
    """

    FAMILY: ClassVar[None] = None  # the runner records the family from the manifest extra below
    KIND: ClassVar[str] = STUDY_SEQLEN

    data: str
    ns: tuple[int, ...]
    windows: int
    noise: float
    seed: int = 0
    device: str = "cpu"
    settings: dict[str, Any] = field(default_factory=dict)


class SeqlenLM(Measurement):
    """One unit per model: :func:`lm_seqlen_rows` on the shared tokenization of the test text."""

    def __init__(
        self, config: SeqlenLMConfig, models: Sequence[nn.Module], names: Sequence[str],
        tokenizer_of: Callable[[list[nn.Module], str], Any],
    ) -> None:  # fmt: skip
        super().__init__(config)
        self._models, self._names, self._tokenizer_of = list(models), list(names), tokenizer_of
        self._ids: torch.Tensor | None = None

    @property
    def family(self) -> str | None:
        return "lm"

    def prepare(self, ctx: PrepareContext) -> None:
        from ..data import load_text

        text = load_text(self.config.data, split="test")
        tokenizer = self._tokenizer_of(self._models, text)
        self._ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)

    @property
    def labels(self) -> list[str]:
        return self._names

    def modules(self) -> list[nn.Module]:
        return self._models

    def describe(self) -> dict[str, Any]:
        return dict(self.config.settings)

    def plan(self) -> list[Unit]:
        return [Unit(i, "seqlen", 0) for i in range(len(self._names))]

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        assert self._ids is not None, "prepare() first"
        c = self.config
        model, name = self._models[unit.model], self._names[unit.model]
        rows = lm_seqlen_rows(model, name, self._ids, c.ns, c.windows, c.noise, c.seed)
        tick(1)
        return rows

    def summarise(self, rows: pd.DataFrame, checks: list[Any]) -> StudySeqlenSummary:
        return StudySeqlenSummary(kind=STUDY_SEQLEN, definition=DEFINITION, models=summarize_seqlen(rows))
