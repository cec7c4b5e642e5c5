"""Text corpora for the language models: the bundled Jane Austen novels and the user's own plain text.

The bundled corpus has fixed train/valid/test splits (contiguous ranges per novel, see ``splits.py``), so
perplexities and attack results are comparable across runs and machines. ``text:<path>`` accepts a folder in
the WikiText layout (``wiki.{train,valid,test}.tokens``) or with ``{train,valid,test}.txt``, or a single file
that is cut into 90/5/5 by the same rule as the bundled corpus.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

from ..core.errors import ChecksumError, RobfiltError, suggest, unknown
from .assets import asset_path
from .splits import SPLITS, contiguous_split

log = logging.getLogger(__name__)

BUNDLED_TEXT = "austen"
TEXT_PREFIX = "text:"
#: Text specs for CLI help and completion.
TEXT_DATASETS: tuple[str, ...] = (BUNDLED_TEXT, f"{TEXT_PREFIX}<path>", "hf-disk:<path>")
TEXT_SPLITS: tuple[str, ...] = SPLITS
_ALIASES = {"val": "valid", "validation": "valid", "dev": "valid"}
# File names tried, in order, for each split of a text folder.
_FOLDER_NAMES = {
    "train": ("wiki.train.tokens", "train.txt", "train.txt.gz"),
    "valid": ("wiki.valid.tokens", "valid.txt", "val.txt", "validation.txt", "valid.txt.gz"),
    "test": ("wiki.test.tokens", "test.txt", "test.txt.gz"),
}


def normalise_split(split: str) -> str:
    """``train``/``valid``/``test`` (``val``, ``validation`` and ``dev`` mean ``valid``), else a RobfiltError."""
    s = _ALIASES.get(split.strip().lower(), split.strip().lower())
    if s not in TEXT_SPLITS:
        raise RobfiltError(f"unknown split {split!r}.{suggest(split, TEXT_SPLITS)} Use one of: train, valid, test.")
    return s


def load_text(spec: str = BUNDLED_TEXT, split: str = "test", text_column: str = "text") -> str:
    """The text of one split of a corpus, as a str.

    ``spec``: ``austen`` (bundled), ``text:<path>`` (a WikiText-style folder or one plain-text file) or
    ``hf-disk:<path>`` (a Hugging Face ``save_to_disk`` folder; rows of ``text_column`` joined by newlines).
    """
    split = normalise_split(split)
    spec = spec.strip()
    if spec.lower() == BUNDLED_TEXT:
        text = _read_bundled(split)
    elif spec.startswith(TEXT_PREFIX):
        text = _read_user(spec[len(TEXT_PREFIX) :], split)
    elif spec.startswith("hf-disk:"):
        from .hf import load_hf_text

        text = load_hf_text(spec[len("hf-disk:") :], split, text_column)
    else:
        if spec and Path(spec).expanduser().exists():
            raise RobfiltError(f"unknown text dataset {spec!r}; to load your own text use 'text:{spec}'")
        raise unknown("text dataset", spec, TEXT_DATASETS)
    log.info("loaded text %s/%s: %d characters", spec, split, len(text))
    return text


def _read_bundled(split: str) -> str:
    path = asset_path(f"austen/{split}.txt.gz")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ChecksumError(f"bundled asset {path} cannot be read ({e}); reinstall robustbench-filters") from None


def _read_user(path_str: str, split: str) -> str:
    path = Path(path_str).expanduser()
    if not path_str or not path.exists():
        raise RobfiltError(
            f"text path {path_str!r} does not exist; pass text:<file> or text:<folder with train.txt, valid.txt, test.txt>"
        )
    if path.is_dir():
        names = _FOLDER_NAMES[split]
        file = next((path / n for n in names if (path / n).is_file()), None)
        if file is None:
            raise RobfiltError(f"no {split} file in {path}; add one of: {', '.join(names)}")
        text = _read_file(file)
        if not text.strip():
            raise RobfiltError(f"text file {file} is empty; put the {split} text in it")
        return text
    text = _read_file(path)
    if not text.strip():
        raise RobfiltError(f"text file {path} is empty; give a file with text in it")
    part = dict(zip(SPLITS, contiguous_split(text), strict=True))[split]
    if not part.strip():
        raise RobfiltError(
            f"the {split} part of {path} is empty (the file is too short to split 90/5/5 at paragraph breaks); "
            "use a longer file or a folder with train.txt, valid.txt, test.txt"
        )
    return part


def _read_file(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RobfiltError(f"text file {path} is not UTF-8; convert it (e.g. iconv -t UTF-8)") from None
    except (OSError, EOFError) as e:
        raise RobfiltError(f"cannot read text file {path} ({e}); check the file") from None
