"""The one rule that cuts a text into train/valid/test: contiguous ranges, cut at paragraph breaks.

Contiguous ranges (not random lines) keep test text unseen as a whole: a language model cannot memorise the
test chapters from neighbouring training lines. Cutting at a paragraph break keeps sentences whole. The bundled
Austen corpus was cut with this rule per novel (``scripts/build_assets.py`` loads this file directly), and a user's
source without splits is cut by the same rule at document boundaries (:func:`.documents.split_bounds`), so both
behave the same.

This module imports only the standard library, so the build script can load it without importing torch.
"""

from __future__ import annotations

from collections.abc import Sequence

SPLITS: tuple[str, ...] = ("train", "valid", "test")
FRACTIONS: tuple[float, ...] = (0.90, 0.05, 0.05)


def _cut(text: str, target: int) -> int:
    """First paragraph break at or after ``target`` (else a line break, else ``target`` itself)."""
    for sep in ("\n\n", "\n"):
        at = text.find(sep, target)
        if at != -1:
            return at
    return min(target, len(text))


def contiguous_split(text: str, fractions: tuple[float, ...] = FRACTIONS) -> tuple[str, ...]:
    """Cut ``text`` into ``len(fractions)`` contiguous parts of about those character fractions.

    Each cut moves forward to the next blank line (paragraph break), else the next newline. Parts are stripped
    of surrounding newlines; a part can be empty when the text is too short.
    """
    if abs(sum(fractions) - 1.0) > 1e-9 or any(f < 0 for f in fractions):
        raise ValueError(f"fractions must be non-negative and sum to 1, got {fractions}")
    bounds = [0]
    acc = 0.0
    for f in fractions[:-1]:
        acc += f
        bounds.append(max(bounds[-1], _cut(text, round(acc * len(text)))))
    bounds.append(len(text))
    return tuple(text[a:b].strip("\n") for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def split_bounds(docs: Sequence[str], fractions: tuple[float, ...] = FRACTIONS) -> list[int]:
    """Document indices that cut ``docs`` into contiguous runs of about ``fractions`` of their characters: each cut
    is the first document boundary at or after its share (the rule :func:`contiguous_split` applies to
    characters)."""
    sizes = [len(d) for d in docs]
    total, bounds, acc = sum(sizes), [0], 0.0
    for f in fractions[:-1]:
        acc += f
        target, seen, i = acc * total - 1e-9 * total, 0, 0  # (float sums of the fractions must not move a cut)
        while i < len(sizes) and seen < target:
            seen += sizes[i]
            i += 1
        bounds.append(max(bounds[-1], i))
    return [*bounds, len(docs)]


def split_documents(docs: Sequence[str], split: str) -> list[str]:
    """The documents of ``split`` (``all`` or one of train/valid/test) of a source without splits of its own."""
    if split == "all":
        return list(docs)
    b = split_bounds(docs)
    i = SPLITS.index(split)
    return list(docs[b[i] : b[i + 1]])
