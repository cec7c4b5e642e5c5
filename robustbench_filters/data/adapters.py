"""Data from Python: tensors, numpy arrays and torch Datasets as :class:`~.source.ImageSource`.

What is accepted, checked once with one-line errors:

- images: float in [0, 1] or uint8 in 0-255 (converted), shaped (N, C, H, W), (N, H, W, C) for numpy-style
  channel-last arrays, or (N, H, W) for grey; 1, 3 or 4 (alpha dropped) channels. Normalised images are refused:
  normalisation belongs inside the model, or eps would be on the wrong scale.
- labels: whole numbers from 0 (:mod:`.labels`; text, fractions and booleans are refused). Whether each is a
  class of the model is checked once the model's class count is known (a measurement's probe).
- nothing the caller passes is modified: images are detached and copied before robfilt clamps or converts them.

A Dataset may return (image, label) with the image a tensor, an array or a PIL image (PIL images go through the
model's preprocessing). Channels follow ``spec.in_chans`` when a spec is given; sizes change only when asked.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from ..core.errors import RobfiltError
from .folder import as_ids, worker_context
from .images import tensor_checksum
from .labels import label_index, label_indices
from .preprocess import InputSpec, adapt_tensor, pil_transform

log = logging.getLogger(__name__)
_TOL = 1e-6  # float images may overshoot [0, 1] by rounding


def _channels_first(x: torch.Tensor, channel_last: bool | None, what: str) -> torch.Tensor:
    """(N, C, H, W) from (N, C, H, W), (N, H, W, C) or (N, H, W); at least one image."""
    if x.dim() in (3, 4) and x.shape[0] == 0:
        raise RobfiltError(f"{what} hold no images (shape {tuple(x.shape)}); give at least one.")
    if x.dim() == 3:
        return x.unsqueeze(1)
    if x.dim() != 4:
        raise RobfiltError(f"{what} must be (N, C, H, W), (N, H, W, C) or (N, H, W), got shape {tuple(x.shape)}.")
    first, last = x.shape[1] in (1, 3, 4), x.shape[-1] in (1, 3, 4)
    if channel_last is None:
        channel_last = last and not first
    if channel_last:
        return x.permute(0, 3, 1, 2)
    if not first:
        raise RobfiltError(f"{what} has {x.shape[1]} channels (shape {tuple(x.shape)}); give 1, 3 or 4 channels.")
    return x


def _as_tensor(x: Any, what: str) -> torch.Tensor:
    """A tensor view of ``x``, detached from any autograd graph (the caller's images are data, not parameters)."""
    try:
        t = torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise RobfiltError(f"{what} cannot be read as an array of images ({type(x).__name__}: {exc}).") from None
    require_values(t, what)
    return t.detach()


def require_values(t: torch.Tensor, what: str) -> None:
    """Refuse a tensor on the meta device: it has a shape but no values to measure (on any other device robfilt
    copies what it reads to the run's device)."""
    if t.device.type == "meta":
        raise RobfiltError(
            f"{what} are on the meta device, which holds no values; give tensors with data (e.g. on cpu)."
        )


def to_unit_float(x: Any, what: str = "images", channel_last: bool | None = None) -> torch.Tensor:
    """Images as float32 (N, C, H, W) in [0, 1]: uint8 is divided by 255, floats must already be in [0, 1].

    Always a new tensor: ``x`` (which may share memory with it before the copy) is never modified.
    """
    t = _channels_first(_as_tensor(x, what), channel_last, what)
    if t.dtype == torch.uint8:
        return t.float().div_(255.0)
    if not t.is_floating_point():
        raise RobfiltError(
            f"{what} have dtype {t.dtype}; give float images in [0, 1] or uint8 images in 0-255 (e.g. x.astype('uint8'))."
        )
    t = t.float()
    if t.numel():
        if not torch.isfinite(t).all():
            raise RobfiltError(f"{what} contain NaN or inf values; give finite images in [0, 1].")
        lo, hi = float(t.min()), float(t.max())
        if lo < -_TOL or hi > 1 + _TOL:
            hint = " (normalised? robfilt takes raw [0, 1] images: the model normalises)" if lo < 0 else ""
            hint = hint or (" (0-255 floats? divide by 255 or pass uint8)" if hi > 1 else "")
            raise RobfiltError(f"{what} have values in [{lo:.3g}, {hi:.3g}], not [0, 1]{hint}.")
    return t.clamp(0.0, 1.0).contiguous()  # clamp makes the copy: never in place on the caller's memory


def to_labels(y: Any, n: int, what: str = "labels") -> torch.Tensor:
    """Labels as int64 (N,): non-negative whole numbers (see :func:`.labels.label_indices`)."""
    return label_indices(y, n, what)


def _classes(classes: Sequence[str] | None, y: torch.Tensor, what: str) -> list[str]:
    top = int(y.max()) + 1 if len(y) else 0
    if classes is None:
        return [str(i) for i in range(top)]
    names = [str(c) for c in classes]
    if len(names) < top:
        raise RobfiltError(f"{what} has label {top - 1} but only {len(names)} class names; give one name per class.")
    return names


class TensorSource:
    """In-memory images and labels (tensors or numpy arrays) as an ImageSource; uint8 stays uint8 until taken."""

    def __init__(
        self,
        x: Any,
        y: Any,
        classes: Sequence[str] | None = None,
        name: str = "tensors",
        spec: InputSpec | None = None,
        resize: bool = False,
        channel_last: bool | None = None,
    ) -> None:
        t = _channels_first(_as_tensor(x, "images (data[0])"), channel_last, "images (data[0])")
        t = t.clone() if t.dtype == torch.uint8 else to_unit_float(t, "images (data[0])", channel_last=False)
        self._x = t  # our own copy: a later change to the caller's tensor cannot change what was measured
        self.y = to_labels(y, len(t), "labels (data[1])")
        self.classes = _classes(classes, self.y, "labels (data[1])")
        self.name, self.split = name, "test"
        self.spec, self.resize = spec, resize
        self._checksum = ""

    def __len__(self) -> int:
        return int(self._x.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.take(torch.zeros(1, dtype=torch.long))[0].shape[1:]) if len(self) else (0, 0, 0)

    def take(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(as_ids(ids, len(self)))
        x = self._x[idx]
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.clone()
        return adapt_tensor(x, self.spec, self.resize), self.y[idx]

    def digest(self, ids: Any) -> str:
        return tensor_checksum(*self.take(ids))

    @property
    def checksum(self) -> str:
        if not self._checksum:
            self._checksum = tensor_checksum(*self.take(torch.arange(len(self))))
        return self._checksum


class _Items(Dataset):
    """(image as float (C, H, W) in [0, 1], label, error) from a user Dataset; errors come back as values so that
    a worker's failure keeps its one-line message."""

    def __init__(self, dataset: Dataset, ids: Sequence[int], spec: InputSpec | None, resize: bool) -> None:
        self.dataset, self.ids, self.spec, self.resize = dataset, ids, spec, resize
        self._pil: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[torch.Tensor | None, int, str]:
        try:
            return (*self._item(int(self.ids[i])), "")
        except RobfiltError as exc:
            return None, -1, str(exc)

    def _item(self, j: int) -> tuple[torch.Tensor, int]:
        try:
            item = self.dataset[j]
            image, label = item[0], item[1]
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's __getitem__ may raise anything
            raise RobfiltError(
                f"dataset[{j}] failed or is not an (image, label) pair ({type(exc).__name__}: {exc})."
            ) from None
        if hasattr(image, "convert") and hasattr(image, "mode"):  # a PIL image: the model's preprocessing
            if self.spec is None:
                raise RobfiltError("the dataset returns PIL images; give img_size or a model to preprocess them.")
            if self._pil is None:
                self._pil = pil_transform(self.spec)
            image = self._pil(image)
            x = image.float().div_(255.0)
        else:
            pixels = image.detach() if isinstance(image, torch.Tensor) else torch.as_tensor(np.asarray(image))
            x = to_unit_float(pixels.unsqueeze(0), f"dataset[{j}] image")
            x = adapt_tensor(x, self.spec, self.resize)[0]
        return x, label_index(label, f"dataset[{j}] label")


def _collate_items(items: list) -> tuple[list, torch.Tensor, list[str]]:
    return [x for x, _, _ in items], torch.tensor([y for _, y, _ in items], dtype=torch.long), [e for *_, e in items]


class DatasetSource:
    """Any map-style torch ``Dataset`` of (image, label) as an ImageSource, read through a DataLoader.

    The whole-pool ``checksum`` reads every example once (pass ``checksum=`` to name the data yourself);
    ``digest(ids)`` reads only those.
    """

    def __init__(
        self,
        dataset: Dataset,
        classes: Sequence[str] | None = None,
        name: str | None = None,
        spec: InputSpec | None = None,
        resize: bool = False,
        num_workers: int = 0,
        checksum: str | None = None,
    ) -> None:
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
            raise RobfiltError("give a map-style Dataset (with __len__ and __getitem__), not an IterableDataset.")
        try:
            n = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise RobfiltError("the dataset has no __len__; give a map-style Dataset.") from None
        if n == 0:
            raise RobfiltError("the dataset is empty; give at least one (image, label) example.")
        self.dataset, self.spec, self.resize, self.num_workers = dataset, spec, resize, int(num_workers)
        self.name, self.split = name or type(dataset).__name__, "test"
        self._n, self._checksum = n, checksum or ""
        given = classes if classes is not None else getattr(dataset, "classes", None)
        self._classes = [str(c) for c in given] if given is not None else None
        self._first = self.take(torch.zeros(1, dtype=torch.long))[0]

    def __len__(self) -> int:
        return self._n

    @property
    def classes(self) -> list[str]:
        if self._classes is None:  # labels of every example: one pass, without keeping the images
            top = max(int(self.take(torch.arange(i, min(i + 256, self._n)))[1].max()) for i in range(0, self._n, 256))
            self._classes = [str(i) for i in range(top + 1)]
        return self._classes

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self._first.shape[1:])  # type: ignore[return-value]

    def take(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        idx = as_ids(ids, len(self)).tolist()
        workers = min(self.num_workers, max(1, len(idx) // 16)) if self.num_workers else 0
        items = _Items(self.dataset, idx, self.spec, self.resize)
        xs: list[torch.Tensor] = []
        ys: list[torch.Tensor] = []
        loader = DataLoader(items, batch_size=64, num_workers=workers, collate_fn=_collate_items,
                            multiprocessing_context=worker_context() if workers else None)  # fmt: skip
        for x, y, errors in loader:
            bad = next((e for e in errors if e), "")
            if bad:
                raise RobfiltError(bad)
            xs += x
            ys.append(y)
        shapes = sorted({tuple(t.shape) for t in xs})
        if len(shapes) > 1:
            raise RobfiltError(f"the dataset's images differ in shape ({shapes[:3]}); give img_size to resize them.")
        x = torch.stack(xs) if xs else torch.empty(0)
        y = torch.cat(ys) if ys else torch.empty(0, dtype=torch.long)
        if self._classes is not None and len(y) and int(y.max()) >= len(self._classes):
            raise RobfiltError(f"label {int(y.max())} has no class name ({len(self._classes)} given).")
        return x, y

    def digest(self, ids: Any) -> str:
        return tensor_checksum(*self.take(ids))

    @property
    def checksum(self) -> str:
        if not self._checksum:
            h = hashlib.sha256(b"robfilt-dataset-v1\0")
            for i in range(0, self._n, 256):
                h.update(self.digest(torch.arange(i, min(i + 256, self._n))).encode())
            self._checksum = h.hexdigest()
        return self._checksum
