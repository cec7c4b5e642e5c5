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
        return list(self.hf.encode(text, verbose=False))  # long documents are windowed, never fed whole

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


def load_tokenizer_folder(folder: Path, label: str) -> HFTokenizer:
    """``AutoTokenizer.from_pretrained(folder)`` from local files only, or a one-line error."""
    from transformers import AutoTokenizer

    if not folder.is_dir():
        raise RobfiltError(f"{label}: tokenizer folder {folder} does not exist; pass --tokenizer DIR.")
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RobfiltError(
            f"{label}: no tokenizer could be read from {folder} ({first[:160]}); save one there with "
            "tokenizer.save_pretrained(DIR) or pass --tokenizer DIR."
        ) from None
    return HFTokenizer(tok)


def check_tokenizer(tokenizer: HFTokenizer, config: Any, n_embeddings: int, label: str) -> None:
    """Refuse a tokenizer that does not fit the model: ids beyond its embedding table, other special tokens, or no
    token to condition the first one on."""
    if tokenizer.vocab_size > n_embeddings:
        raise RobfiltError(
            f"{label}: the tokenizer has {tokenizer.vocab_size} tokens but the model embeds only {n_embeddings}; "
            "use the tokenizer saved with the model (--tokenizer DIR)."
        )
    for name in ("eos_token_id", "bos_token_id"):
        expected, got = getattr(config, name, None), getattr(tokenizer.hf, name, None)
        if isinstance(expected, int) and 0 <= expected < n_embeddings and got is not None and got != expected:
            raise RobfiltError(
                f"{label}: the tokenizer's {name} is {got} but the model's config says {expected}; the tokenizer does "
                "not match the model's vocabulary (use the tokenizer saved with the model)."
            )
    if tokenizer.prefix_token_id is None:
        raise RobfiltError(
            f"{label}: the tokenizer has neither a BOS nor an EOS token, and lm-eval's rolling windows predict a "
            "document's first token from one; set tokenizer.eos_token (or bos_token) and save it again."
        )
