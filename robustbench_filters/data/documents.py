"""Text sources as lists of documents, the unit language models are scored on (as lm-eval scores wikitext pages).

A user means whole documents, never fixed-length character chunks cut mid-word, so every text source is read as a
list of documents and a split is a contiguous run of them:

- ``austen`` (bundled): the paragraphs (blank-line separated) of each split's chapters;
- ``text:FILE``: the file's paragraphs (blank-line separated; surrounding whitespace removed);
- ``text:FOLDER``: with ``train.txt``/``valid.txt``/``test.txt`` (or WikiText's ``wiki.*.tokens``, whose documents
  are its articles) each split file's documents; otherwise one document per ``.txt`` file (hidden files skipped),
  in name order;
- ``hf-disk:DIR``: one document per non-empty row of the text column; a ``DatasetDict``'s own splits.

``split``: ``all``, ``train``, ``val`` or ``test`` (:data:`DEFAULT_SPLIT`). Sources without splits of their own are
cut into contiguous train/val/test runs of about 90/5/5% of their characters at document boundaries
(:func:`split_documents`), so a split never starts or ends inside a document, and held-out documents stay whole.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ChecksumError, RobfiltError, unknown
from ..core.io import expand_user
from ..core.names import BUNDLED_TEXT, DEFAULT_TEXT_SPLIT, TEXT_PREFIX, TEXT_SPLIT_CHOICES, normalise_split
from ..core.names import HF_DISK as HF_DISK_PREFIX
from ..core.textfiles import read_text
from .assets import asset_path
from .splits import SPLITS, split_bounds, split_documents

log = logging.getLogger(__name__)

#: Text specs for CLI help and completion.
TEXT_DATASETS: tuple[str, ...] = (BUNDLED_TEXT, f"{TEXT_PREFIX}<path>", f"{HF_DISK_PREFIX}<path>")
ALL = "all"
SPLIT_CHOICES = TEXT_SPLIT_CHOICES
DEFAULT_SPLIT = DEFAULT_TEXT_SPLIT
#: File names tried, in order, for each split of a text folder.
FOLDER_NAMES = {
    "train": ("wiki.train.tokens", "train.txt", "train.txt.gz"),
    "valid": ("wiki.valid.tokens", "valid.txt", "val.txt", "validation.txt", "valid.txt.gz"),
    "test": ("wiki.test.tokens", "test.txt", "test.txt.gz"),
}
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_WIKI_TITLE = re.compile(r"^ = [^=].* = $", re.M)  # a top-level WikiText heading starts an article


def paragraphs(text: str) -> list[str]:
    """The blank-line-separated paragraphs of ``text``, surrounding whitespace removed, empty ones dropped."""
    return [p.strip() for p in _BLANK_LINE.split(text.replace("\r\n", "\n")) if p.strip()]


def wiki_articles(text: str) -> list[str]:
    """The articles of a WikiText ``.tokens`` file (a top-level `` = Title = `` line starts each), as lm-eval's
    document-level wikitext has them."""
    starts = [m.start() for m in _WIKI_TITLE.finditer(text)]
    if not starts:
        return paragraphs(text)
    cuts = sorted({0, *starts, len(text)})
    return [d.strip() for a, b in zip(cuts[:-1], cuts[1:], strict=True) if (d := text[a:b]).strip()]


@dataclass(frozen=True)
class Documents:
    """The documents of one split of a text source, and how the source was cut into them."""

    texts: tuple[str, ...]
    data: str
    split: str
    unit: str  # what one document is: "paragraph", "file", "row", "article"

    @property
    def n_chars(self) -> int:
        return sum(len(t) for t in self.texts)

    @property
    def checksum(self) -> str:
        """sha256 of the documents (a NUL between documents), what run fingerprints record."""
        return hashlib.sha256("\0".join(self.texts).encode()).hexdigest()[:16]

    def describe(self, default: bool = False) -> str:
        """'austen: split test (the default), 424 documents (paragraphs), 195,410 characters'."""
        how = " (the default; --split all, train, val or test)" if default else ""
        name = "val" if self.split == "valid" else self.split
        return (
            f"{self.data}: split {name}{how}, {len(self.texts):,} documents ({self.unit}s), {self.n_chars:,} characters"
        )

    def joined(self) -> str:
        """The documents as one text, a blank line between them (training streams, tokenizer training)."""
        return "\n\n".join(self.texts)


def load_documents(spec: str = BUNDLED_TEXT, split: str = DEFAULT_SPLIT, text_column: str = "text") -> Documents:
    """The documents of ``split`` of the text source ``spec`` (see the module docstring); one line if none."""
    split = normalise_split(split)
    spec = spec.strip()
    if spec.lower() == BUNDLED_TEXT:
        parts = SPLITS if split == ALL else (split,)
        docs, unit = [d for s in parts for d in paragraphs(read_bundled(s))], "paragraph"
    elif spec.startswith(TEXT_PREFIX):
        docs, unit = _user_documents(spec[len(TEXT_PREFIX) :], split)
    elif spec.startswith(HF_DISK_PREFIX):
        from .hf import load_hf_documents

        docs, unit = load_hf_documents(spec[len(HF_DISK_PREFIX) :], split, text_column), "row"
    else:
        if spec and expand_user(spec).exists():
            raise RobfiltError(f"unknown text dataset {spec!r}; to load your own text use 'text:{spec}'")
        raise unknown("text dataset", spec, TEXT_DATASETS)
    if not docs:
        raise RobfiltError(f"the {_name(split)} split of {spec} holds no documents; {_fix(split)}")
    return Documents(tuple(docs), spec, split, unit)


def _name(split: str) -> str:
    return "val" if split == "valid" else split


def _fix(split: str) -> str:
    if split == ALL:
        return "give text with something in it."
    return (
        f"sources without splits of their own are cut into about 90/5/5% of their characters at document "
        f"boundaries (blank lines), so the {_name(split)} part needs more documents: add text (a blank line between "
        "documents), give a folder with train.txt, valid.txt, test.txt, or (robfilt attack) pass --split all."
    )


def read_bundled(split: str) -> str:
    """The bundled corpus' text of one split, as stored."""
    path = asset_path(f"austen/{split}.txt.gz")
    try:
        return read_text(path)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ChecksumError(f"bundled asset {path} cannot be read ({e}); reinstall robustbench-filters") from None


def _user_documents(path_str: str, split: str) -> tuple[list[str], str]:
    path = expand_user(path_str)
    if not path_str or not path.exists():
        raise RobfiltError(
            f"text path {path_str!r} does not exist; pass text:<file> or text:<folder with train.txt, valid.txt, "
            "test.txt> or text:<folder of .txt files>"
        )
    if path.is_dir():
        return _folder_documents(path, split)
    text = read_text_file(path)
    if not text.strip():
        raise RobfiltError(f"text file {path} is empty; give a file with text in it")
    return split_documents(paragraphs(text), split), "paragraph"


def _folder_documents(path: Path, split: str) -> tuple[list[str], str]:
    """A folder with split files (their documents), else one document per ``.txt`` file."""
    split_files = {
        s: next((path / n for n in names if (path / n).is_file()), None) for s, names in FOLDER_NAMES.items()
    }
    if any(split_files.values()):
        wanted = SPLITS if split == ALL else (split,)
        missing = [s for s in wanted if split_files[s] is None]
        if split != ALL and missing:
            raise RobfiltError(f"no {split} file in {path}; add one of: {', '.join(FOLDER_NAMES[split])}")
        docs: list[str] = []
        for s in wanted:
            file = split_files[s]
            if file is not None:
                text = read_text_file(file)
                docs += wiki_articles(text) if file.name.endswith(".tokens") else paragraphs(text)
        unit = "article" if any(f is not None and f.name.endswith(".tokens") for f in split_files.values()) else ""
        return docs, unit or "paragraph"
    files = sorted(p for p in path.glob("*.txt") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise RobfiltError(
            f"{path} has no .txt files and no train.txt/valid.txt/test.txt; put one document per .txt file there"
        )
    texts = [t.strip() for t in (read_text_file(f) for f in files)]
    return split_documents([t for t in texts if t], split), "file"


def read_text_file(path: Path) -> str:
    """A UTF-8 text file (optionally gzipped; a leading byte-order mark is no part of the text), or one line naming
    the problem."""
    try:
        return read_text(path)
    except UnicodeDecodeError:
        raise RobfiltError(f"text file {path} is not UTF-8; convert it (e.g. iconv -t UTF-8)") from None
    except (OSError, EOFError) as e:
        raise RobfiltError(f"cannot read text file {path} ({e}); check the file") from None


__all__ = [
    "ALL",
    "BUNDLED_TEXT",
    "DEFAULT_SPLIT",
    "SPLIT_CHOICES",
    "TEXT_DATASETS",
    "Documents",
    "load_documents",
    "normalise_split",
    "paragraphs",
    "read_bundled",
    "split_bounds",
    "split_documents",
    "wiki_articles",
]
