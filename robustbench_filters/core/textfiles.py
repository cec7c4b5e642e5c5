"""Text files read as text: UTF-8, with a byte-order mark at the start taken for the marker it is, never content.

Windows editors (Notepad, Excel's "CSV UTF-8") start a UTF-8 file with the byte-order mark EF BB BF. Decoded as
plain UTF-8 it becomes the character U+FEFF in front of the text, and a language model scores it like any other
character: the first document gains a token and 3 bytes and its NLL changes; a TOML or JSON parser refuses the file.
So every file of text robfilt reads from a user (documents, text folders, specs, baselines, tokenizers, class maps,
configs) is decoded with :data:`ENCODING`, which drops the mark where it is one (the first character) and reads the
rest as UTF-8. Text that arrives decoded already (a dataset's rows) loses a leading U+FEFF the same way
(:func:`without_bom`). A U+FEFF further in is left alone: there it is a character of the text.
"""

from __future__ import annotations

import gzip
from pathlib import Path

#: the codec of every text file robfilt reads: UTF-8 without a leading byte-order mark
ENCODING = "utf-8-sig"
BOM = "\ufeff"


def read_text(path: str | Path) -> str:
    """The text of a UTF-8 file (gzipped when its name ends in ``.gz``), newlines normalised to ``\\n``, without a
    leading byte-order mark. Raises what ``open`` raises (OSError, EOFError, UnicodeDecodeError): callers name the
    file and the fix in their own words."""
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding=ENCODING) as f:
            return f.read()
    return path.read_text(encoding=ENCODING)


def decode(raw: bytes) -> str:
    """``raw`` UTF-8 bytes as text, without a leading byte-order mark (UnicodeDecodeError if not UTF-8)."""
    return raw.decode(ENCODING)


def without_bom(text: str) -> str:
    """``text`` without a leading U+FEFF: a byte-order mark that an earlier decoder kept as a character."""
    return text[1:] if text.startswith(BOM) else text


__all__ = ["BOM", "ENCODING", "decode", "read_text", "without_bom"]
