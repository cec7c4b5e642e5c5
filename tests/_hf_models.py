"""Tiny Hugging Face causal LMs for the tests, built from configs (nothing is downloaded).

A byte-level BPE tokenizer (the ``tokenizers`` library) is trained on the bundled Austen text; a 2-layer GPT-2 and a
2-layer Llama are built from ``GPT2Config`` / ``LlamaConfig`` with seeded weights and saved with ``save_pretrained``
next to that tokenizer. ``build`` makes them once per test session (tests/conftest.py: ``hf_models``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

EOS = "<|endoftext|>"
VOCAB = 384
POSITIONS = 64


@dataclass(frozen=True)
class HFModels:
    root: Path
    gpt2: Path
    llama: Path
    text: Path  # a plain-text file for --data text:FILE (cut 90/5/5 by robfilt)


def train_tokenizer(text: str, vocab_size: int = VOCAB):
    """A GPT-2-style byte-level BPE with one special token (BOS = EOS), as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS)


def gpt2(tokenizer, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config).eval()


def llama(tokenizer, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=POSITIONS,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save(model, tokenizer, folder: Path) -> Path:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build(root: Path) -> HFModels:
    from robustbench_filters.data import load_text

    train = load_text("austen", split="train")
    tokenizer = train_tokenizer(train[:200_000])
    (root / "austen.txt").write_text(train[:200_000], encoding="utf-8")  # its 5% test split: 50 documents
    return HFModels(
        root=root,
        gpt2=save(gpt2(tokenizer), tokenizer, root / "tiny-gpt2"),
        llama=save(llama(tokenizer), tokenizer, root / "tiny-llama"),
        text=root / "austen.txt",
    )
