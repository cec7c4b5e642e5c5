"""Word-swap contamination: replace a seeded random fraction of content words in raw text by a fixed token.

This is a data-contamination threat model, not an optimised attack: it asks how much a language model's
perplexity degrades when some content words of its input are replaced by a meaningless placeholder (``AAA``).
It works on the raw text *before* tokenisation, so the same contaminated text is fed to every tokenizer.

Protocol (documented because results depend on it):

- A *word* is a maximal run of letters with apostrophes allowed only inside it (``don't``, ``Elinor's``), so
  quote marks and punctuation are never part of a word. Letters are Unicode letters; digits are not letters.
- A word is *eligible* when its lowercase form is not in the bundled stopword list
  (:data:`robustbench_filters.data.STOPWORDS`): function words are left alone.
- At rate ``r`` the number of swapped words is ``k = floor(r * n_eligible + u)`` with one seeded ``u ~ U[0, 1)``
  per text (stochastic rounding): always within one word of the requested fraction, and exact in expectation,
  so a low rate such as 0.015 still touches ~1.5% of the words over a corpus of short sequences (plain
  rounding would swap nothing in a sequence with fewer than 34 eligible words).
- The words are the first ``k`` of one seeded random permutation of the eligible words, and ``u`` does not
  depend on the rate, so the words swapped at a lower rate are a subset of those swapped at a higher rate
  (contamination is nested across rates).
- Every character outside the swapped words stays byte-identical.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection
from dataclasses import dataclass

from ..core.names import DEFAULT_RATES, DEFAULT_REPLACEMENT, validate_rate  # noqa: F401 - DEFAULT_RATES is re-exported

# Letters (any script) with apostrophes (ASCII or typographic) allowed only between letters.
WORD_RE = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")


@dataclass(frozen=True)
class SwapResult:
    """The contaminated text and what was done to it (spans refer to the *original* text)."""

    text: str
    n_words: int
    n_eligible: int
    n_swapped: int
    spans: tuple[tuple[int, int], ...]

    @property
    def fraction(self) -> float:
        """Swapped fraction of eligible words (0 when nothing was eligible)."""
        return self.n_swapped / self.n_eligible if self.n_eligible else 0.0


def _stopwords(stopwords: Collection[str] | None) -> Collection[str]:
    if stopwords is not None:
        return stopwords
    from ..data import load_stopwords

    return load_stopwords()


def eligible_spans(text: str, stopwords: Collection[str] | None = None) -> tuple[list[tuple[int, int]], int]:
    """Character spans of the eligible (non-stopword) words, and the total number of words."""
    stop = _stopwords(stopwords)
    spans, n_words = [], 0
    for m in WORD_RE.finditer(text):
        n_words += 1
        if m.group().lower().replace("\u2019", "'") not in stop:
            spans.append(m.span())
    return spans, n_words


def n_to_swap(rate: float, n_eligible: int, u: float = 0.5) -> int:
    """``floor(rate * n_eligible + u)``: stochastic rounding for ``u ~ U[0, 1)``, round-half-up for ``u = 0.5``."""
    return min(n_eligible, math.floor(rate * n_eligible + u))


def swap_words(
    text: str,
    rate: float,
    seed: int = 0,
    replacement: str = DEFAULT_REPLACEMENT,
    stopwords: Collection[str] | None = None,
) -> SwapResult:
    """Replace ``floor(rate * n_eligible + u)`` seeded-random non-stopwords of ``text`` by ``replacement``.

    Deterministic for ``(text, seed)``; the same seed nests the swapped words across rates. Text without
    eligible words comes back unchanged (``n_eligible == 0``); callers decide whether that is an error.
    """
    validate_rate(rate)
    spans, n_words = eligible_spans(text, stopwords)
    rng = random.Random(seed)
    k = n_to_swap(rate, len(spans), rng.random())
    if k == 0:
        return SwapResult(text, n_words, len(spans), 0, ())
    order = list(range(len(spans)))
    rng.shuffle(order)
    chosen = sorted(spans[i] for i in order[:k])
    pieces, last = [], 0
    for start, end in chosen:
        pieces += [text[last:start], replacement]
        last = end
    pieces.append(text[last:])
    return SwapResult("".join(pieces), n_words, len(spans), k, tuple(chosen))
