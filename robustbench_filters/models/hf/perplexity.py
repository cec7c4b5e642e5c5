"""lm-eval's perplexities of documents under a Hugging Face causal LM: :func:`evaluate_perplexity`.

The windows and the metric definitions live in :mod:`.rolling` (re-exported here); this module runs the model over
the windows, batched, and sums each document's log-likelihood over its windows in order, as lm-eval does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.errors import RobfiltError
from .rolling import (
    DEFAULT_MAX_LENGTH,
    METRICS,
    Perplexity,
    Rolling,
    Window,
    bits_per_byte,
    count_bytes,
    count_words,
    disjoint_window,
    rolling_windows,
    weighted_perplexity,
    window_rows,
)


def evaluate_perplexity(
    model: Any,
    texts: str | Sequence[str],
    tokenizer: Any = None,
    *,
    max_length: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
) -> Perplexity:
    """lm-eval's rolling log-likelihood of each document in ``texts``, and its perplexity metrics.

    ``model``: an ``hf:`` reference, a loaded :class:`~.adapter.HFCausalLM`, or a ``transformers`` causal LM with
    its ``tokenizer``. Windows are batched ``batch_size`` at a time; a window's numbers do not depend on its batch.
    """
    import torch

    from ..lm_batch import sequence_nll, window_batch
    from .load import as_hf_lm

    docs = [texts] if isinstance(texts, str) else list(texts)
    if not docs:
        raise RobfiltError("no documents to score; pass texts=['...'].")
    if batch_size < 1:
        raise RobfiltError(f"batch_size must be positive, got {batch_size}.")
    lm = as_hf_lm(model, tokenizer, max_length=max_length, stride=stride)
    token_lists = [lm.tokenizer.encode(d) for d in docs]
    rows = window_rows(token_lists, lm.rolling)
    nll = [0.0] * len(docs)
    lm = lm.to(device).eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            b = window_batch(chunk, torch.device(device))
            per_window = sequence_nll(lm.forward_embeddings(lm.embed(b.idx)), b.targets, b.mask).double().cpu()
            for w, value in zip(chunk, per_window.tolist(), strict=True):
                nll[w.doc] += value
    return Perplexity(
        loglikelihoods=tuple(-v for v in nll),
        n_words=tuple(count_words(d) for d in docs),
        n_bytes=tuple(count_bytes(d) for d in docs),
        n_tokens=tuple(len(t) for t in token_lists),
        rolling=lm.rolling,
    )


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "METRICS",
    "Perplexity",
    "Rolling",
    "Window",
    "bits_per_byte",
    "count_bytes",
    "count_words",
    "disjoint_window",
    "evaluate_perplexity",
    "rolling_windows",
    "weighted_perplexity",
    "window_rows",
]
