"""Tokenizers for the language models: characters (default) and a small byte-level BPE.

No registry ships a usable GPT tokenizer offline, and a 50k vocabulary would dwarf a tiny model, so both
are trained on the corpus itself. Both have the same interface and save as one JSON file (with a ``type``
field) next to the checkpoint; :func:`load_tokenizer` dispatches on that field. Id 0 is always ``<unk>``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from ..core.errors import RobfiltError, unknown
from ..core.io import atomic_write_text
from ..core.textfiles import read_text

log = logging.getLogger(__name__)

UNK = "<unk>"
FORMAT_VERSION = 1
TOKENIZER_KINDS: tuple[str, ...] = ("char", "bpe")


@runtime_checkable
class Tokenizer(Protocol):
    """What the trainer and the LM attacks rely on."""

    kind: str

    @property
    def vocab_size(self) -> int: ...

    @property
    def unk_id(self) -> int: ...

    @property
    def prefix_token_id(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def id_to_token(self, i: int) -> str: ...

    def save(self, path: str | Path) -> Path: ...


class _SavedTokenizer:
    """What both tokenizers share: one JSON file (``to_dict`` with its ``type``) that :func:`load_tokenizer` reads
    back, and a repr that names the vocabulary size."""

    kind: str

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Load ``path``, refusing a file that holds the other kind of tokenizer."""
        tok = load_tokenizer(path)
        if not isinstance(tok, cls):
            raise RobfiltError(
                f"expected a {cls.kind} tokenizer but the file holds a {tok.kind} one; use load_tokenizer"
            )
        return tok

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class CharTokenizer(_SavedTokenizer):
    """One token per character seen in the training text; unseen characters map to ``<unk>`` (id 0).

    ``decode`` renders ``<unk>`` as U+FFFD, one character, so decoded text keeps one character per token.
    """

    kind = "char"
    UNK_CHAR = "\ufffd"

    def __init__(self, chars: list[str]) -> None:
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("chars must be distinct single characters")
        self.chars = list(chars)
        self._itos = [UNK, *self.chars]
        self._stoi = {c: i + 1 for i, c in enumerate(self.chars)}

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        """Build the vocabulary from ``text`` (sorted by code point, so it is deterministic)."""
        if not text:
            raise RobfiltError("cannot build a character tokenizer from empty text; give non-empty training text")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self._itos)

    @property
    def unk_id(self) -> int:
        return 0

    @property
    def prefix_token_id(self) -> int:
        """The token a document's first character is predicted from: the newline, which precedes every paragraph
        of the training stream (blank lines separate documents), else ``<unk>``."""
        return self._stoi.get("\n", 0)

    def encode(self, text: str) -> list[int]:
        get = self._stoi.get
        return [get(c, 0) for c in text]

    def decode(self, ids: list[int]) -> str:
        itos, n = self._itos, len(self._itos)
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise ValueError(f"token id {i} is outside the vocabulary (size {n})")
            out.append(self.UNK_CHAR if i == 0 else itos[i])
        return "".join(out)

    def id_to_token(self, i: int) -> str:
        return self._itos[int(i)]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "version": FORMAT_VERSION, "unk_token": UNK, "vocab": self._itos}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CharTokenizer:
        vocab = d["vocab"]
        if not isinstance(vocab, list) or not vocab or vocab[0] != UNK:
            raise ValueError("vocab must be a list starting with <unk>")
        return cls(vocab[1:])


class BPETokenizer(_SavedTokenizer):
    """Byte-level BPE (GPT-2 style) trained with Hugging Face ``tokenizers``; any text round-trips exactly."""

    kind = "bpe"

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    @classmethod
    def train(cls, text: str, vocab_size: int = 1024) -> BPETokenizer:
        """Train on ``text``. ``vocab_size`` counts the 256 byte tokens and ``<unk>``, so it must exceed 257."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if not text:
            raise RobfiltError("cannot train a BPE tokenizer on empty text; give non-empty training text")
        if vocab_size <= 257:
            raise RobfiltError(f"BPE vocab_size must be more than 257 (256 bytes + <unk>), got {vocab_size}")
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[UNK],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator([text], trainer=trainer)
        log.info("trained byte-level BPE: %d tokens", tok.get_vocab_size())
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    @property
    def unk_id(self) -> int:
        return int(self._tok.token_to_id(UNK))

    @property
    def prefix_token_id(self) -> int:
        """The token a document's first token is predicted from: the newline's, when it is one token (it precedes
        every paragraph of the training stream), else ``<unk>``."""
        ids = self._tok.encode("\n").ids
        return int(ids[0]) if len(ids) == 1 else self.unk_id

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def decode(self, ids: list[int]) -> str:
        ids = [int(i) for i in ids]
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"token id outside the vocabulary (size {self.vocab_size})")
        return str(self._tok.decode(ids, skip_special_tokens=False))

    def id_to_token(self, i: int) -> str:
        return str(self._tok.id_to_token(int(i)))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "version": FORMAT_VERSION, "tokenizer": json.loads(self._tok.to_str())}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_str(json.dumps(d["tokenizer"])))


_CLASSES: dict[str, type[CharTokenizer] | type[BPETokenizer]] = {"char": CharTokenizer, "bpe": BPETokenizer}


def train_tokenizer(kind: str, text: str, vocab_size: int | None = None) -> CharTokenizer | BPETokenizer:
    """Build a tokenizer of ``kind`` (``char`` or ``bpe``) from training text."""
    if kind == "char":
        if vocab_size is not None:
            log.info("vocab_size is ignored for the char tokenizer (the vocabulary is the set of characters)")
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size or 1024)
    raise unknown("tokenizer", kind, TOKENIZER_KINDS)


def load_tokenizer(path: str | Path) -> CharTokenizer | BPETokenizer:
    """Load a tokenizer saved by ``save``; the JSON's ``type`` field picks the class."""
    path = Path(path)
    try:
        d = json.loads(read_text(path))
    except FileNotFoundError:
        raise RobfiltError(
            f"tokenizer file {path} does not exist; pass the tokenizer.json saved with the model"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RobfiltError(f"tokenizer file {path} is corrupted ({type(e).__name__}); re-save it or retrain") from None
    kind = d.get("type") if isinstance(d, dict) else None
    if kind not in _CLASSES:
        raise RobfiltError(
            f"tokenizer file {path} has unknown type {kind!r} (expected char or bpe); re-save the tokenizer"
        )
    if int(d.get("version", 0)) > FORMAT_VERSION:
        raise RobfiltError(f"tokenizer file {path} has format version {d['version']}; upgrade robustbench-filters")
    try:
        return _CLASSES[kind].from_dict(d)
    except Exception as e:  # malformed content: wrong keys, bad vocab, bad HF JSON
        raise RobfiltError(
            f"tokenizer file {path} is corrupted ({type(e).__name__}: {e}); re-save it or retrain"
        ) from None
