"""The two model families, one vocabulary for the whole package.

An image model takes [0, 1] images and returns class logits; a language model takes token ids (or token
embeddings) and returns next-token logits. Attacks, run configs, run folders and reports all say ``image`` or
``lm``; registry names say which architecture (``deit-*`` is an image model, ``lm-*`` a language model).
"""

from __future__ import annotations

from enum import Enum


class Family(str, Enum):
    IMAGE = "image"
    LM = "lm"

    def __str__(self) -> str:
        return self.value
