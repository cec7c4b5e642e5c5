"""Labels are class indices of the model: whole numbers in [0, classes), where ``classes`` is what the model
returns (its logits' last dimension), never the largest label + 1 nor the number of folders.

Two steps, because they happen at different times:

- :func:`label_indices` / :func:`label_index` when data are opened: only whole numbers are labels. Strings,
  booleans, fractions, NaN and negative numbers are refused in one line. Floats that hold whole numbers (3.0)
  are taken as those numbers: arrays from pandas or from a CSV are often float.
- :func:`check_labels_fit` once the model's class count is known (the probe before a run starts): every label
  must be an index of one of its logits. A subset is fine (labels 0..8 for a 10-class model); a label of 10 is
  refused by value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..core.errors import RobfiltError
from ..core.surface import flag


def _refuse(what: str, detail: str) -> RobfiltError:
    return RobfiltError(f"{what} {detail}; labels must be integer class indices of the model (0, 1, 2, ...).")


def label_indices(values: Any, n: int | None = None, what: str = "labels") -> torch.Tensor:
    """Labels as an int64 tensor (N,) of non-negative whole numbers (``n``: the count they must have)."""
    if isinstance(values, torch.Tensor):
        if values.device.type == "meta":
            raise RobfiltError(f"{what} are on the meta device, which holds no values; give labels with data.")
        arr = values.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(values)
        except (TypeError, ValueError) as exc:
            raise _refuse(what, f"cannot be read as an array ({exc})") from None
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        count = f"{n} " if n is not None else ""
        raise RobfiltError(f"{what} must be a 1-D sequence of {count}class indices, got shape {tuple(arr.shape)}.")
    if arr.dtype == object:  # Python objects: each must be a whole number itself
        return torch.tensor([label_index(v, f"{what}[{i}]") for i, v in enumerate(arr.tolist())], dtype=torch.long)
    if arr.dtype.kind == "b":
        raise _refuse(what, "are booleans (True/False)")
    if arr.dtype.kind in "USaV":
        first = arr.reshape(-1)[0] if arr.size else ""
        raise _refuse(what, f"are text (e.g. {str(first)!r}), not numbers: map each class name to its index first")
    if arr.dtype.kind == "c":
        raise _refuse(what, "are complex numbers")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise _refuse(what, "contain NaN or inf")
        frac = arr[arr != np.round(arr)]
        if frac.size:
            raise _refuse(what, f"contain {float(frac[0]):g}, which is not a whole number")
    elif arr.dtype.kind not in "iu":
        raise _refuse(what, f"have dtype {arr.dtype}")
    out = torch.from_numpy(arr.astype(np.int64, copy=True))
    if len(out) and int(out.min()) < 0:
        raise _refuse(what, f"contain {int(out.min())}; class indices start at 0")
    return out


def label_index(value: Any, what: str = "label") -> int:
    """One label as a non-negative int (a Python or numpy number, or a one-element tensor, array or list)."""
    if isinstance(value, list | tuple):
        value = np.asarray(value, dtype=object)
    if isinstance(value, torch.Tensor | np.ndarray):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size != 1:
            raise _refuse(what, f"has shape {tuple(value.shape)}, not one number")
        first = value.reshape(-1)[0]
        value = first.item() if hasattr(first, "item") else first  # an object array holds Python values
    if isinstance(value, bool | np.bool_):
        raise _refuse(what, f"is {value!r}, a boolean")
    if isinstance(value, str | bytes):
        raise _refuse(what, f"is {value!r}, text: map each class name to its index first")
    if isinstance(value, float | np.floating):
        if not math.isfinite(value) or value != round(value):
            raise _refuse(what, f"is {float(value):g}, not a whole number")
        value = int(value)
    if not isinstance(value, int | np.integer):
        raise _refuse(what, f"is a {type(value).__name__} ({value!r})")
    if value < 0:
        raise _refuse(what, f"is {int(value)}; class indices start at 0")
    return int(value)


def check_labels_fit(
    labels: torch.Tensor | np.ndarray,
    classes: int,
    *,
    model: str,
    data: str,
    names: Sequence[str] | Mapping[int, str] | None = None,
) -> None:
    """Refuse a label the model has no logit for; ``names`` (a folder's class names by label) says where it came
    from."""
    arr = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if not arr.size:
        return
    top, low = int(arr.max()), int(arr.min())
    if low < 0:
        raise _refuse(f"the labels of {data}", f"contain {low}")
    if top >= classes:
        name = None
        if isinstance(names, Mapping):
            name = names.get(top)
        elif names is not None and top < len(names):
            name = names[top]
        where = f" (class folder {name!r})" if name is not None else ""
        raise RobfiltError(
            f"the labels of {data} include {top}{where}, but model {model} returns {classes} classes, so its class "
            f"indices are 0..{classes - 1}; drop those examples or use data labelled for this model."
        )


def pool_labels(source: Any, ids: torch.Tensor) -> torch.Tensor:
    """The labels to check against the model: the whole pool's when the source knows them without decoding
    (tensors, folders, hf-disk), so the verdict does not depend on which examples the seed selected; otherwise
    (a user ``Dataset``) those of the selected examples ``ids``."""
    for attr in ("y", "labels"):
        known = getattr(source, attr, None)
        if isinstance(known, torch.Tensor | np.ndarray):
            return torch.as_tensor(known)
    return torch.cat([source.take(ids[i : i + 256])[1] for i in range(0, len(ids), 256)]) if len(ids) else ids


def check_positions_are_classes(names: Sequence[str], classes: int, *, model: str, data: str) -> None:
    """A folder whose class folders are not named by class index is labelled by the positions of its sorted class
    folders (torchvision's ``ImageFolder`` rule; folders named ``0``, ``3``, ``10`` are labelled by their numbers
    instead: :func:`.class_map.index_name_map`).

    With a folder per class of the model, that is the usual contract. With fewer folders than classes (a subset)
    the positions would silently mislabel every image (``cat``, ``n01440764``), so it is refused (a class map
    gives such a folder its labels: :mod:`.class_map`).
    """
    if len(names) >= classes:
        return
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    raise RobfiltError(
        f"{data} has {len(names)} class folders ({shown}) but model {model} returns {classes} classes, so a folder's "
        f"position is not its class index; pass {flag('class_map')} FILE (folder name -> class index), name the "
        f"folders by their class indices (0, 3, 7, ...) or give one folder per class of the model."
    )


__all__ = ["check_labels_fit", "check_positions_are_classes", "label_index", "label_indices", "pool_labels"]
