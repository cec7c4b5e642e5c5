"""The one metric code of every language model: lm-eval's rolling log-likelihood of whole documents.

``robfilt attack`` (its clean rows), ``robfilt train`` (the card's test perplexities, robfilt's own LMs and
Hugging Face fine-tunes alike) and :func:`evaluate_perplexity` all call :func:`score_documents`: each document is
tokenised by the model's tokenizer, cut into lm-eval's rolling windows (:mod:`.rolling`: ``max_length`` inputs,
``stride`` new tokens each, the first token predicted from the tokenizer's prefix token) and scored window by
window, and a document's log-likelihood is the sum over its windows in order, as ``HFLM.loglikelihood_rolling``
computes it. :class:`.rolling.RollingPerplexity` then aggregates lm-eval's word and byte perplexities and bits per byte
(the denominators counted on the original text) and the token perplexity.

Any model with ``embed(ids)`` and ``forward_embeddings(embeddings)`` is scored this way: robfilt's own GPT and a
Hugging Face causal LM seen through :class:`~.adapter.HFCausalLM`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import RobfiltError
from .rolling import (
    Rolling,
    RollingPerplexity,
    count_bytes,
    count_words,
    window_rows,
)


@dataclass(frozen=True)
class DocumentScores:
    """Per document: summed NLL over its windows (float64; NaN if any window had no prediction), predicted tokens,
    correctly predicted tokens, windows, and the forward passes spent (one per window)."""

    nll: np.ndarray
    n_tokens: np.ndarray
    correct: np.ndarray
    n_windows: np.ndarray

    @property
    def fwd(self) -> np.ndarray:
        return self.n_windows.astype(np.float64)


def per_document(values: Any, owners: np.ndarray, n_docs: int, dtype: Any) -> np.ndarray:
    """Per-window values summed per document (``owners``: each window's document), in window order."""
    out = np.zeros(n_docs, dtype=dtype)
    np.add.at(out, owners, np.asarray(values, dtype=dtype))
    return out


def score_documents(
    model: Any, token_lists: Sequence[Sequence[int]], rolling: Rolling, batch_size: int, device: Any
) -> DocumentScores:
    """lm-eval's rolling scores of tokenised documents under ``model`` (eval mode, no gradients), ``batch_size``
    windows per forward pass. A document without tokens has no window: NLL 0 over 0 tokens (the LM checks fail a
    run that has one, and no perplexity is computed over no tokens)."""
    import torch

    from ..lm_batch import score_windows

    windows = window_rows(token_lists, rolling)
    scores = score_windows(model, windows, batch_size, torch.device(device))
    owners = np.array([w.doc for w in windows], dtype=np.int64)
    n = len(token_lists)
    return DocumentScores(
        nll=per_document(scores.nll.numpy(), owners, n, np.float64),
        n_tokens=per_document(scores.n_tokens.numpy(), owners, n, np.int64),
        correct=per_document(scores.correct.numpy(), owners, n, np.int64),
        n_windows=per_document(np.ones(len(windows)), owners, n, np.int64),
    )


def perplexity_of(texts: Sequence[str], scores: DocumentScores, rolling: Rolling) -> RollingPerplexity:
    """lm-eval's metrics of ``texts`` from their scores; refused in one line when a document has no tokens (a
    perplexity over no tokens would print as the score of a perfect model)."""
    empty = [i for i, n in enumerate(scores.n_tokens) if n == 0]
    if empty:
        raise RobfiltError(
            f"{len(empty)} of {len(texts)} documents have no tokens under the tokenizer (the first: document "
            f"{empty[0]}, {texts[empty[0]][:40]!r}); check the tokenizer, or drop empty documents."
        )
    return RollingPerplexity(
        loglikelihoods=tuple(-float(v) for v in scores.nll),
        n_words=tuple(count_words(d) for d in texts),
        n_bytes=tuple(count_bytes(d) for d in texts),
        n_tokens=tuple(int(t) for t in scores.n_tokens),
        rolling=rolling,
    )


def protocol(rolling: Rolling) -> str:
    """How a card's test perplexities were computed, in words (recorded next to them)."""
    return (
        f"lm-eval rolling log-likelihood of the test documents (max_length {rolling.max_length}, stride "
        f"{rolling.stride}, prefix token {rolling.prefix_token_id}); word/byte counts of the original text"
    )


def card_metrics(
    model: Any, tokenizer: Any, texts: Sequence[str], rolling: Rolling, batch_size: int = 16, device: Any = "cpu"
) -> dict[str, Any]:
    """The test metrics ``robfilt train`` writes into a card: :func:`score_documents` of the test documents (the
    function ``robfilt attack`` scores its clean rows with), aggregated as lm-eval does, and how."""
    scores = score_documents(model, [tokenizer.encode(t) for t in texts], rolling, batch_size, device)
    p = perplexity_of(texts, scores, rolling)
    nll = -sum(p.loglikelihoods) / sum(p.n_tokens)
    return {
        "test_nll": nll,
        "test_ppl": p.token_perplexity,
        "test_word_perplexity": p.word_perplexity,
        "test_byte_perplexity": p.byte_perplexity,
        "test_bits_per_byte": p.bits_per_byte,
        "test_tokens": sum(p.n_tokens),
        "test_documents": len(texts),
        "test_protocol": protocol(rolling),
    }


def evaluate_perplexity(
    model: Any,
    texts: str | Sequence[str],
    tokenizer: Any = None,
    *,
    max_length: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
) -> RollingPerplexity:
    """lm-eval's rolling log-likelihood of each document in ``texts``, and its perplexity metrics.

    ``model``: an ``hf:`` reference, a loaded :class:`~.adapter.HFCausalLM`, or a ``transformers`` causal LM with
    its ``tokenizer``. Windows are batched ``batch_size`` at a time; a window's numbers do not depend on its batch.
    """
    from .load import as_hf_lm

    docs = [texts] if isinstance(texts, str) else list(texts)
    if not docs:
        raise RobfiltError("no documents to score; pass texts=['...'].")
    if batch_size < 1:
        raise RobfiltError(f"batch_size must be positive, got {batch_size}.")
    lm = as_hf_lm(model, tokenizer, max_length=max_length, stride=stride)
    lm = lm.to(device).eval()
    scores = score_documents(lm, [lm.tokenizer.encode(d) for d in docs], lm.rolling, batch_size, device)
    return perplexity_of(docs, scores, lm.rolling)


__all__ = [
    "DocumentScores",
    "card_metrics",
    "evaluate_perplexity",
    "per_document",
    "perplexity_of",
    "protocol",
    "score_documents",
]
