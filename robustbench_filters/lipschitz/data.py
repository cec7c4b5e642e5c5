"""Inputs for the estimators: a thin, seeded wrapper over the data package (or synthetic inputs).

The estimators themselves take tensors; this module only picks *which* examples. Selection is a seeded
permutation of the test split, so a run is reproducible and resumable and ``example_id`` is the index in the
split (pairable with attack runs on the same split).

``synthetic`` gives uniform [0, 1] images or uniform token ids of the model's shapes. It needs no data files and
is meant for smoke tests and untrained models; numbers from it say nothing about a trained model's robustness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import RobfiltError
from ..family import Family
from .target import Target

SYNTHETIC = "synthetic"
DEFAULT_DATA: dict[Family, str] = {Family.IMAGE: "fashion-mnist", Family.LM: "austen"}


@dataclass
class Inputs:
    """Raw inputs (images in [0, 1] or token ids), optional labels, and their ids in the source split."""

    x: torch.Tensor
    y: torch.Tensor | None
    ids: torch.Tensor


Selector = Callable[[int, int], torch.Tensor]  # (pool size, n) -> n seeded example ids (the runner's selection)


def _synthetic(target: Target, n: int, seed: int, seq_len: int) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    model = target.model
    if target.family is Family.IMAGE:
        from ..data.preprocess import input_spec_of

        spec = input_spec_of(model)
        if spec is None:
            raise RobfiltError(
                f"{target.name} does not say its input size; pass inputs= tensors instead of synthetic data."
            )
        x = torch.rand(n, spec.in_chans, *spec.size, generator=gen)
    elif target.family is Family.LM:
        x = torch.randint(0, model.config.vocab_size, (n, seq_len), generator=gen)
    else:
        raise RobfiltError(f"synthetic data needs an image or LM model, not {type(model).__name__}; pass inputs=.")
    return Inputs(x=x, y=None, ids=torch.arange(n))


def _images(name: str, target: Target, n: int, select: Selector) -> Inputs:
    from ..data.sources import open_image_source

    data = open_image_source(name, "test", preprocess=target.model)
    idx = select(len(data), n)
    x, y = data.take(idx)
    return Inputs(x=x.float(), y=y, ids=idx)


def _text(name: str, target: Target, n: int, select: Selector, seq_len: int) -> Inputs:
    """Windows of ``seq_len`` tokens at seeded offsets of the test text, encoded with the model's tokenizer.

    The tokenizer is the one attached to the model by its checkpoint (``model.tokenizer``); tokens from any other
    tokenizer would be silently meaningless, so a model without one is refused.
    """
    from ..data import load_text

    tokenizer = getattr(target.model, "tokenizer", None)
    if tokenizer is None:
        raise RobfiltError(
            f"no tokenizer for {target.name}; load it from a checkpoint saved with its tokenizer, or pass inputs= "
            "token ids (--data synthetic for untrained models)."
        )
    ids = torch.as_tensor(tokenizer.encode(load_text(name, split="test")), dtype=torch.long)
    windows = len(ids) - seq_len
    if windows <= 0:
        raise RobfiltError(f"text {name!r} has only {len(ids)} tokens; pass a shorter --seq-len.")
    starts = select(windows, n)
    return Inputs(x=torch.stack([ids[s : s + seq_len] for s in starts.tolist()]), y=None, ids=starts)


def load_inputs(target: Target, data: str | None, n: int, select: Selector, seq_len: int = 64, seed: int = 0) -> Inputs:
    """n examples for ``target`` from the named data set (None: the family default), chosen by ``select``."""
    if target.family is Family.LM and seq_len > target.model.config.block_size:
        raise RobfiltError(
            f"--seq-len {seq_len} exceeds {target.name}'s block size {target.model.config.block_size}; pass less."
        )
    name = data or DEFAULT_DATA.get(target.family)
    if name is None:
        raise RobfiltError(f"{target.name} is not a DeiT or LM model; pass inputs= tensors.")
    if name == SYNTHETIC:
        return _synthetic(target, n, seed, seq_len)
    if target.family is Family.LM:
        return _text(name, target, n, select, seq_len)
    return _images(name, target, n, select)  # an image model, or a generic module: images are its only data
