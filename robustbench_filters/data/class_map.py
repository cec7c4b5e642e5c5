"""Class maps: which class of the model each class folder of an ``imagefolder:`` holds.

Class folders all named by class index (``0``, ``2``, ``10``) are labelled by their numbers, never by their
positions among the sorted names (``10`` sorts before ``2``); a folder mixing numbers and other names is refused,
since neither rule would label every folder as its name says. Other names are labelled, by default, by the
positions of the sorted class folders (torchvision's ``ImageFolder`` rule), and the run's manifest records which
folder got which index. That is the right contract for a folder with one sub-folder per class of the model, and
a silent mislabelling for a subset: five Imagenette folders read by an ImageNet model would be classes 0-4
(tench, goldfish, ...), whatever they hold. Two ways give a subset its true labels:

- **ImageNet wnids, automatically.** When every class folder is named by a WordNet id (``n01440764``), as
  ImageNet and its subsets (Imagenette, Imagewoof) ship them, and the model returns 1000 classes, each folder's
  label is its wnid's ImageNet-1k index, read from the synset list timm bundles
  (``timm/data/_info/imagenet_synsets.txt``, the order of ImageNet-1k's class indices; nothing downloads). A
  wnid that is not an ImageNet-1k synset is refused by name. With a model of another class count, wnid folders
  keep the positional rule only when there is a folder per class; a subset is refused.
- **A class-map file** (``class_map``): folder name -> class index, for everything else (and to override the
  wnid rule). Two formats, chosen by the file's extension:

  - ``.json``: one object, ``{"cat": 281, "dog": 207}``;
  - ``.csv`` / ``.tsv``: two columns, name and index, one folder per line, no header (``cat,281``).

  Anything ambiguous is refused in one line: a name given twice, an index that is not a whole number written
  as one (``3.0``, ``"3"``, ``-1``, ``true``), an empty map, a class folder the map has no entry for, and (once the
  model's class count is known) an index the model has no logit for. Entries for folders that are absent are
  fine: one map serves a data set and its subsets. Two folders may share an index (they are then one class).

The mapping used is recorded in the run's manifest (``ClassMap.record``: the map's origin and sha256; positional
labels as the map itself) and shown once in the output; the labels it gives enter the digest of the selected
examples, so a run with another map is another run.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import RobfiltError
from ..core.io import expand_user
from ..core.surface import flag
from ..core.textfiles import decode

log = logging.getLogger(__name__)

#: a WordNet noun id, as ImageNet names its class folders
WNID = re.compile(r"n\d{8}")
IMAGENET_CLASSES = 1000
#: where timm keeps ImageNet-1k's synsets, in class-index order (read with pkgutil, never downloaded)
TIMM_SYNSETS = ("timm.data", "_info/imagenet_synsets.txt")
AUTO_WNID = "imagenet-1k wnids"
#: the origin of the labels of a folder whose class folders are all named by class index (``0``, ``2``, ``10``)
AUTO_INDEX = "folder names are class indices"
#: the origin of positional labels (torchvision's rule: the positions of the sorted class-folder names)
POSITIONS = "sorted folder names"
#: no model has more classes; a larger "index" is a typo, and would not fit the int64 labels either
MAX_CLASS_INDEX = 2**31 - 1
FORMATS = (".json", ".csv", ".tsv")
MAX_BYTES = 16 << 20  # a map of folder names is small; a larger file is not one


@dataclass(frozen=True)
class ClassMap:
    """Folder name -> class index, and where the mapping came from (a file, or timm's ImageNet-1k synsets)."""

    indices: Mapping[str, int]
    #: the file's path as given, or :data:`AUTO_WNID`
    origin: str
    #: sha256 of the file (or of timm's synset list) the mapping was read from
    sha256: str

    @property
    def auto(self) -> bool:
        return self.origin in (AUTO_WNID, AUTO_INDEX)

    def what(self) -> str:
        """How messages name this map."""
        if self.origin == AUTO_INDEX:
            return "the folder names (class indices)"
        return "the ImageNet-1k wnid map" if self.auto else f"{flag('class_map')} {self.origin}"

    def record(self) -> dict[str, str]:
        """What the run's manifest keeps: which mapping and the digest of what it was read from."""
        return {"class_map": self.origin, "sha256": self.sha256}

    def labels_of(self, names: Sequence[str], where: str) -> list[int]:
        """Each class folder's index; a folder the map does not name is refused (its images would have no label)."""
        missing = [n for n in names if n not in self.indices]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise RobfiltError(
                f"{self.what()} has no entry for class folder {missing[0]!r}{more} of {where}; add it to the map "
                "or remove the folder."
            )
        return [self.indices[n] for n in names]


def _index(value: Any, name: str, where: str) -> int:
    """A class index: a non-negative whole number written as one (no bools, floats or quoted numbers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RobfiltError(
            f"{where} maps {name!r} to {value!r}, which is not a class index; write a whole number such as 3."
        )
    if value < 0:
        raise RobfiltError(f"{where} maps {name!r} to {value}; class indices start at 0.")
    if value > MAX_CLASS_INDEX:
        raise RobfiltError(
            f"{where} maps {name!r} to {value}, which is no model's class index (at most {MAX_CLASS_INDEX})."
        )
    return value


def _from_json(text: str, where: str) -> dict[str, int]:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise RobfiltError(f"{where} names {key!r} twice; give each folder one index.")
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise RobfiltError(f"{where} is not valid JSON ({exc.msg}, line {exc.lineno}).") from None
    if not isinstance(data, dict):
        raise RobfiltError(f'{where} must hold one JSON object of folder name -> class index, e.g. {{"cat": 281}}.')
    return {key: _index(value, key, where) for key, value in data.items()}


def _from_table(text: str, delimiter: str, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    sep = "a comma" if delimiter == "," else "a tab"
    for line, row in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), 1):
        if not row or not "".join(row).strip():
            continue  # a blank line
        if len(row) != 2:
            raise RobfiltError(
                f"{where} line {line} has {len(row)} fields; each line is a folder name and its class index, "
                f"separated by {sep}."
            )
        name, index = row[0].strip(), row[1].strip()
        if not name:
            raise RobfiltError(f"{where} line {line} has an empty folder name.")
        if name in out:
            raise RobfiltError(f"{where} names {name!r} twice (line {line}); give each folder one index.")
        if not index.isascii() or not index.isdigit():
            header = " (the file has no header row)" if line == 1 else ""
            raise RobfiltError(
                f"{where} line {line} maps {name!r} to {index!r}, which is not a class index{header}; write a whole "
                "number such as 3."
            )
        out[name] = _index(int(index), name, where)
    return out


def read_class_map(path: str | os.PathLike[str]) -> ClassMap:
    """Read a class-map file (``.json``, ``.csv`` or ``.tsv``; the module docstring gives the rules)."""
    given = str(path)
    where = f"{flag('class_map')} {given}"
    file = expand_user(given)
    suffix = file.suffix.lower()
    if suffix not in FORMATS:
        raise RobfiltError(
            f"{where}: unknown format {suffix or '(no extension)'!r}; give a .json object of folder name -> class "
            "index, or a two-column .csv / .tsv file."
        )
    try:
        if file.stat().st_size > MAX_BYTES:
            raise RobfiltError(f"{where} is larger than {MAX_BYTES >> 20} MiB; a class map is a list of folder names.")
        raw = file.read_bytes()
    except OSError as exc:
        raise RobfiltError(f"{where} cannot be read ({exc.strerror or exc}); pass an existing map file.") from None
    try:
        text = decode(raw)
    except UnicodeDecodeError:
        raise RobfiltError(f"{where} is not UTF-8 text.") from None
    indices = (
        _from_json(text, where) if suffix == ".json" else _from_table(text, "," if suffix == ".csv" else "\t", where)
    )
    if not indices:
        raise RobfiltError(f"{where} maps no folder; give one entry (folder name -> class index) per class folder.")
    return ClassMap(indices, given, hashlib.sha256(raw).hexdigest())


@functools.cache
def _imagenet_synsets() -> tuple[tuple[str, ...], str]:
    """ImageNet-1k's wnids in class-index order, and the sha256 of the file they come from (timm's own copy)."""
    import pkgutil

    raw = pkgutil.get_data(*TIMM_SYNSETS)
    if raw is None:  # pragma: no cover - timm always ships the file
        raise RobfiltError("timm's ImageNet synset list is missing; reinstall timm or pass a class_map file.")
    synsets = tuple(raw.decode("utf-8").split())
    if len(synsets) != IMAGENET_CLASSES or len(set(synsets)) != IMAGENET_CLASSES:  # pragma: no cover
        raise RobfiltError(f"timm's ImageNet synset list holds {len(synsets)} names, not 1000; reinstall timm.")
    return synsets, hashlib.sha256(raw).hexdigest()


def all_wnids(names: Sequence[str]) -> bool:
    """True when every class folder is named by a WordNet id (``n`` and 8 digits)."""
    return bool(names) and all(WNID.fullmatch(n) for n in names)


def imagenet_class_map(names: Sequence[str], where: str) -> ClassMap:
    """The ImageNet-1k indices of the wnid folders ``names``; a wnid outside ImageNet-1k is refused by name."""
    synsets, sha = _imagenet_synsets()
    index = {wnid: i for i, wnid in enumerate(synsets)}
    foreign = [n for n in names if n not in index]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise RobfiltError(
            f"class folder {foreign[0]!r}{more} of {where} is not an ImageNet-1k synset, so it has no ImageNet-1k "
            f"class index; remove that folder or pass {flag('class_map')} FILE (folder name -> class index)."
        )
    return ClassMap({n: index[n] for n in names}, AUTO_WNID, sha)


def _shown(names: Sequence[str], k: int = 3) -> str:
    return ", ".join(names[:k]) + (", ..." if len(names) > k else "")


def is_index_name(name: str) -> bool:
    """A class-folder name that is a class index: ASCII digits only (``0``, ``10``, ``007``; not ``-1``, ``1.0``)."""
    return name.isascii() and name.isdigit()


def index_name_map(names: Sequence[str], where: str) -> ClassMap | None:
    """The labels class-folder names give by themselves: when every name is a class index (``0`` ... ``10``), each
    folder's label is its number, never its position among the sorted names (``10`` sorts before ``2``). None when
    no name is a number (positions then apply). A mix of numbers and other names is refused: neither rule would
    label every folder as its name says.
    """
    numbers = [n for n in names if is_index_name(n)]
    if not numbers:
        return None
    if len(numbers) < len(names):
        others = [n for n in names if not is_index_name(n)]
        raise RobfiltError(
            f"the class folders of {where} mix class indices ({_shown(numbers)}) and names ({_shown(others)}), so "
            f"neither the numbers nor the sorted names label every folder; name every class folder by its class "
            f"index, or pass {flag('class_map')} FILE (folder name -> class index)."
        )
    seen: dict[int, str] = {}
    for name in names:
        value = int(name)
        if value > MAX_CLASS_INDEX:
            raise RobfiltError(
                f"class folder {name!r} of {where} is no model's class index (at most {MAX_CLASS_INDEX}); rename or "
                f"remove it, or pass {flag('class_map')} FILE (folder name -> class index)."
            )
        if value in seen:
            raise RobfiltError(
                f"class folders {seen[value]!r} and {name!r} of {where} both name class {value}; merge them into one "
                "folder or rename one."
            )
        seen[value] = name
    digest = hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest()
    return ClassMap({n: int(n) for n in names}, AUTO_INDEX, digest)


def positions_record(names: Sequence[str]) -> dict[str, Any]:
    """The manifest's record of positional labels: which class folder got which index (sorted names)."""
    return {"class_map": POSITIONS, "labels": {name: i for i, name in enumerate(names)}}


def describe_labels(record: dict[str, Any], names: Sequence[str], where: str) -> str:
    """One line saying where a folder's labels came from, for the output (shown once per run)."""
    origin = record["class_map"]
    if origin == POSITIONS:
        pairs = [f"{n}={i}" for i, n in enumerate(names)]
        return (
            f"labels of {where}: the positions of the sorted class-folder names ({_shown(pairs, 5)}), recorded in "
            f"the run's manifest; pass {flag('class_map')} FILE to give others"
        )
    if origin == AUTO_INDEX:
        by_value = sorted(names, key=int)
        return f"labels of {where}: the class folders are named by class index ({_shown(by_value, 5)})"
    if origin == AUTO_WNID:
        return f"labels of {where}: the ImageNet-1k indices of the wnid folders ({_shown(list(names))})"
    return f"labels of {where}: from {flag('class_map')} {origin}"


def _wnid_refusal(data: str, names: Sequence[str], why: str, fix: str = "") -> RobfiltError:
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return RobfiltError(
        f"the class folders of {data} are ImageNet wnids ({shown}), {why}; {fix}pass {flag('class_map')} FILE "
        "(folder name -> class index)."
    )


def settle_folder_labels(
    source: Any, classes: Sequence[int], models: Sequence[str], data: str
) -> dict[str, str] | None:
    """Fix a folder's labels once every model's class count (``classes``) is known, and refuse what would mislabel.

    A class map given by file, or the folders' own class-index names (:func:`index_name_map`), was applied when
    the folder was opened; here its indices must be classes of every model. Without one, wnid folders read by
    1000-class models get ImageNet-1k's indices; otherwise positions are labels only where they are class
    indices (:func:`.labels.check_positions_are_classes`). Returns the manifest record of the labels' origin
    (:func:`positions_record` for positions), and logs it once per folder.
    """
    from .labels import check_labels_fit, check_positions_are_classes

    names = list(source.classes)
    if source.class_map is None and all_wnids(names):
        imagenet = [k == IMAGENET_CLASSES for k in classes]
        if all(imagenet):
            source.apply_class_map(imagenet_class_map(names, data))
        elif any(imagenet):
            other, k = next((m, k) for m, k in zip(models, classes, strict=True) if k != IMAGENET_CLASSES)
            raise _wnid_refusal(
                data, names, f"read as ImageNet-1k indices by the 1000-class models but by position by model "
                f"{other} ({k} classes)", "run them separately, or "
            )  # fmt: skip
        else:
            for model, k in zip(models, classes, strict=True):
                if len(names) < k:
                    raise _wnid_refusal(
                        data, names, f"whose ImageNet-1k indices fit only a 1000-class model, and model {model} "
                        f"returns {k} classes, so a folder's position is not its class index"
                    )  # fmt: skip
    cmap = source.class_map
    for model, k in zip(models, classes, strict=True):
        if cmap is None:
            check_positions_are_classes(names, k, model=model, data=data)
        else:
            for name, index in zip(names, cmap.labels_of(names, data), strict=True):
                if index >= k and cmap.origin != AUTO_INDEX:  # a folder named 10: check_labels_fit names it
                    raise RobfiltError(
                        f"{cmap.what()} maps class folder {name!r} to {index}, but model {model} returns {k} "
                        f"classes (indices 0..{k - 1}); fix the map or use a model with those classes."
                    )
        check_labels_fit(source.labels, k, model=model, data=data, names=source.folder_of_label)
    record = positions_record(names) if cmap is None else cmap.record()
    if not getattr(source, "labels_shown", False):
        log.info("%s", describe_labels(record, names, data))
        source.labels_shown = True
    return record


__all__ = [
    "AUTO_INDEX",
    "AUTO_WNID",
    "IMAGENET_CLASSES",
    "POSITIONS",
    "ClassMap",
    "all_wnids",
    "describe_labels",
    "imagenet_class_map",
    "index_name_map",
    "is_index_name",
    "positions_record",
    "read_class_map",
    "settle_folder_labels",
]
