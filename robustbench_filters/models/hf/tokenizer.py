"""A Hugging Face tokenizer behind robfilt's tokenizer interface, and the checks that it fits its model.

The LM measurement needs ``encode``, ``decode``, ``vocab_size`` and, for lm-eval's rolling windows, one prefix
token. Tokens outside the model's embedding table would be silently meaningless (or crash inside an embedding
lookup), so a tokenizer is checked against the model before anything is measured.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ...core.errors import RobfiltError
from ...core.surface import flag
from .trust import read_config_json, refuse_custom_code


class HFTokenizer:
    """Wraps a ``transformers`` tokenizer; ``encode`` uses its own special-token default, as lm-eval does."""

    kind = "hf"

    def __init__(self, tokenizer: Any) -> None:
        if not (hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode") and hasattr(tokenizer, "__len__")):
            raise RobfiltError(
                f"tokenizer must be a Hugging Face tokenizer (AutoTokenizer.from_pretrained), got "
                f"{type(tokenizer).__name__}."
            )
        self.hf = tokenizer

    @property
    def vocab_size(self) -> int:
        """Every id the tokenizer can emit, added tokens included (``len(tokenizer)``)."""
        return len(self.hf)

    @property
    def unk_id(self) -> int | None:
        return self.hf.unk_token_id

    @property
    def prefix_token_id(self) -> int | None:
        """The token lm-eval conditions a document's first token on: BOS, else EOS."""
        return self.hf.bos_token_id if self.hf.bos_token_id is not None else self.hf.eos_token_id

    def encode(self, text: str) -> list[int]:
        """Token ids with the tokenizer's own special-token default, except that a text already starting with the
        prefix token is not given another (lm-eval's ``tok_encode``)."""
        kwargs = {"add_special_tokens": False} if self._prefix and text.startswith(self._prefix) else {}
        return list(self.hf.encode(text, verbose=False, **kwargs))  # long documents are windowed, never fed whole

    @property
    def _prefix(self) -> str:
        if not hasattr(self, "_prefix_text"):
            prefix = self.prefix_token_id
            self._prefix_text = "" if prefix is None else str(self.hf.decode(prefix))
        return self._prefix_text

    def decode(self, ids: list[int]) -> str:
        return str(self.hf.decode([int(i) for i in ids]))

    def id_to_token(self, i: int) -> str:
        return str(self.hf.convert_ids_to_tokens(int(i)))

    def save(self, path: str | Path) -> Path:
        """Writes the tokenizer files into the folder ``path`` (``save_pretrained``)."""
        self.hf.save_pretrained(str(path))
        return Path(path)

    @property
    def digest(self) -> str:
        """What identifies the tokenization (vocabulary, merges, special tokens), for run fingerprints."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        text = backend.to_str() if backend is not None else json.dumps(self.hf.get_vocab(), sort_keys=True)
        specials = json.dumps([self.hf.bos_token_id, self.hf.eos_token_id, self.hf.unk_token_id])
        return hashlib.sha256((text + specials).encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"HFTokenizer({type(self.hf).__name__}, vocab_size={self.vocab_size})"


#: Files that hold a tokenizer's vocabulary (fast tokenizers, SentencePiece, byte-level BPE, WordPiece, tiktoken).
VOCABULARY_FILES: tuple[str, ...] = (
    "tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "vocab.txt",
    "tokenizer.tiktoken",
)  # fmt: skip
#: A text every real tokenizer turns into tokens (one that gives none is no tokenizer).
PROBE_TEXT = "It is a truth universally acknowledged."


def no_tokenizer(folder: Path, label: str) -> RobfiltError:
    return RobfiltError(
        f"{label}: no tokenizer in {folder}: save one with `tokenizer.save_pretrained({folder})` (or pass "
        f"{flag('tokenizer')} DIR)."
    )


def load_tokenizer_folder(folder: Path, label: str) -> HFTokenizer:
    """``AutoTokenizer.from_pretrained(folder)`` from local files only, never running the folder's code, or one
    line: a folder without vocabulary files has no tokenizer (transformers would make an empty one, and every
    document would have zero tokens)."""
    from transformers import AutoTokenizer

    if not folder.is_dir():
        raise RobfiltError(f"{label}: tokenizer folder {folder} does not exist; pass {flag('tokenizer')} DIR.")
    if not any((folder / name).is_file() for name in VOCABULARY_FILES) and not any(folder.glob("*.tiktoken")):
        raise no_tokenizer(folder, label)
    if (folder / "tokenizer_config.json").is_file():
        refuse_custom_code(read_config_json(folder, label, "tokenizer_config.json"), folder, label,
                           "tokenizer_config.json")  # fmt: skip
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RobfiltError(
            f"{label}: no tokenizer could be read from {folder} ({first[:160]}); save one there with "
            f"tokenizer.save_pretrained(DIR) or pass {flag('tokenizer')} DIR."
        ) from None
    wrapped = HFTokenizer(tok)
    if len(tok) < 2 or not wrapped.encode(PROBE_TEXT):
        raise no_tokenizer(folder, label)
    return wrapped


def check_tokenizer(tokenizer: HFTokenizer, config: Any, n_embeddings: int, label: str) -> None:
    """Refuse a tokenizer that does not fit the model: ids beyond its embedding table, other special tokens, or no
    token to condition the first one on."""
    if tokenizer.vocab_size > n_embeddings:
        raise RobfiltError(
            f"{label}: the tokenizer has {tokenizer.vocab_size} tokens but the model embeds only {n_embeddings}; "
            f"use the tokenizer saved with the model ({flag('tokenizer')} DIR)."
        )
    for name in ("eos_token_id", "bos_token_id"):
        expected, got = getattr(config, name, None), getattr(tokenizer.hf, name, None)
        if isinstance(expected, int) and 0 <= expected < n_embeddings and got is not None and got != expected:
            raise RobfiltError(
                f"{label}: the tokenizer's {name} is {got} but the model's config says {expected}; the tokenizer does "
                "not match the model's vocabulary (use the tokenizer saved with the model)."
            )
    if not tokenizer.encode(PROBE_TEXT):
        raise RobfiltError(
            f"{label}: the tokenizer turns text into no tokens ({PROBE_TEXT!r} gives none); use the tokenizer saved "
            "with the model (AutoTokenizer.from_pretrained(DIR))."
        )
    if tokenizer.prefix_token_id is None:
        raise RobfiltError(
            f"{label}: the tokenizer has neither a BOS nor an EOS token, and lm-eval's rolling windows predict a "
            "document's first token from one; set tokenizer.eos_token (or bos_token) and save it again."
        )
