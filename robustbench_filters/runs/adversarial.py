"""Adversarial examples in a run folder (``--save-adversarial``): what is stored, in which file, how it is read.

One safetensors file per attack unit, ``adversarial/<unit key>.safetensors`` beside the unit's
``parts/<unit key>.parquet``. The unit is the resume and sharding granularity, so the file goes wherever its part
goes: the rank that computes the unit writes it, before the part's hash record (a kill in between leaves a unit
that is recomputed), and its sha256 is recorded in the part's sidecar and, when the run finishes, in the manifest
(``adversarial``). Clean units store nothing. A file holds

    x_adv       float32 (m, *input shape)  the distinct points the eps cascade reached for the unit's examples
    example_id  int64 (n,)                 the unit's examples (ids into the data's test split), in row order
    eps         float64 (k,)               the run's eps grid, ascending
    index       int64 (k, n)               the x_adv row of example j at eps i

and one metadata entry, ``robfilt``: sorted JSON ``{attack, format, model, norm, version}`` (one key, because
safetensors writes several in a random order and the bytes must not depend on the process).

What is stored per eps is the point the cascade holds for each example there: the attack's result where the
example was attacked at that eps (fooled or not: the rows say which), the point that broke it at a smaller eps
otherwise (an adversarial example found at a smaller eps lies inside every larger ball, so it counts there too),
and the clean image where nothing attacked it (the model got it wrong unattacked, or eps is 0). Each point is
stored once and ``index`` sends every eps that shares it to the same row, so an example broken at the first eps
costs one image, not k. Nothing here is pickled; reading checks each file's sha256 before a tensor is trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core import io as _io
from ..core.errors import RobfiltError, RunStateError
from ..core.surface import switched
from .units import Unit

DIR = "adversarial"
SUFFIX = ".safetensors"
FORMAT = "robfilt-adversarial"
VERSION = 1
META_KEY = "robfilt"


def file_for(folder: Path, key: str) -> Path:
    """The adversarial file of unit ``key`` in run folder ``folder``."""
    return folder / DIR / f"{key}{SUFFIX}"


class AdversarialTrace:
    """The points the eps cascade reaches for one batch, eps by eps, each stored once (see the module docstring).

    The cascade calls :meth:`record` after each eps with its current points and the examples it attacked there.
    Everything stays on the model's device until :meth:`tensors` copies it to the host once.
    """

    def __init__(self) -> None:
        self._points: list[torch.Tensor] = []
        self._index: list[torch.Tensor] = []
        self._count = 0

    def record(self, x_cur: torch.Tensor, attacked: torch.Tensor | None) -> None:
        """Eps number ``len(self)``: ``x_cur`` holds every example's point, ``attacked`` the examples attacked."""
        n = len(x_cur)
        if not self._index:  # the first eps: every example's point (the clean image where nothing attacked it)
            self._points.append(x_cur.detach().clone())
            self._index.append(torch.arange(n, device=x_cur.device))
            self._count = n
            return
        index = self._index[-1].clone()
        if attacked is not None and len(attacked):
            index[attacked] = self._count + torch.arange(len(attacked), device=x_cur.device)
            self._points.append(x_cur[attacked].detach().clone())
            self._count += len(attacked)
        self._index.append(index)

    def __len__(self) -> int:
        return len(self._index)

    def at(self, k: int) -> torch.Tensor:
        """Every example's point at eps number ``k`` (on the model's device)."""
        return torch.cat(self._points)[self._index[k]]

    def tensors(
        self, ids: torch.Tensor, grid: Sequence[float], *, model: str, attack: str, norm: str
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The file's tensors and metadata (host copies), ready for :func:`write`."""
        if len(self) != len(grid):
            raise RunStateError(f"the trace holds {len(self)} eps for a grid of {len(grid)}; this is a bug.")
        tensors = {
            "x_adv": torch.cat(self._points).detach().float().cpu().contiguous(),
            "example_id": torch.as_tensor(ids).detach().to(torch.int64).cpu().contiguous(),
            "eps": torch.tensor([float(e) for e in grid], dtype=torch.float64),
            "index": torch.stack(self._index).to(torch.int64).cpu().contiguous(),
        }
        meta = {"format": FORMAT, "version": VERSION, "model": model, "attack": attack, "norm": norm}
        return tensors, {META_KEY: json.dumps(meta, sort_keys=True)}


def write(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """Write one adversarial file atomically; returns its sha256."""
    from safetensors.torch import save

    blob = save(tensors, metadata=metadata)
    _io.atomic_write(path, lambda tmp: Path(tmp).write_bytes(blob))
    return _io.sha256_file(path)


def verified(folder: Path, key: str, recorded: str) -> str:
    """Resume: the recorded sha256 of unit ``key``'s file, after checking the file against it."""
    path = file_for(folder, key)
    if _io.sha256_file(path) != recorded:
        raise RunStateError(
            f"{path} does not match its recorded sha256 (edited or corrupted); remove it to recompute that unit, "
            f"then {switched('resume')}."
        )
    return recorded


def check_folder(folder: Path, planned: set[str] | None, done: set[str], saved: set[str]) -> None:
    """Resume and finish: every file in ``adversarial/`` belongs to a planned unit, and a finished unit's file is
    the one its part records (``saved``). A file of an unfinished unit is replaced when the unit is recomputed."""
    sub = folder / DIR
    if not sub.is_dir():
        return
    for path in sorted(sub.iterdir()):
        if path.name.startswith("."):
            continue  # temp files of an interrupted atomic write
        key = path.name.removesuffix(SUFFIX)
        known = path.suffix == SUFFIX and (planned is None or key in planned)
        if not known or (key in done and key not in saved):
            raise RunStateError(
                f"{path} is recorded by no unit of this run (added?); remove it, then {switched('resume')}."
            )


def verify(folder: Path, recorded: dict[str, str]) -> None:
    """A finished run: adversarial files are the only copy of their tensors, so each recorded one must exist and
    match its sha256, and no other file may sit beside them."""
    for key, digest in sorted(recorded.items()):
        path = file_for(folder, key)
        if not path.exists():
            raise RunStateError(f"{path} is missing; re-run the command with {switched('overwrite')}.")
        if _io.sha256_file(path) != digest:
            raise RunStateError(f"{path} does not match the sha256 recorded in its manifest (edited or corrupted).")
    sub = folder / DIR
    if sub.is_dir():
        for path in sorted(sub.iterdir()):
            if path.name.removesuffix(SUFFIX) not in recorded or path.suffix != SUFFIX:
                raise RunStateError(f"{path} is not a recorded adversarial file of this run (foreign or added).")


def _header(blob: bytes, path: Path) -> dict[str, Any]:
    """The robfilt metadata of a safetensors file's bytes (its 8-byte length, then the JSON header)."""
    try:
        size = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8 : 8 + size])
        meta = json.loads(header["__metadata__"][META_KEY])
    except (ValueError, KeyError, TypeError):
        raise RunStateError(
            f"{path} is not a robfilt adversarial file; re-run the command with {switched('overwrite')}."
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RunStateError(
            f"{path} is not a robfilt adversarial file; re-run the command with {switched('overwrite')}."
        )
    return meta


def read(path: Path, sha256: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The metadata and tensors of one file, after checking its bytes against ``sha256`` (read once: no window
    between the check and the use)."""
    from safetensors.torch import load

    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise RunStateError(f"{path} is missing; re-run the command with {switched('overwrite')}.") from None
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise RunStateError(f"{path} does not match the sha256 recorded in its manifest (edited or corrupted).")
    return _header(blob, path), load(blob)


def _pick(what: str, given: str | None, choices: list[str]) -> str:
    if given is None:
        if len(choices) == 1:
            return choices[0]
        raise RobfiltError(
            f"the run saved adversarial examples of several {what}s; pass {what}= one of {', '.join(choices)}."
        )
    return given


def _match_eps(eps: Any, grid: list[float]) -> int:
    shown = [f"{e:g}" for e in grid]
    if eps is None:
        if len(grid) == 1:
            return 0
        raise RobfiltError(f"the run has several eps; pass eps= one of {', '.join(shown)}.")
    if isinstance(eps, bool) or not isinstance(eps, int | float):
        raise RobfiltError(f"eps must be a number such as 8/255, got {eps!r}.")
    for k, e in enumerate(grid):
        if math.isclose(float(eps), e, rel_tol=1e-9, abs_tol=1e-12):
            return k
    raise RobfiltError(f"eps {float(eps):g} is not in this run's eps grid; pass one of {', '.join(shown)}.")


class AdversarialExamples:
    """The adversarial examples a finished run saved: read from its folder when asked (each file's hash checked
    first), or held in memory (:meth:`in_memory`, for a run whose temporary folder is about to be removed).

    ``hashes``: unit key -> sha256 (the manifest's ``adversarial``); ``labels``: the run's model labels in
    model-index order. Files are found by their unit key, so a damaged file only fails the selections it is in.
    """

    def __init__(self, folder: Path, hashes: dict[str, str], labels: Sequence[str]) -> None:
        self.folder, self.hashes, self.labels = Path(folder), dict(hashes), list(labels)
        self._memory: dict[str, tuple[dict[str, Any], dict[str, torch.Tensor]]] = {}
        self._units: dict[str, Unit] = {}
        for key in sorted(self.hashes):
            unit = Unit.from_key(key)
            if unit is None or not 0 <= unit.model < len(self.labels):
                raise RunStateError(
                    f"{file_for(self.folder, key)} is not a unit of this run; re-run with {switched('overwrite')}."
                )
            self._units[key] = unit

    @classmethod
    def from_manifest(cls, folder: Path, manifest: dict[str, Any]) -> AdversarialExamples | None:
        """The run's adversarial examples, or None when it saved none."""
        hashes = manifest.get(DIR) or {}
        labels = (manifest.get("config") or {}).get("models") or []
        return cls(folder, hashes, labels) if hashes else None

    def in_memory(self) -> AdversarialExamples:
        """Read (and verify) every file now, so nothing is read from the folder later."""
        for key in self.hashes:
            self._file(key)
        return self

    def _file(self, key: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        if key not in self._memory:
            self._memory[key] = read(file_for(self.folder, key), self.hashes[key])
        return self._memory[key]

    def select(
        self, model: str | None = None, attack: str | None = None, eps: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, x_adv)`` of one model and attack at one eps: the example ids (ascending) and their points,
        float32 on the CPU. Each argument may be left out when the run has only one value for it."""
        models = list(dict.fromkeys(self.labels[u.model] for u in self._units.values()))
        model = _pick("model", model, models)
        attacks = list(dict.fromkeys(u.part for u in self._units.values() if self.labels[u.model] == model))
        if not attacks:
            raise RobfiltError(
                f"the run saved no adversarial examples of model {model!r}; pass one of {', '.join(models)}."
            )
        attack = _pick("attack", attack, attacks)
        keys = [k for k, u in self._units.items() if self.labels[u.model] == model and u.part == attack]
        if not keys:
            raise RobfiltError(
                f"the run saved no adversarial examples of {model} under attack {attack!r}; pass one of "
                f"{', '.join(attacks)}."
            )
        ids, points = [], []
        k: int | None = None
        for key in keys:
            meta, t = self._file(key)
            if (meta.get("model"), meta.get("attack")) != (model, attack):
                raise RunStateError(
                    f"{file_for(self.folder, key)} holds another unit's examples; re-run with {switched('overwrite')}."
                )
            k = _match_eps(eps, t["eps"].tolist()) if k is None else k
            ids.append(t["example_id"])
            points.append(t["x_adv"][t["index"][k]])
        all_ids, all_points = torch.cat(ids), torch.cat(points)
        order = torch.argsort(all_ids)
        return all_ids[order], all_points[order]


__all__ = ["DIR", "AdversarialExamples", "AdversarialTrace", "file_for", "read", "write"]
