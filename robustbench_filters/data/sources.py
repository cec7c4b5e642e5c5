"""One entry point from "the data" to an :class:`~.source.ImageSource`, whatever the user hands over.

``open_image_source`` takes a spec string (``fashion-mnist``, ``cifar10``, ``imagefolder:<path>``,
``hf-disk:<path>``), an ``(x, y)`` pair of tensors or numpy arrays, a torch ``Dataset`` of (image, label), or an
existing ImageSource. Preprocessing follows the model (``preprocess=model``: its ``InputSpec``, e.g. timm's
``pretrained_cfg``) unless ``img_size`` / ``in_chans`` say otherwise. Files (folders, Hugging Face images) are
always resized and cropped to that spec; tensor data keep their size unless ``img_size`` is given, and get the
model's channel count (grey <-> RGB) so a grey set can meet an RGB model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..core.errors import RobfiltError
from ..core.surface import flag
from .adapters import DatasetSource, TensorSource
from .folder import IMAGEFOLDER, FolderSource
from .hf import HF_DISK, HFImageSource
from .images import ImageData, load_images
from .preprocess import InputSpec, input_spec_of, resolve_input_spec
from .source import ImageSource


def _tensor_spec(
    native_chans: int, preprocess: Any, img_size: Any, in_chans: int | None
) -> tuple[InputSpec | None, bool]:
    """(spec, resize) for data already in tensors: channels from the model or ``in_chans``, size only if asked."""
    base = input_spec_of(preprocess)
    if base is None and img_size is None and in_chans is None:
        return None, False
    if base is None:
        base = InputSpec(in_chans=in_chans or native_chans, crop_pct=1.0, interpolation="bilinear")
    return base.override(img_size, in_chans), img_size is not None


def open_image_source(
    data: str | ImageSource | Dataset | Sequence[Any] = "fashion-mnist",
    split: str = "test",
    root: str | os.PathLike[str] | None = None,
    *,
    img_size: int | tuple[int, int] | None = None,
    in_chans: int | None = None,
    preprocess: Any = None,
    num_workers: int | None = None,
    image_column: str = "image",
    label_column: str = "label",
    classes: Sequence[str] | None = None,
    download: bool = False,
    class_map: str | os.PathLike[str] | None = None,
) -> ImageSource:
    """An ImageSource for ``data``; nothing is decoded until examples are taken (folders, HF, Datasets).

    ``preprocess``: a loaded model / module (its InputSpec), an InputSpec, a timm data config or model name.
    ``num_workers``: decoding processes for folders, HF datasets and Datasets (folders/HF default min(4, CPUs);
    0 decodes in this process). ``classes`` names the labels of tensor data and Datasets. ``class_map``: a file
    of folder name -> class index for ``imagefolder:`` data (:mod:`.class_map`).
    """
    folder = isinstance(data, str) and data.strip().startswith(IMAGEFOLDER)
    if class_map is not None and not folder:
        raise RobfiltError(
            f"{flag('class_map')} applies to imagefolder: data (it maps class folder names to class indices); "
            "other data carry their labels already."
        )
    if isinstance(data, str):
        spec = data.strip()
        if folder:
            return FolderSource(spec[len(IMAGEFOLDER) :], split, resolve_input_spec(preprocess, img_size, in_chans),
                                num_workers, class_map)  # fmt: skip
        if spec.startswith(HF_DISK):
            path = spec[len(HF_DISK) :]
            source = HFImageSource(path, split, image_column, label_column, None, num_workers)
            if source.is_image:
                source.spec = resolve_input_spec(preprocess, img_size, in_chans)
            else:
                tspec, resize = _tensor_spec(source.take([0])[0].shape[1], preprocess, img_size, in_chans)
                source.spec, source.resize = tspec, resize
            return source
        images = load_images(spec, split, root=root, download=download)
        tspec, resize = _tensor_spec(images.x.shape[1], preprocess, img_size, in_chans)
        if tspec is None or (not resize and tspec.in_chans == images.x.shape[1]):
            return images
        return TensorSource(images.x, images.y, images.classes, images.name, tspec, resize)
    if isinstance(data, ImageData) or all(hasattr(data, a) for a in ("take", "digest", "checksum", "image_shape")):
        return data  # type: ignore[return-value]
    if isinstance(data, Dataset):
        spec_ = input_spec_of(preprocess)
        base = resolve_input_spec(preprocess, img_size, in_chans) if (spec_ or img_size or in_chans) else None
        return DatasetSource(data, classes, spec=base, resize=img_size is not None, num_workers=num_workers or 0)
    if isinstance(data, tuple | list) and len(data) == 2:
        x, y = data
        source = TensorSource(x, y, classes)
        tspec, resize = _tensor_spec(source._x.shape[1], preprocess, img_size, in_chans)
        source.spec, source.resize = tspec, resize
        return source
    if isinstance(data, np.ndarray | torch.Tensor):
        raise RobfiltError("images alone are not enough: give (x, y), the images and their integer labels.")
    raise RobfiltError(
        f"cannot use {type(data).__name__} as image data; give a spec string (e.g. imagefolder:<path>), an (x, y) "
        "pair of tensors/arrays, a torch Dataset of (image, label) or an ImageSource."
    )
