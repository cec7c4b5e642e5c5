"""A Hugging Face causal LM seen through the interface robfilt's LM code uses.

The LM measurement (:mod:`robustbench_filters.attacks.lm`), the embedding attacks, the LM checks and the Lipschitz
estimators only ever call ``embed(ids)``, ``forward_embeddings(embeddings)``, ``tok_embed`` (the table eps is scaled
by), ``config.block_size`` / ``config.vocab_size`` and ``tokenizer``. :class:`HFCausalLM` gives a ``transformers``
model exactly that, so one measurement serves robfilt's own GPT and any causal LM:

- ``embed``: the model's input-embedding table (``get_input_embeddings()``): the space embedding attacks perturb.
  Positions, when the model adds them (GPT-2's ``wpe``), are added inside the model, so only content moves;
- ``forward_embeddings``: ``model(inputs_embeds=..., use_cache=False).logits``, every position;
- ``config.block_size``: the window (``--max-length``), never more than the model's positions;
- ``rolling``: lm-eval's rolling windows (:mod:`.perplexity`) with this model's prefix token.

The wrapped model is the submodule ``hf``; nothing is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...core.errors import RobfiltError
from ...core.surface import flag, given
from .rolling import DEFAULT_MAX_LENGTH, Rolling
from .tokenizer import HFTokenizer

#: Config attributes that hold a model's number of positions, in the order lm-eval's ``resolve_max_length`` reads.
POSITION_ATTRS: tuple[str, ...] = ("n_positions", "max_position_embeddings", "n_ctx", "seq_length", "max_seq_len")


@dataclass(frozen=True)
class LMShape:
    """What robfilt's LM code reads from ``model.config``: the window and the embedding rows."""

    block_size: int
    vocab_size: int


def max_positions(config: Any) -> int | None:
    """The longest input the model's config allows, or None when it does not say."""
    for name in POSITION_ATTRS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def resolve_max_length(config: Any, max_length: int | None, label: str) -> int:
    """``max_length`` checked against the model's positions; default the positions, at most DEFAULT_MAX_LENGTH."""
    positions = max_positions(config)
    if max_length is None:
        return min(positions or DEFAULT_MAX_LENGTH, DEFAULT_MAX_LENGTH)
    if isinstance(max_length, bool) or int(max_length) != max_length or max_length < 2:
        raise RobfiltError(f"{flag('max_length')} must be a whole number of at least 2 tokens, got {max_length}.")
    if positions is not None and max_length > positions:
        raise RobfiltError(
            f"{flag('max_length')} {max_length} is longer than {label}'s {positions} positions; pass "
            f"{given('max_length', str(positions))} or less."
        )
    return int(max_length)


class HFCausalLM(nn.Module):
    """A ``transformers`` causal LM with its tokenizer and window, as robfilt's LM code expects it.

    Args:
        model: an ``AutoModelForCausalLM`` model (loaded, or built from a config).
        tokenizer: its tokenizer, already checked against the model (:func:`.tokenizer.check_tokenizer`).
        max_length: the window in tokens (see :func:`resolve_max_length`).
        stride: tokens newly predicted per window (default ``max_length``: lm-eval's disjoint windows).
    """

    def __init__(self, model: nn.Module, tokenizer: HFTokenizer, max_length: int, stride: int | None = None) -> None:
        super().__init__()
        self.hf = model
        self.tokenizer = tokenizer
        rows = model.get_input_embeddings().num_embeddings
        self.config = LMShape(block_size=int(max_length), vocab_size=int(rows))
        self.rolling = Rolling(int(max_length), int(stride or max_length), int(tokenizer.prefix_token_id))

    @property
    def tok_embed(self) -> nn.Embedding:
        """The input token-embedding table (relative eps is scaled by its rows' mean norm)."""
        return self.hf.get_input_embeddings()

    @property
    def variant(self) -> str:
        """``bsa``, ``grc``, ``bsa-grc`` for a robfilt conversion, else ``""``."""
        record = getattr(self.hf.config, "robfilt", None)
        return str(record.get("variant", "")) if isinstance(record, dict) else ""

    @property
    def fused_attn(self) -> bool:
        """Whether attention runs on a fused kernel (no forward-mode AD, no double backward)."""
        return getattr(self.hf.config, "_attn_implementation", "eager") != "eager"

    def use_manual_attention(self) -> None:
        """Switch to the eager attention path (what the Lipschitz estimators need)."""
        self.hf.set_attn_implementation("eager")

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, T, C): the input space of embedding attacks and Lipschitz estimates."""
        return self.hf.get_input_embeddings()(idx)

    def forward_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) at every position from token embeddings."""
        if emb.shape[1] > self.config.block_size:
            raise RobfiltError(
                f"sequence length {emb.shape[1]} exceeds {flag('max_length')} {self.config.block_size}; use shorter "
                f"sequences or a larger {flag('max_length')} (up to the model's positions)."
            )
        return self.hf(inputs_embeds=emb, use_cache=False).logits

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.forward_embeddings(self.embed(idx))
