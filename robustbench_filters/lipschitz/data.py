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
from typing import Any

import torch

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.surface import flag, given
from .target import Target

SYNTHETIC = "synthetic"
DEFAULT_DATA: dict[Family, str] = {Family.IMAGE: "fashion-mnist", Family.LM: "austen"}


@dataclass
class Inputs:
    """Raw inputs (images in [0, 1] or token ids), optional labels, and their ids in the source split.

    ``folder``: the image folder they came from, whose labels are settled once the model's class count is known
    (:meth:`settle_labels`); ``class_map`` then records the class map that gave them (None: none).
    """

    x: torch.Tensor
    y: torch.Tensor | None
    ids: torch.Tensor
    folder: Any = None
    class_map: dict[str, str] | None = None

    def settle_labels(self, classes: int, model: str, data: str) -> None:
        """A folder's labels for a model of ``classes`` classes (a class map, ImageNet-1k wnids or positions)."""
        if self.folder is None:
            return
        from ..data.class_map import settle_folder_labels

        self.class_map = settle_folder_labels(self.folder, [classes], [model], data)
        self.y = self.folder.y[self.ids]


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


def _images(name: str, target: Target, config: Any, select: Selector) -> Inputs:
    """Seeded test images read with the run's image-data options (root, size, workers, hf-disk columns, class map)."""
    from ..data.folder import FolderSource
    from ..data.sources import open_image_source

    columns = {k: v for k in ("image_column", "label_column") if (v := getattr(config, k, None))}
    data = open_image_source(
        name, "test", getattr(config, "data_root", None), img_size=getattr(config, "img_size", None),
        preprocess=target.model, num_workers=getattr(config, "num_workers", None),
        class_map=getattr(config, "class_map", None), **columns,
    )  # fmt: skip
    idx = select(len(data), config.n_examples)
    x, y = data.take(idx)
    return Inputs(x=x.float(), y=y, ids=idx, folder=data if isinstance(data, FolderSource) else None)


def _text(name: str, target: Target, config: Any, select: Selector) -> Inputs:
    """Windows of ``seq_len`` tokens at seeded offsets of the test text, encoded with the model's tokenizer.

    The tokenizer is the one the model's checkpoint was saved with (:func:`..models.built.tokenizer_of`); tokens
    from any other tokenizer would be silently meaningless, so a model without one is refused.
    """
    from ..data import load_text
    from ..models.built import tokenizer_of

    tokenizer = tokenizer_of(target.model)
    if tokenizer is None:
        raise RobfiltError(
            f"no tokenizer for {target.name}; load it from a checkpoint saved with its tokenizer, or pass inputs= "
            f"token ids ({given('data', 'synthetic')} for untrained models)."
        )
    seq_len = config.seq_len
    column = {"text_column": config.text_column} if getattr(config, "text_column", None) else {}
    ids = torch.as_tensor(tokenizer.encode(load_text(name, split="test", **column)), dtype=torch.long)
    windows = len(ids) - seq_len
    if windows <= 0:
        raise RobfiltError(f"text {name!r} has only {len(ids)} tokens; pass a shorter {flag('seq_len')}.")
    starts = select(windows, config.n_examples)
    return Inputs(x=torch.stack([ids[s : s + seq_len] for s in starts.tolist()]), y=None, ids=starts)


def given_inputs(target: Target, inputs: Any, labels: Any, n: int) -> Inputs:
    """The first ``n`` of the caller's ``inputs`` (and ``input_labels``), checked as ``evaluate`` checks ``data``:
    images of an image model through :func:`robustbench_filters.data.adapters.to_unit_float` (float in [0, 1] or
    uint8, (N, C, H, W) or its channel-last and grey forms), token ids of a language model as whole numbers from 0,
    anything else (embeddings, a generic module's inputs) as finite floats; never empty, never on the meta device.
    The caller's tensor is copied, never modified or kept in its autograd graph."""
    from ..data.adapters import to_labels, to_unit_float

    y = to_labels(labels[:n], n, "input_labels") if labels is not None else None
    if target.family is Family.IMAGE:
        return Inputs(x=to_unit_float(inputs[:n], "inputs"), y=y, ids=torch.arange(n))
    try:
        x = torch.as_tensor(inputs[:n]).detach()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise RobfiltError(f"inputs cannot be read as a tensor ({type(inputs).__name__}: {exc}).") from None
    if x.device.type == "meta":
        raise RobfiltError("inputs are on the meta device (a shape without values); give tensors that hold data.")
    if x.dim() < 2 or x.shape[0] == 0:
        raise RobfiltError(f"inputs must be a batch of at least one example (N, ...), got shape {tuple(x.shape)}.")
    if target.family is Family.LM and not torch.is_floating_point(x):
        if x.dtype == torch.bool or int(x.min()) < 0:
            raise RobfiltError(f"inputs of {target.name} are token ids: whole numbers from 0, got dtype {x.dtype}.")
    elif not torch.is_floating_point(x):
        raise RobfiltError(f"inputs of {target.name} must be float tensors, got dtype {x.dtype}.")
    elif not bool(torch.isfinite(x).all()):
        raise RobfiltError("inputs contain NaN or inf values; give finite inputs.")
    return Inputs(x=x.clone(), y=y, ids=torch.arange(n))


def load_inputs(target: Target, config: Any, select: Selector) -> Inputs:
    """``config.n_examples`` examples for ``target`` from ``config.data`` (None: the family default), chosen by
    ``select`` and read with the run's data options."""
    seq_len = config.seq_len
    if target.family is Family.LM and seq_len > target.model.config.block_size:
        raise RobfiltError(
            f"{flag('seq_len')} {seq_len} exceeds {target.name}'s block size {target.model.config.block_size}; "
            "pass less."
        )
    name = config.data or DEFAULT_DATA.get(target.family)
    if name is None:
        raise RobfiltError(f"{target.name} is not a DeiT or LM model; pass inputs= tensors.")
    if name == SYNTHETIC:
        if config.n_examples is None:
            raise RobfiltError(f"synthetic data has no size; give {flag('n_examples')}.")
        return _synthetic(target, int(config.n_examples), config.seed, seq_len)
    if target.family is Family.LM:
        return _text(name, target, config, select)
    return _images(name, target, config, select)  # an image model, or a generic module: images are its only data
