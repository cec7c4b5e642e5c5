"""Image folders that scale: an index of files, and only the selected examples decoded, a batch at a time.

``imagefolder:<path>`` is an ImageNet-style folder: one sub-folder per class, image files anywhere below it.
Hidden entries (names starting with ``.``: ``.git``, macOS's ``._0.png`` resource forks) are skipped, folders and
files alike. Opening one lists file names only; nothing is
decoded until :meth:`FolderSource.take` asks for examples, and then only those, through a torch ``DataLoader``
whose workers decode in parallel. Memory grows with the batch, not with the folder: ImageNet's 50,000
validation images are never held at once.

Identity without decoding: :attr:`FolderSource.checksum` hashes the sorted file list, sizes, labels and the
preprocessing; :meth:`FolderSource.digest` hashes the bytes of exactly the selected files, their labels and the
preprocessing. A corrupt or truncated file stops the run with its path.

Links (symbolic or hard) never change what is measured: each real file (what a path resolves to) is
indexed at most once.

- A file reached again through another path of its class folder is indexed once, under its first path in the
  index's order (class folders in sorted order, each walked top-down with names sorted).
- A link to a directory that contains its own class folder (``.``, ``..``, the data root: a loop) is skipped,
  and a directory reached twice within a class folder is walked once.
- A file reached from two class folders (a link into another class, or two class names linked to one
  directory) is refused in one line: it would count one image under two labels.
- A broken link with an image extension is refused in one line.

Class folders may themselves be links, and links may point outside the data root.

Labels (:mod:`.class_map`): class folders all named by class index (``0``, ``2``, ``10``) are labelled by those
numbers; otherwise by the positions of the sorted class-folder names (torchvision's ``ImageFolder`` rule), recorded
in the run's manifest; a mix of the two is refused. A class-map file given as ``class_map`` overrides both, and wnid
folders get ImageNet-1k's indices for a 1000-class model (applied once the model's class count is known, with
:meth:`FolderSource.apply_class_map`).

File names are whatever bytes the file system holds: a name that is not UTF-8 is read and hashed by its bytes
(``os.fsencode``), and shown with its undecodable bytes escaped (``\\xff``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..core.errors import RobfiltError
from ..core.io import expand_user
from .class_map import AUTO_INDEX, ClassMap, index_name_map, read_class_map
from .preprocess import InputSpec, pil_transform, resolve_input_spec

log = logging.getLogger(__name__)

IMAGEFOLDER = "imagefolder:"
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".pbm", ".bmp", ".tif", ".tiff", ".webp", ".gif")


def worker_context() -> str | None:
    """``fork`` on Linux: a worker then starts in milliseconds with the parent's imports. Elsewhere (macOS,
    Windows) Python's default, because forking there is unsafe; also under a spawned parent (whose default would
    be spawn, i.e. every worker re-importing torch for seconds)."""
    import sys

    return "fork" if sys.platform.startswith("linux") else None


def default_workers() -> int:
    """Decoding processes per DataLoader: min(4, CPU count)."""
    return min(4, os.cpu_count() or 1)


def as_ids(ids: Any, n: int) -> np.ndarray:
    """Example ids (tensor, array, list) as a 1-D int64 array, each in [0, n)."""
    arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise RobfiltError(f"example ids must be integers, got {arr.dtype}.")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise RobfiltError(f"example id {int(arr.max() if arr.max() >= n else arr.min())} is outside [0, {n}).")
    return arr


def index_folder(folder: Path) -> tuple[list[str], np.ndarray, list[str]]:
    """(relative file paths, labels, class names) of a class-per-sub-folder tree, in a fixed sorted order.

    Classes are the sorted sub-folder names (hidden ones skipped); each class folder is walked top-down with
    names sorted, following links; every real file is indexed at most once (the rules: the module docstring).
    """
    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        loose = any(e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS) for e in os.scandir(folder))
        hint = "it holds images but no class sub-folders; move them into" if loose else "expected"
        raise RobfiltError(f"no images found in {folder}: {hint} {folder}/<class name>/<image file>.")
    files: list[str] = []
    labels: list[int] = []
    seen: dict[tuple[int, int], tuple[str, str]] = {}  # real file -> (class, first path)
    for label, cls in enumerate(classes):
        found = _walk_class(folder, cls, seen)
        if not found:
            raise RobfiltError(
                f"class folder {folder / cls} has no image files ({', '.join(IMG_EXTENSIONS)}); add images or remove it."
            )
        files += found
        labels += [label] * len(found)
    return files, np.asarray(labels, dtype=np.int64), classes


def _walk_class(folder: Path, cls: str, seen: dict[tuple[int, int], tuple[str, str]]) -> list[str]:
    """The image files of one class folder, each real file once; ``seen`` maps every real file indexed so far
    (in any class) to its class and first path, so a file reached from a second class is refused."""
    top = folder / cls
    real_top = Path(os.path.realpath(top))
    walked: set[str] = set()
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        here = os.path.realpath(dirpath)
        if here in walked:  # reached again through a link: its files are indexed already
            dirnames[:] = []
            continue
        walked.add(here)
        keep = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            target = Path(os.path.realpath(os.path.join(dirpath, d)))
            if real_top == target or real_top.is_relative_to(target):  # a loop back over this class
                log.info("skipping %s: it links back to %s", Path(dirpath, d), target)
                continue
            keep.append(d)
        dirnames[:] = keep
        rel = Path(dirpath).relative_to(folder)
        for f in sorted(filenames):
            if f.startswith(".") or not f.lower().endswith(IMG_EXTENSIONS):  # hidden files (._0.png) like folders
                continue
            path = (rel / f).as_posix()
            key = _identity(folder, path)
            if key in seen:
                first_cls, first = seen[key]
                if first_cls != cls:
                    raise RobfiltError(
                        f"{folder}: {path} and {first} are one file (linked) in class folders {cls!r} and "
                        f"{first_cls!r}; it would count one image under two labels: remove the link."
                    )
                log.info("%s is %s again (a link); indexed once", path, first)
                continue
            seen[key] = (cls, path)
            found.append(path)
    return found


def _identity(folder: Path, path: str) -> tuple[int, int]:
    """(device, inode) of the file ``path`` resolves to: one key per real file, whatever links lead to it."""
    try:
        st = os.stat(folder / path)
    except OSError as exc:
        if os.path.islink(folder / path):
            what = f"is a broken link (to {os.readlink(folder / path)}); remove it or point it at an image"
        else:
            what = f"cannot be read ({exc.strerror or exc}); fix its permissions or remove it"
        raise RobfiltError(f"{folder}: {path} {what}.") from None
    return st.st_dev, st.st_ino


class _Decode(Dataset):
    """Decodes the files at some positions; errors come back as values (a worker's exception would lose the path)."""

    def __init__(self, root: Path, files: Sequence[str], spec: InputSpec) -> None:
        self.root, self.files, self.spec = root, files, spec
        self._transform: Any = None

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor | None, int, str]:
        from PIL import Image

        if self._transform is None:  # built in the worker: nothing unpicklable crosses processes
            self._transform = pil_transform(self.spec)
        try:
            with Image.open(self.root / self.files[i]) as img:
                img.load()
                return self._transform(img), i, ""
        except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad files
            return None, i, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def _collate(items: list[tuple[torch.Tensor | None, int, str]]) -> tuple[torch.Tensor | None, list[int], list[str]]:
    errors = [e for _, _, e in items]
    positions = [i for _, i, _ in items]
    if any(errors):
        return None, positions, errors
    return torch.stack([x for x, _, _ in items]), positions, errors  # type: ignore[misc]


class FolderSource:
    """An image folder as an :class:`~robustbench_filters.data.source.ImageSource`, decoded on demand."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str = "test",
        spec: InputSpec | None = None,
        num_workers: int | None = None,
        class_map: ClassMap | str | os.PathLike[str] | None = None,
    ) -> None:
        base = expand_user(path)
        if not str(path) or not base.is_dir():
            raise RobfiltError(
                f"image folder {str(path)!r} does not exist; pass imagefolder:<folder with one sub-folder per class>"
            )
        self.root = split_folder(base, split)
        self.files, self.positions, self.classes = index_folder(self.root)
        self.labels = self.positions
        self.class_map: ClassMap | None = None
        self.spec = spec if spec is not None else resolve_input_spec()
        self.num_workers = default_workers() if num_workers is None else int(num_workers)
        if self.num_workers < 0:
            raise RobfiltError(f"num_workers must be 0 or more, got {num_workers}.")
        self.name = f"{IMAGEFOLDER}{base}"
        self.split = split
        self._checksum = ""
        self.labels_shown = False  # the labels' origin is logged once, when they are settled (.class_map)
        if class_map is None:
            class_map = index_name_map(self.classes, self.name)  # class folders named 0, 2, 10: those labels
        if class_map is not None:
            self.apply_class_map(class_map if isinstance(class_map, ClassMap) else read_class_map(class_map))
        log.info(
            "indexed %s: %d files, %d classes, images %s", self.root, len(self), len(self.classes), self.image_shape
        )

    def __len__(self) -> int:
        return len(self.files)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def apply_class_map(self, class_map: ClassMap) -> None:
        """Label each class folder's files with the map's index for that folder (every folder needs one)."""
        per_folder = np.asarray(class_map.labels_of(self.classes, str(self.root)), dtype=np.int64)
        self.labels = per_folder[self.positions]
        self.class_map = class_map
        self._checksum = ""
        log.debug("labels of %s from %s", self.root, class_map.origin)

    @property
    def folder_of_label(self) -> dict[int, str]:
        """label -> the (first) class folder that holds it, to name a folder in messages."""
        labels = self.class_map.labels_of(self.classes, str(self.root)) if self.class_map else range(self.num_classes)
        out: dict[int, str] = {}
        for name, label in zip(self.classes, labels, strict=True):
            out.setdefault(int(label), name)
        return out

    @property
    def y(self) -> torch.Tensor:
        """Every example's label (known from the folder names, nothing decoded)."""
        return torch.from_numpy(self.labels)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.spec.image_shape

    def _settings(self) -> bytes:
        settings: dict[str, Any] = {"classes": self.classes, "preprocess": self.spec.settings()}
        if self.class_map is not None and self.class_map.origin != AUTO_INDEX:
            # positions and class-index names add nothing to the names (the labels are hashed too), so such
            # folders keep their digests
            settings["class_map"] = self.class_map.record()
        return json.dumps(settings, sort_keys=True).encode()

    @property
    def checksum(self) -> str:
        """sha256 of the sorted file list, file sizes, labels, class names and preprocessing (no decoding)."""
        if not self._checksum:
            h = hashlib.sha256(b"robfilt-imagefolder-v1\0" + self._settings())
            for rel, label in zip(self.files, self.labels.tolist(), strict=True):
                # a name is hashed by its bytes: one that is not UTF-8 (a surrogate-escaped str) hashes too
                h.update(os.fsencode(rel) + f"\0{(self.root / rel).stat().st_size}\0{label}\n".encode())
            self._checksum = h.hexdigest()
        return self._checksum

    def digest(self, ids: Any) -> str:
        """sha256 of the bytes and labels of exactly the files ``ids`` (in order) and the preprocessing."""
        h = hashlib.sha256(b"robfilt-imagefolder-v1\0" + self._settings())
        for i in as_ids(ids, len(self)).tolist():
            h.update(f"{self.labels[i]}\0".encode())
            with open(self.root / self.files[i], "rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
        return h.hexdigest()

    def _loader(self, files: list[str], batches: list[list[int]]) -> DataLoader:
        workers = min(self.num_workers, len(batches))
        return DataLoader(
            _Decode(self.root, files, self.spec),
            batch_sampler=batches,
            num_workers=workers,
            collate_fn=_collate,
            prefetch_factor=2 if workers else None,
            multiprocessing_context=worker_context() if workers else None,
        )

    def _fail(self, files: list[str], positions: list[int], errors: list[str]) -> None:
        pos, err = next((p, e) for p, e in zip(positions, errors, strict=True) if e)
        raise RobfiltError(f"cannot read image {self.root / files[pos]} ({err}); remove or replace the file.")

    def take(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode the examples ``ids``: float32 (len(ids), C, H, W) in [0, 1] and int64 labels."""
        idx = as_ids(ids, len(self))
        x = torch.empty((len(idx), *self.image_shape), dtype=torch.uint8)
        if len(idx):
            files = [self.files[i] for i in idx.tolist()]
            parts = max(1, min(self.num_workers, len(idx)))
            chunks = [c.tolist() for c in np.array_split(np.arange(len(idx)), parts) if len(c)]
            for batch, positions, errors in self._loader(files, chunks):
                if batch is None:
                    self._fail(files, positions, errors)
                x[positions] = batch
        return x.float().div_(255.0), torch.from_numpy(self.labels[idx])

    def batches(self, ids: Any, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(ids, x, y) per batch of ``batch_size``, decoded by one set of workers ahead of use (for long runs)."""
        idx = as_ids(ids, len(self))
        if batch_size <= 0:
            raise RobfiltError(f"batch_size must be positive, got {batch_size}.")
        files = [self.files[i] for i in idx.tolist()]
        chunks = [list(range(i, min(i + batch_size, len(idx)))) for i in range(0, len(idx), batch_size)]
        if not chunks:
            return
        for batch, positions, errors in self._loader(files, chunks):
            if batch is None:
                self._fail(files, positions, errors)
            sel = idx[positions]
            yield torch.from_numpy(sel), batch.float().div_(255.0), torch.from_numpy(self.labels[sel])


def split_folder(base: Path, split: str) -> Path:
    """``base/<split>`` if present (``valid`` and ``val`` are interchangeable), else ``base`` if it has no split folders."""
    aliases = {"valid": ("valid", "val"), "val": ("val", "valid"), "validation": ("validation", "val", "valid")}
    for name in aliases.get(split, (split,)):
        if (base / name).is_dir():
            return base / name
    present = [
        d.name
        for d in sorted(base.iterdir())
        if d.is_dir() and d.name in ("train", "val", "valid", "validation", "test")
    ]
    if present:
        raise RobfiltError(f"no {split!r} folder in {base}; use a split that exists: {', '.join(present)}")
    log.info("%s has no split sub-folders; using all of it as split %r", base, split)
    return base
