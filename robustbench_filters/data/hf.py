"""Hugging Face ``datasets`` folders written by ``save_to_disk``: ``hf-disk:<path>`` for images and for text.

Only local folders: ``load_from_disk`` reads memory-mapped Arrow files and never downloads (``HF_DATASETS_OFFLINE``
is set as well). A ``DatasetDict`` folder has one sub-folder per split; a single ``Dataset`` folder serves every
split for images, and is cut 90/5/5 (the rule of ``text:<file>``) for text.

Images: the image column (default ``image``) holds ``datasets.Image`` values (decoded only for the selected
rows, a batch at a time, then the model's preprocessing) or arrays (uint8 or [0, 1] floats); the label column
(default ``label``) holds integers, and a ``ClassLabel`` feature names the classes. Text: one string column
(default ``text``), rows joined by newlines.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..core.errors import RobfiltError, suggest
from ..core.io import expand_user
from ..core.surface import flag
from ..core.textfiles import without_bom
from .adapters import to_unit_float
from .folder import as_ids, default_workers, worker_context
from .images import tensor_checksum
from .preprocess import InputSpec, adapt_tensor, pil_transform, resolve_input_spec

log = logging.getLogger(__name__)

HF_DISK = "hf-disk:"
_SPLIT_ALIASES = {
    "valid": ("valid", "validation", "val", "dev"),
    "val": ("val", "validation", "valid", "dev"),
    "validation": ("validation", "valid", "val", "dev"),
}


def _load_disk(path: str | os.PathLike[str]) -> Any:
    """``datasets.load_from_disk`` of a local folder (never the network), or one line."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    p = expand_user(path)
    if not str(path) or not p.is_dir():
        raise RobfiltError(
            f"Hugging Face dataset folder {str(path)!r} does not exist; pass hf-disk:<folder from save_to_disk>."
        )
    try:
        return datasets.load_from_disk(str(p))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises several types for foreign folders
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise RobfiltError(f"{p} is not a dataset folder written by save_to_disk ({first}).") from None


def load_hf_disk(path: str | os.PathLike[str], split: str) -> tuple[Any, str]:
    """(the ``datasets.Dataset`` of ``split``, the split name used) from a ``save_to_disk`` folder."""
    import datasets

    p = expand_user(path)
    obj = _load_disk(path)
    if isinstance(obj, datasets.DatasetDict):
        for name in _SPLIT_ALIASES.get(split, (split,)):
            if name in obj:
                return obj[name], name
        raise RobfiltError(f"{p} has no split {split!r}.{suggest(split, list(obj))} Its splits: {', '.join(obj)}.")
    log.info("%s is a single dataset (no splits); using all of it as split %r", p, split)
    return obj, ""


def _column(ds: Any, column: str, what: str, where: Path) -> None:
    if column not in ds.column_names:
        raise RobfiltError(
            f"{where} has no {what} column {column!r}.{suggest(column, ds.column_names)} "
            f"Its columns: {', '.join(ds.column_names)}; pass the right column name."
        )


class _Rows(Dataset):
    """Images of some rows, preprocessed; errors come back as values naming the row."""

    def __init__(
        self, ds: Any, rows: list[int], spec: InputSpec, resize: bool, is_image: bool, dtype: str | None = None
    ) -> None:
        self.ds, self.rows, self.spec, self.resize, self.is_image = ds, rows, spec, resize, is_image
        self.dtype = dtype
        self._pil: Any = None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor | None, int, str]:
        row = self.rows[i]
        try:
            value = self.ds[row]
            value = value[next(iter(value))] if isinstance(value, dict) else value
            if self.is_image:
                if self._pil is None:
                    self._pil = pil_transform(self.spec)
                return self._pil(value).float().div_(255.0), i, ""
            arr = np.asarray(value) if self.dtype is None else np.asarray(value).astype(self.dtype)
            x = to_unit_float(torch.as_tensor(arr).unsqueeze(0), f"row {row}")
            return adapt_tensor(x, self.spec, self.resize)[0], i, ""
        except KeyboardInterrupt:
            raise
        except RobfiltError as exc:
            return None, i, str(exc)
        except Exception as exc:  # noqa: BLE001 - decoding errors of any kind name the row
            return None, i, f"row {row} ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]})"


def _collate(items: list) -> tuple[list, list[int], list[str]]:
    return [x for x, _, _ in items], [i for _, i, _ in items], [e for *_, e in items]


class HFImageSource:
    """An image/label ``save_to_disk`` dataset as an ImageSource; rows are decoded only when taken."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str = "test",
        image_column: str = "image",
        label_column: str = "label",
        spec: InputSpec | None = None,
        num_workers: int | None = None,
        resize: bool = True,
    ) -> None:
        import datasets

        self.path = expand_user(path)
        ds, used = load_hf_disk(self.path, split)
        _column(ds, image_column, "image", self.path)
        _column(ds, label_column, "label", self.path)
        feature = ds.features[label_column]
        labels = np.asarray(ds[label_column])  # one Arrow column: no image is decoded
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise RobfiltError(f"label column {label_column!r} of {self.path} must hold integers, got {labels.dtype}.")
        if len(labels) == 0:
            raise RobfiltError(f"split {split!r} of {self.path} is empty.")
        if labels.min() < 0:
            raise RobfiltError(
                f"label column {label_column!r} of {self.path} contains {labels.min()} (unlabelled rows?); "
                "pick a labelled split."
            )
        if isinstance(feature, datasets.ClassLabel):
            self.classes = list(feature.names)
        else:
            self.classes = [str(i) for i in range(int(labels.max()) + 1)]
        self.labels = labels.astype(np.int64)
        self.is_image = isinstance(ds.features[image_column], datasets.Image)
        self._images = ds.select_columns([image_column])
        self._dtype: str | None = None
        if not self.is_image:  # arrays as numpy, in their declared dtype (datasets' numpy format widens to int64)
            self._images = self._images.with_format("numpy")
            feature = ds.features[image_column]
            while not hasattr(feature, "dtype") and hasattr(feature, "feature"):
                feature = feature.feature
            self._dtype = getattr(feature, "dtype", None)
        self.image_column = image_column
        self.spec = spec if spec is not None else resolve_input_spec()
        self.resize = resize
        self.num_workers = default_workers() if num_workers is None else int(num_workers)
        self.name = f"{HF_DISK}{self.path}"
        self.split = used or split
        self._checksum = ""
        self._shape: tuple[int, int, int] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def y(self) -> torch.Tensor:
        return torch.from_numpy(self.labels)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        if self.is_image:
            return self.spec.image_shape
        if self._shape is None:
            self._shape = tuple(self.take([0])[0].shape[1:])  # type: ignore[assignment]
        return self._shape  # type: ignore[return-value]

    def take(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        idx = as_ids(ids, len(self))
        rows = idx.tolist()
        workers = min(self.num_workers, max(0, len(rows) // 8))
        out: list[torch.Tensor | None] = [None] * len(rows)
        loader = DataLoader(_Rows(self._images, rows, self.spec, self.resize, self.is_image, self._dtype),
                            batch_size=max(1, -(-len(rows) // max(1, workers))), num_workers=workers,
                            collate_fn=_collate, multiprocessing_context=worker_context() if workers else None)  # fmt: skip
        for xs, positions, errors in loader:
            bad = next((e for e in errors if e), "")
            if bad:
                raise RobfiltError(f"cannot read image {bad} in {self.path}; fix or drop that row.")
            for x, pos in zip(xs, positions, strict=True):
                out[pos] = x
        shapes = sorted({tuple(t.shape) for t in out if t is not None})
        if len(shapes) > 1:
            raise RobfiltError(f"images of {self.path} differ in shape ({shapes[:3]}); give img_size to resize them.")
        x = torch.stack(out) if out else torch.empty(0)  # type: ignore[arg-type]
        return x, torch.from_numpy(self.labels[idx])

    def _settings(self) -> bytes:
        # arrays for a model that states no input spec keep their size and channels: no preprocessing (None)
        preprocess = self.spec.settings() if self.spec is not None else None
        return json.dumps(
            {"classes": self.classes, "preprocess": preprocess, "resize": self.resize}, sort_keys=True
        ).encode()

    def digest(self, ids: Any) -> str:
        """sha256 of the encoded image bytes (or the arrays) and labels of the rows ``ids``, and the preprocessing."""
        import datasets

        idx = as_ids(ids, len(self))
        if not self.is_image:
            return tensor_checksum(*self.take(idx))
        raw = self._images.cast_column(self.image_column, datasets.Image(decode=False))
        h = hashlib.sha256(b"robfilt-hf-images-v1\0" + self._settings())
        for i in idx.tolist():
            cell = raw[i][self.image_column]
            data = cell.get("bytes") or (Path(cell["path"]).read_bytes() if cell.get("path") else b"")
            h.update(f"{self.labels[i]}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()

    @property
    def checksum(self) -> str:
        """sha256 of the split's Arrow files, its columns, labels and the preprocessing (no decoding)."""
        if not self._checksum:
            h = hashlib.sha256(b"robfilt-hf-v1\0" + self._settings())
            h.update(self.labels.tobytes())
            for entry in self._images.cache_files:
                with open(entry["filename"], "rb") as f:
                    for chunk in iter(lambda f=f: f.read(1 << 22), b""):
                        h.update(chunk)
            self._checksum = h.hexdigest()
        return self._checksum


def load_hf_documents(path: str | os.PathLike[str], split: str = "test", text_column: str = "text") -> list[str]:
    """The documents of one split (``all``/``train``/``valid``/``test``, normalised by the caller) of a
    ``save_to_disk`` dataset: one per non-empty row of ``text_column``. A ``DatasetDict`` has its own splits
    (``all``: every split, in its order); a single dataset is cut 90/5/5 at row boundaries."""
    from .splits import split_documents

    if split == "all":
        obj = _load_disk(path)
        if hasattr(obj, "keys"):  # DatasetDict
            return [d for name in obj for d in _rows(obj[name], text_column, Path(path), name)]
        return _rows(obj, text_column, Path(path))
    ds, used = load_hf_disk(path, split)
    docs = _rows(ds, text_column, Path(path), used)
    return docs if used else split_documents(docs, split)


def _is_text(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in ("string", "large_string")


def _rows(ds: Any, text_column: str, where: Path, split: str = "") -> list[str]:
    """The non-empty rows of ``text_column``, stripped (a leading byte-order mark too). Every row is checked: a column
    that is not text, or a row that holds no string (None), is refused in one line naming it; none is skipped."""
    _column(ds, text_column, "text", where)
    feature = ds.features[text_column]
    if not _is_text(feature):
        others = [c for c, f in ds.features.items() if _is_text(f)]
        fix = f"its text columns: {', '.join(others)}" if others else "it has no text column"
        raise RobfiltError(
            f"column {text_column!r} of {where} holds {getattr(feature, 'dtype', type(feature).__name__)}, not "
            f"text; pass {flag('text_column')} with a column of strings ({fix})."
        )
    rows = ds[text_column]
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, str)), None)
    if bad is not None:
        part = f" of split {split!r}" if split else ""
        raise RobfiltError(
            f"row {bad}{part} of text column {text_column!r} of {where} is {rows[bad]!r}, not text; give every row "
            "a string (drop or fill that row, e.g. ds.filter(lambda r: r[column] is not None), and save_to_disk "
            "again)."
        )
    return [d for r in rows if (d := without_bom(r).strip())]


def load_hf_text(path: str | os.PathLike[str], split: str = "test", text_column: str = "text") -> str:
    """The text of one split of a ``save_to_disk`` dataset: its documents (rows) with a blank line between them."""
    text = "\n\n".join(load_hf_documents(path, split, text_column))
    if not text.strip():
        raise RobfiltError(f"the {split} text of {path} is empty; give a dataset with text in column {text_column!r}.")
    return text
