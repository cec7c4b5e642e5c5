"""Token batches as the language models consume them, and the loss every LM measurement sums.

A batch holds inputs, their next-token targets and a mask of the positions that are scored; lm-eval's rolling
windows (:mod:`robustbench_filters.models.hf.rolling`) make one row per window, and ``owner`` maps rows back to their
sequence. Kept beside the models, below the attacks, the checks and the Hugging Face adapter, because all three
score batches the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def sequence_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Summed next-token NLL per sequence (B,), counting only positions where ``mask`` is true."""
    ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)
    return (ce * mask).sum(1)


@dataclass
class Batch:
    idx: torch.Tensor  # (R, T) inputs, padded with 0: one row per sequence, or per window with ``owner``
    targets: torch.Tensor  # (R, T)
    mask: torch.Tensor  # (R, T) float, 1 on scored positions
    owner: torch.Tensor | None = None  # (R,) the sequence of each window row; None: row i is sequence i
    window: torch.Tensor | None = None  # (R,) the window's index within its sequence
    support: torch.Tensor | None = None  # (R, T) float, 1 on real inputs (scored or context); None: ``mask``

    @property
    def valid(self) -> torch.Tensor:
        """Where an embedding perturbation may act: every real input position."""
        return self.mask if self.support is None else self.support

    @property
    def n_sequences(self) -> int:
        return len(self.idx) if self.owner is None else int(self.owner.max()) + 1 if len(self.owner) else 0

    def per_sequence(self, values: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
        """Per-row values (R,) combined per sequence (B,): summed, or their maximum."""
        if self.owner is None:
            return values
        owner = self.owner.to(values.device)
        out = torch.zeros(self.n_sequences, dtype=values.dtype, device=values.device)
        if reduce == "sum":
            return out.index_add_(0, owner, values)
        return out.scatter_reduce_(0, owner, values, "amax", include_self=False)


def window_batch(windows: Sequence[Any], device: torch.device) -> Batch:
    """One row per lm-eval window (:class:`robustbench_filters.models.hf.rolling.Window`), right-padded; only the
    window's trailing ``n_scored`` targets count."""
    width = max(1, max((len(w.inputs) for w in windows), default=1))
    idx = torch.zeros(len(windows), width, dtype=torch.long)
    tgt = torch.zeros_like(idx)
    mask = torch.zeros(len(windows), width)
    support = torch.zeros_like(mask)
    for i, w in enumerate(windows):
        n = len(w.inputs)
        idx[i, :n] = torch.tensor(w.inputs)
        tgt[i, :n] = torch.tensor(w.targets)
        mask[i, n - w.n_scored : n] = 1.0
        support[i, :n] = 1.0 if w.n_scored else 0.0
    owner = torch.tensor([w.doc for w in windows], dtype=torch.long)
    index = torch.tensor([w.index for w in windows], dtype=torch.long)
    return Batch(idx.to(device), tgt.to(device), mask.to(device), owner, index, support.to(device))


__all__ = ["Batch", "sequence_nll", "window_batch"]
