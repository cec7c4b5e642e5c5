"""Image data for attacks and training: the bundled Fashion-MNIST subset, torchvision sets and image folders.

Every loader returns an :class:`ImageData` with images in [0, 1] (N, C, H, W). Mean/std normalisation lives
inside the model (RobustBench style), so an attack's epsilon is always measured in pixel units. Each
``ImageData`` carries a sha256 of its tensors: runs that claim to be paired (same examples, two models) can
check it instead of trusting file names.

Nothing here downloads unless the caller passes ``download=True``.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.errors import ChecksumError, RobfiltError, suggest, unknown
from ..core.io import expand_user
from .assets import asset_path
from .folder import IMAGEFOLDER
from .preprocess import DEFAULT_PREPROCESS, InputSpec, pil_transform, resolve_input_spec

log = logging.getLogger(__name__)

BUNDLED = "fashion-mnist"
TORCHVISION_SETS = ("cifar10", "cifar100", "mnist", "fashion-mnist-full")
#: Dataset specs for CLI help and completion; ``imagefolder:<path>`` takes a folder.
IMAGE_DATASETS: tuple[str, ...] = (BUNDLED, *TORCHVISION_SETS, f"{IMAGEFOLDER}<path>")
IMAGE_SPLITS: tuple[str, ...] = ("train", "test")
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass
class ImageData:
    """A labelled image set in [0, 1].

    ``x``: float32 (N, C, H, W); ``y``: int64 (N,); ``classes[k]`` names label k; ``name`` the dataset spec;
    ``checksum``: sha256 of ``x`` and ``y`` (computed when left empty), equal iff the examples are equal.
    """

    x: torch.Tensor
    y: torch.Tensor
    classes: list[str]
    name: str
    checksum: str = ""
    split: str = field(default="")

    def __post_init__(self) -> None:
        if self.x.ndim != 4 or self.x.dtype != torch.float32:
            raise ValueError(f"x must be float32 (N, C, H, W), got {self.x.dtype} {tuple(self.x.shape)}")
        if self.y.shape != (self.x.shape[0],) or self.y.dtype != torch.int64:
            raise ValueError(f"y must be int64 ({self.x.shape[0]},), got {self.y.dtype} {tuple(self.y.shape)}")
        if not self.checksum:
            self.checksum = tensor_checksum(self.x, self.y)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def take(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The examples ``ids`` (see :class:`~robustbench_filters.data.source.ImageSource`)."""
        return self.x[ids], self.y[ids]

    def digest(self, ids: torch.Tensor) -> str:
        """sha256 of the images and labels of exactly the examples ``ids``."""
        return tensor_checksum(*self.take(ids))

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W): what a model for this data must accept."""
        c, h, w = self.x.shape[1:]
        return int(c), int(h), int(w)


def tensor_checksum(*tensors: torch.Tensor) -> str:
    """sha256 over dtype, shape and bytes of each tensor (CPU, contiguous)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def stratified_prefix(y: np.ndarray | torch.Tensor | list[int], n: int | None) -> np.ndarray:
    """Indices of the first ``n`` examples that keep classes balanced, in original order.

    Takes the 1st example of every class, then the 2nd of every class, and so on, so a prefix of a shuffled
    set stays stratified and a canonical test set gives the same examples every time.
    """
    y = np.asarray(y)
    if n is None or n >= len(y):
        return np.arange(len(y))
    rank = np.zeros(len(y), dtype=np.int64)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        rank[members] = np.arange(len(members))
    chosen = np.lexsort((np.arange(len(y)), rank))[:n]
    return np.sort(chosen)


def load_images(
    spec: str = BUNDLED,
    split: str = "test",
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
    n_max: int | None = None,
    preprocess: str | Mapping[str, Any] | torch.nn.Module | InputSpec | None = DEFAULT_PREPROCESS,
    img_size: int | tuple[int, int] | None = None,
    in_chans: int | None = None,
    num_workers: int | None = None,
) -> ImageData:
    """Load an image set as :class:`ImageData` (images in [0, 1]).

    ``spec``: ``fashion-mnist`` (bundled subset, the default), ``fashion-mnist-full``, ``mnist``, ``cifar10``,
    ``cifar100`` (torchvision files under ``root``; ``download=True`` fetches them), or ``imagefolder:<path>``
    (one sub-folder per class; ``<path>/<split>`` is used when it exists). ``n_max`` keeps a class-balanced
    prefix, so only those images are decoded. ``preprocess`` (image folders only): a timm model name, a timm
    data config / ``pretrained_cfg`` dict, a model or an :class:`InputSpec`; its channels, resize, crop and
    interpolation are used, its mean/std are not. ``img_size`` / ``in_chans`` override it. For folders too big
    to hold, use :func:`~robustbench_filters.data.open_image_source` (decodes a batch at a time).
    """
    if n_max is not None and n_max < 1:
        raise RobfiltError(f"n_max must be at least 1, got {n_max}")
    spec = spec.strip()
    if spec.startswith(IMAGEFOLDER):
        return _load_imagefolder(spec[len(IMAGEFOLDER) :], split, n_max, preprocess, img_size, in_chans, num_workers)
    key = spec.lower().replace("_", "-")
    if key not in (BUNDLED, *TORCHVISION_SETS):
        if spec and expand_user(spec).is_dir():
            raise RobfiltError(f"unknown image dataset {spec!r}; to load a folder of images use 'imagefolder:{spec}'")
        raise unknown("image dataset", spec, IMAGE_DATASETS)
    if split not in IMAGE_SPLITS:
        raise RobfiltError(f"unknown split {split!r} for {key}.{suggest(split, IMAGE_SPLITS)} Use one of: train, test.")
    if key == BUNDLED:
        return _load_bundled(split, n_max)
    return _load_torchvision(key, split, root, download, n_max)


# ---------------------------------------------------------------------------------------------- bundled
def _load_bundled(split: str, n_max: int | None) -> ImageData:
    path = asset_path(f"fashion_mnist/{split}.npz")
    try:
        with np.load(path, allow_pickle=False) as z:
            x, y, classes = z["x"], z["y"], [str(c) for c in z["classes"]]
    except (OSError, ValueError, KeyError) as e:
        raise ChecksumError(f"bundled asset {path} cannot be read ({e}); reinstall robustbench-filters") from None
    idx = stratified_prefix(y, n_max)
    return _from_uint8(x[idx], y[idx], classes, BUNDLED, split)


def _from_uint8(x: np.ndarray | torch.Tensor, y: Any, classes: list[str], name: str, split: str) -> ImageData:
    """uint8 (N, H, W) or (N, H, W, C) -> float32 (N, C, H, W) in [0, 1]."""
    xt = torch.as_tensor(np.asarray(x))
    xt = xt.unsqueeze(1) if xt.ndim == 3 else xt.permute(0, 3, 1, 2)
    xt = xt.contiguous().float().div_(255.0)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.int64)
    data = ImageData(x=xt, y=yt, classes=list(classes), name=name, split=split)
    log.info("loaded %s/%s: %d images %s, %d classes", name, split, len(data), data.image_shape, data.num_classes)
    return data


# ------------------------------------------------------------------------------------------ torchvision
def default_data_root() -> Path:
    """Where external data sets live unless ``root`` is given: ``$ROBFILT_DATA`` or ~/.cache/robustbench_filters/data."""
    return expand_user(os.environ.get("ROBFILT_DATA", "~/.cache/robustbench_filters/data"))


_TV_FILES = {
    "cifar10": "cifar-10-batches-py/",
    "cifar100": "cifar-100-python/",
    "mnist": "MNIST/raw/",
    "fashion-mnist-full": "FashionMNIST/raw/ (or the gzipped IDX files themselves)",
}


def _load_torchvision(key: str, split: str, root: Any, download: bool, n_max: int | None) -> ImageData:
    if root is None:
        root_path = default_data_root()
        if key == "fashion-mnist-full" and not download and _idx_files(DEBIAN_FASHION_MNIST, split):
            root_path = DEBIAN_FASHION_MNIST  # Debian's dataset-fashion-mnist package
    else:
        root_path = expand_user(root)
        if not root_path.exists() and not download:
            raise RobfiltError(f"data root {root_path} does not exist; pass an existing folder or download=True")
    if key in ("mnist", "fashion-mnist-full") and (files := _idx_files(root_path, split)):
        x, y = _read_idx_pair(*files)
        classes = _MNIST_CLASSES if key == "mnist" else FASHION_MNIST_CLASSES
        idx = stratified_prefix(y, n_max)
        return _from_uint8(x[idx], y[idx], classes, key, split)

    import torchvision.datasets as tvd

    cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100, "mnist": tvd.MNIST, "fashion-mnist-full": tvd.FashionMNIST}
    if download:
        log.warning("download=True: fetching %s into %s unless it is already there", key, root_path)
    try:
        ds = cls[key](str(root_path), train=split == "train", download=download)
    except RuntimeError:
        raise RobfiltError(
            f"{key} not found under {root_path} (expected {_TV_FILES[key]}); pass root=<folder with those files> "
            "or download=True"
        ) from None
    except OSError as e:  # network failure during download=True, unreadable files
        raise RobfiltError(
            f"could not read or download {key} into {root_path} ({e}); check the folder or the network"
        ) from None
    idx = stratified_prefix(np.asarray(ds.targets), n_max)
    data = ds.data[torch.as_tensor(idx)] if isinstance(ds.data, torch.Tensor) else ds.data[idx]
    return _from_uint8(data, np.asarray(ds.targets)[idx], list(ds.classes), key, split)


_MNIST_CLASSES = [str(d) for d in range(10)]
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def _idx_files(folder: Path, split: str) -> tuple[Path, Path] | None:
    """The (images, labels) IDX files of ``split`` directly in ``folder`` (gzipped or not), if both exist."""
    prefix = "train" if split == "train" else "t10k"
    found = []
    for kind in ("images-idx3", "labels-idx1"):
        cands = [folder / f"{prefix}-{kind}-ubyte{ext}" for ext in (".gz", "")]
        hit = next((p for p in cands if p.is_file()), None)
        if hit is None:
            return None
        found.append(hit)
    return found[0], found[1]


def _read_idx(path: Path, magic: int) -> np.ndarray:
    try:
        if path.suffix == ".gz":
            with gzip.open(path) as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as e:
        raise RobfiltError(f"cannot read {path} ({e}); the file is corrupted, replace it") from None
    if len(raw) < 8 or int.from_bytes(raw[:4], "big") != magic:
        raise RobfiltError(f"{path} is not an IDX file (bad magic number); replace it with the original")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(dims)):
        raise RobfiltError(f"{path} is truncated ({len(body)} bytes, expected {int(np.prod(dims))}); replace it")
    return np.frombuffer(body, np.uint8).reshape(dims)


def _read_idx_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    x, y = _read_idx(images, 2051), _read_idx(labels, 2049).astype(np.int64)
    if len(x) != len(y):
        raise RobfiltError(f"{images} has {len(x)} images but {labels} has {len(y)} labels; replace the files")
    return x, y


# ------------------------------------------------------------------------------------------ imagefolder
def _load_imagefolder(
    path_str: str, split: str, n_max: int | None, preprocess: Any, img_size: Any, in_chans: int | None, workers: Any
) -> ImageData:
    """The class-balanced prefix of a folder, materialised (small sets; big ones use :class:`FolderSource`)."""
    from .folder import FolderSource

    source = FolderSource(path_str, split, resolve_input_spec(preprocess, img_size, in_chans), workers)
    idx = stratified_prefix(source.labels, n_max)
    x, y = source.take(idx)
    data = ImageData(x=x, y=y, classes=list(source.classes), name=source.name, split=split)
    log.info("loaded %s (%s): %d images %s, %d classes", source.name, source.root, len(data), data.image_shape,
             data.num_classes)  # fmt: skip
    return data


def image_transform(preprocess: str | Mapping[str, Any] | torch.nn.Module | InputSpec = DEFAULT_PREPROCESS) -> Any:
    """PIL image -> uint8 tensor (C, H, W): ``preprocess``'s channels and timm eval resize/crop, no normalisation.

    ``preprocess``: a timm model name, a timm data config / ``pretrained_cfg`` dict, a model, or an InputSpec.
    """
    return pil_transform(resolve_input_spec(preprocess))
