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


@dataclass
class RowScores:
    """Per row (window or sequence) of a batch: summed NLL (float64; NaN where the model made no prediction),
    scored tokens and correctly predicted tokens (int64), on the CPU."""

    nll: torch.Tensor
    n_tokens: torch.Tensor
    correct: torch.Tensor

    @staticmethod
    def cat(parts: Sequence[RowScores]) -> RowScores:
        if not parts:
            empty = torch.zeros(0, dtype=torch.int64)
            return RowScores(torch.zeros(0, dtype=torch.float64), empty, empty.clone())
        return RowScores(*(torch.cat([getattr(p, k) for p in parts]) for k in ("nll", "n_tokens", "correct")))


def score_batch(model: Any, emb: torch.Tensor, b: Batch) -> RowScores:
    """Score the rows of ``b`` from the embeddings ``emb`` (clean or perturbed): ``model.forward_embeddings``.

    A row whose logits are not a finite (batch, seq, vocab) tensor at its scored positions is no prediction: NaN
    NLL and 0 correct tokens (never argmax's token 0), which fails the "model outputs finite" check.
    """
    with torch.no_grad():
        out = model.forward_embeddings(emb)
        if (
            isinstance(out, torch.Tensor)
            and out.is_floating_point()
            and out.dim() == 3
            and out.shape[:2] == b.idx.shape
        ):
            finite = torch.isfinite(out).all(-1)
            bad = ((~finite) & (b.mask > 0)).any(1)
            nll = torch.where(bad, float("nan"), sequence_nll(out, b.targets, b.mask))
            predicted = torch.where(finite, out.argmax(-1), torch.full_like(b.targets, -1))
            correct = ((predicted == b.targets).float() * b.mask).sum(1) * ~bad
        else:  # a tuple, a dict or another shape mid-run: no row of the batch has a prediction
            nll = torch.full((len(b.idx),), float("nan"), device=b.mask.device)
            correct = torch.zeros(len(b.idx), device=b.mask.device)
    n_tokens = b.mask.sum(1).round().to(torch.int64).cpu()
    return RowScores(nll.double().cpu(), n_tokens, correct.round().to(torch.int64).cpu())


def score_windows(model: Any, windows: Sequence[Any], batch_size: int, device: torch.device) -> RowScores:
    """Clean scores of ``windows`` in order, ``batch_size`` windows per forward pass (a window's numbers do not
    depend on the windows beside it, up to float rounding of the batched kernels)."""
    parts = []
    for start in range(0, len(windows), batch_size):
        b = window_batch(windows[start : start + batch_size], device)
        parts.append(score_batch(model, model.embed(b.idx), b))
    return RowScores.cat(parts)


__all__ = ["Batch", "RowScores", "score_batch", "score_windows", "sequence_nll", "window_batch"]
