"""Text corpora for the language models as one string per split: training streams, tokenizer training, checksums.

Measurements score documents (:mod:`.documents`); training samples windows from one long stream. Both read the
same sources and the same splits: the bundled corpus' split files as stored (their checksums identify the zoo's
training data), and every other source as its split's documents with a blank line between them.
"""

from __future__ import annotations

import logging

from .documents import (
    BUNDLED_TEXT,
    load_documents,
    normalise_split,
    read_bundled,
)
from .splits import SPLITS

log = logging.getLogger(__name__)

TEXT_SPLITS: tuple[str, ...] = SPLITS


def load_text(spec: str = BUNDLED_TEXT, split: str = "test", text_column: str = "text") -> str:
    """The text of one split of a corpus, as a str.

    ``spec``: ``austen`` (bundled), ``text:<path>`` (a file, a folder of split files or a folder of ``.txt``
    documents) or ``hf-disk:<path>`` (a Hugging Face ``save_to_disk`` folder's ``text_column`` rows).
    """
    split = normalise_split(split, allow_all=False)
    if spec.strip().lower() == BUNDLED_TEXT:
        text = read_bundled(split)
    else:
        text = load_documents(spec, split, text_column).joined()
    log.info("loaded text %s/%s: %d characters", spec, split, len(text))
    return text


__all__ = ["TEXT_SPLITS", "load_text"]
