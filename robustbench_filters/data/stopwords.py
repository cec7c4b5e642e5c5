"""English stopwords: the words the word-swap contamination attack leaves alone (or targets).

Function words (articles, pronouns, auxiliaries, prepositions) carry little content; perturbing them is a
different threat model from perturbing content words, so the attack needs the list. It is bundled
(``assets/stopwords.txt``, written for this project) rather than fetched from NLTK, which would need a
download at run time. Loaded lazily, so a damaged asset only affects code that uses it.
"""

from __future__ import annotations

import functools
from typing import Any

from ..core.errors import ChecksumError
from ..core.textfiles import read_text
from .assets import asset_path

__all__ = ["STOPWORDS", "load_stopwords"]


@functools.cache
def load_stopwords() -> frozenset[str]:
    """The bundled stopword list: lowercase words, including contractions such as ``don't``."""
    path = asset_path("stopwords.txt")
    try:
        words = frozenset(w.strip() for w in read_text(path).splitlines() if w.strip())
    except (OSError, UnicodeDecodeError) as e:
        raise ChecksumError(f"bundled asset {path} cannot be read ({e}); reinstall robustbench-filters") from None
    return words


def __getattr__(name: str) -> Any:
    # ``STOPWORDS`` is a module attribute computed on first access (PEP 562).
    if name == "STOPWORDS":
        return load_stopwords()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


STOPWORDS: frozenset[str]
