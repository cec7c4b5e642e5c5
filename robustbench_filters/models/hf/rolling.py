"""Perplexity as lm-eval defines it: rolling log-likelihood windows, word/byte perplexity and bits per byte.

lm-evaluation-harness scores a document with ``loglikelihood_rolling``: the document's tokens are cut into windows of
at most ``max_length`` model inputs (``get_rolling_token_windows`` and ``make_disjoint_window`` in ``lm_eval.utils``),
the first token is predicted from one *prefix token* (the tokenizer's BOS, else its EOS; for robfilt's own
tokenizers, which have neither, the newline that precedes every paragraph of their training text:
:func:`prefix_token`), and every token is predicted exactly once. The document's log-likelihood is the sum over its windows. Its ``wikitext`` task then
reports, over documents d with log-likelihood LL_d, ``W_d = len(re.split(r"\\s+", d))`` words and ``B_d`` UTF-8 bytes:

    word_perplexity = exp(-sum LL_d / sum W_d)      byte_perplexity = exp(-sum LL_d / sum B_d)
    bits_per_byte   = -sum LL_d / sum B_d / ln 2

(``weighted_perplexity`` and ``bits_per_byte`` in ``lm_eval.api.metrics``). This module implements the same windows
and the same aggregations (pure Python; :mod:`.perplexity` scores documents with a model), so robfilt's numbers
equal lm-eval's on the same documents (tests/test_hf_perplexity.py compares them with lm-eval's own ``HFLM`` and
functions). Token perplexity ``exp(-sum LL / sum tokens)`` is reported too.

Windows, as options (lm-eval's names in brackets):

- ``max_length`` [``max_length``]: model inputs per window, the context length. Default: the model's positions,
  at most :data:`DEFAULT_MAX_LENGTH` (lm-eval uses the positions, or 2048 when the config does not say).
- ``stride``: tokens newly predicted per window after the first. Default ``max_length``: disjoint windows, as
  lm-eval's ``loglikelihood_rolling`` (its ``context_len = 1``). A smaller stride gives each window
  ``max_length - stride`` tokens of extra context (``context_len = max_length - stride + 1``) at more cost.

Documents are encoded with the tokenizer's own defaults for special tokens, as lm-eval's ``tok_encode`` does (a
tokenizer that adds BOS makes BOS the first predicted token, in both).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.errors import RobfiltError
from ...core.surface import flag

DEFAULT_MAX_LENGTH = 1024
#: lm-eval's metric names, in the order tables show them.
METRICS: tuple[str, ...] = ("word_perplexity", "byte_perplexity", "bits_per_byte")
_WHITESPACE = re.compile(r"\s+")


def rolling_windows(
    tokens: Sequence[int], prefix_token: int, max_seq_len: int, context_len: int
) -> Iterator[tuple[list[int], list[int]]]:
    """(inputs, predicted tokens) per window; lm-eval's ``get_rolling_token_windows``, step for step."""
    if not 1 <= context_len <= max_seq_len:
        raise RobfiltError(f"window context {context_len} must be in [1, max_length={max_seq_len}].")
    tokens = list(tokens)
    if not tokens:
        return
    pred_len = max_seq_len - context_len + 1
    first = min(max_seq_len, len(tokens))
    yield [prefix_token] + tokens[: first - 1], tokens[:first]
    predicted = first
    while predicted < len(tokens):
        window_pred_len = min(len(tokens) - predicted, pred_len)
        end = predicted + window_pred_len
        yield tokens[end - max_seq_len - 1 : end - 1], tokens[end - window_pred_len : end]
        predicted += window_pred_len


def disjoint_window(pair: tuple[list[int], list[int]]) -> tuple[list[int], list[int]]:
    """The context without the tokens it shares with the continuation; lm-eval's ``make_disjoint_window``."""
    a, b = pair
    return a[: len(a) - (len(b) - 1)], b


def prefix_token(tokenizer: Any) -> int:
    """The token a document's first token is predicted from: the tokenizer's own ``prefix_token_id`` (robfilt's
    tokenizers: the newline; Hugging Face ones: BOS, else EOS), else a lone newline token, else ``<unk>``."""
    own = getattr(tokenizer, "prefix_token_id", None)
    if isinstance(own, int):
        return own
    newline = tokenizer.encode("\n")
    return int(newline[0]) if len(newline) == 1 else int(getattr(tokenizer, "unk_id", 0) or 0)


@dataclass(frozen=True)
class Rolling:
    """How a document is cut into scored windows: ``max_length`` inputs each, ``stride`` new tokens per window."""

    max_length: int
    stride: int
    prefix_token_id: int

    def __post_init__(self) -> None:
        if self.max_length < 1:
            raise RobfiltError(f"{flag('max_length')} must be positive, got {self.max_length}.")
        if not 1 <= self.stride <= self.max_length:
            raise RobfiltError(
                f"{flag('stride')} {self.stride} must be between 1 and {flag('max_length')} {self.max_length} (tokens newly "
                "predicted per window; the default, max_length, gives lm-eval's disjoint windows)."
            )

    @property
    def context_len(self) -> int:
        """lm-eval's ``context_len`` for this stride."""
        return self.max_length - self.stride + 1

    def windows(self, tokens: Sequence[int]) -> list[tuple[list[int], list[int]]]:
        """(context, continuation) per window: model inputs are ``(context + continuation)[:-1]`` and the last
        ``len(continuation)`` outputs are scored."""
        raw = rolling_windows(tokens, self.prefix_token_id, self.max_length, self.context_len)
        return [disjoint_window(w) for w in raw]

    def describe(self) -> dict[str, int]:
        return {"max_length": self.max_length, "stride": self.stride, "prefix_token_id": self.prefix_token_id}


@dataclass(frozen=True)
class Window:
    """One scored window of one document: inputs, their next-token targets, and how many trailing ones count."""

    doc: int
    index: int  # position of the window in its document
    inputs: list[int]
    targets: list[int]
    n_scored: int


def window_rows(token_lists: Sequence[Sequence[int]], rolling: Rolling) -> list[Window]:
    """Every window of every document, in document order (a document without tokens has none)."""
    rows = []
    for doc, tokens in enumerate(token_lists):
        for index, (context, continuation) in enumerate(rolling.windows(tokens)):
            full = context + continuation
            rows.append(Window(doc, index, full[:-1], full[1:], len(continuation)))
    return rows


def count_words(text: str) -> int:
    """Words as lm-eval's wikitext task counts them: ``len(re.split(r"\\s+", text))``."""
    return len(_WHITESPACE.split(text))


def count_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def weighted_perplexity(items: Sequence[tuple[float, float]]) -> float:
    """``exp(-sum LL / sum weight)`` over (log-likelihood, weight) pairs; lm-eval's ``weighted_perplexity``."""
    ll, weight = zip(*items, strict=True)
    return math.exp(-(sum(ll) / sum(weight)))


def bits_per_byte(items: Sequence[tuple[float, float]]) -> float:
    """``-sum LL / sum bytes / ln 2`` over (log-likelihood, bytes) pairs; lm-eval's ``bits_per_byte``."""
    ll, weight = zip(*items, strict=True)
    return -(sum(ll) / sum(weight)) / math.log(2)


@dataclass(frozen=True)
class RollingPerplexity:
    """Per-document log-likelihoods and counts, and lm-eval's three metrics over them (plus token perplexity)."""

    loglikelihoods: tuple[float, ...]
    n_words: tuple[int, ...]
    n_bytes: tuple[int, ...]
    n_tokens: tuple[int, ...]
    rolling: Rolling

    @property
    def word_perplexity(self) -> float:
        return weighted_perplexity(list(zip(self.loglikelihoods, self.n_words, strict=True)))

    @property
    def byte_perplexity(self) -> float:
        return weighted_perplexity(list(zip(self.loglikelihoods, self.n_bytes, strict=True)))

    @property
    def bits_per_byte(self) -> float:
        return bits_per_byte(list(zip(self.loglikelihoods, self.n_bytes, strict=True)))

    @property
    def token_perplexity(self) -> float:
        return weighted_perplexity(list(zip(self.loglikelihoods, self.n_tokens, strict=True)))

    def metrics(self) -> dict[str, float]:
        return {
            "word_perplexity": self.word_perplexity,
            "byte_perplexity": self.byte_perplexity,
            "bits_per_byte": self.bits_per_byte,
            "token_perplexity": self.token_perplexity,
            "n_documents": len(self.loglikelihoods),
            "n_tokens": sum(self.n_tokens),
            **self.rolling.describe(),
        }


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "METRICS",
    "RollingPerplexity",
    "Rolling",
    "Window",
    "bits_per_byte",
    "count_bytes",
    "count_words",
    "disjoint_window",
    "prefix_token",
    "rolling_windows",
    "weighted_perplexity",
    "window_rows",
]
