"""Token streams for language-model training and evaluation.

Training samples random windows from one long id tensor (nanoGPT style) with an explicit ``torch.Generator``,
so a seed fixes every batch and a resumed run can replay them. Measurements do not use these streams: they score
whole documents in lm-eval's rolling windows (:mod:`robustbench_filters.models.hf.perplexity`), the same for ``robfilt
train``'s card and ``robfilt attack``. :func:`eval_windows` (fixed, non-overlapping windows of one stream) is what
cards were scored with before documents.
"""

from __future__ import annotations

import logging

import torch

from ..core.errors import RobfiltError
from .tokenizers import Tokenizer

log = logging.getLogger(__name__)


def encode_corpus(text: str, tokenizer: Tokenizer) -> torch.Tensor:
    """The whole text as a 1-D int64 tensor of token ids."""
    if not text:
        raise RobfiltError("the text to encode is empty; load a non-empty split")
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    log.debug("encoded %d characters into %d tokens", len(text), ids.numel())
    return ids


def _check(data: torch.Tensor, block_size: int) -> None:
    if data.ndim != 1:
        raise ValueError(f"data must be a 1-D token tensor, got shape {tuple(data.shape)}")
    if block_size < 1:
        raise RobfiltError(f"block_size must be at least 1, got {block_size}")
    if data.numel() <= block_size:
        raise RobfiltError(
            f"the corpus has {data.numel()} tokens, fewer than block_size + 1 = {block_size + 1}; "
            "use a smaller block size or more text"
        )


def get_batch(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows: ``x`` (B, T) and targets ``y`` = ``x`` shifted left by one token.

    Start positions come from ``generator`` (CPU), so the same seed gives the same batches on any device.
    """
    _check(data, block_size)
    if batch_size < 1:
        raise RobfiltError(f"batch_size must be at least 1, got {batch_size}")
    starts = torch.randint(data.numel() - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets]
    y = data[starts[:, None] + offsets + 1]
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y


def eval_windows(data: torch.Tensor, block_size: int, n_max: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows ``x`` (N, T) with targets ``y`` shifted by one, for evaluation.

    Window i covers inputs ``data[i*T:(i+1)*T]``; together the windows cover the first ``N*T`` tokens once
    (the ragged tail is dropped). With ``n_max``, ``n_max`` windows spread evenly over the whole split are kept
    (always including the first), so a quick evaluation still sees every part of the text.
    """
    _check(data, block_size)
    n = (data.numel() - 1) // block_size
    idx = torch.arange(n)
    if n_max is not None:
        if n_max < 1:
            raise RobfiltError(f"n_max must be at least 1, got {n_max}")
        if n_max < n:
            idx = torch.div(torch.arange(n_max) * n, n_max, rounding_mode="floor")
    starts = idx * block_size
    offsets = torch.arange(block_size)
    return data[starts[:, None] + offsets], data[starts[:, None] + offsets + 1]
