"""A training's folder and resumable state: the lock and preparation of ``--out``, and the weights, optimizer
moments and step saved atomically (safetensors + JSON, nothing pickled) so a killed training resumes where it was.

Saving writes the next state beside the last complete one and swaps them by two renames, so a kill at any moment
leaves one complete state (``train_state`` or, between the renames, ``train_state.old``).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn

from ..core.errors import RunStateError
from ..core.io import atomic_write_json, no_empty_folder_on_failure
from ..models.checkpoint import CARD
from ..runs.lock import RunLock
from ..runs.outfolder import remove_files
from ..runs.prepare import prepare_training_out

log = logging.getLogger(__name__)

STATE_DIR = "train_state"


def previous_state(state_dir: Path) -> Path:
    """Where save_state keeps the last complete state while it writes the next one."""
    return state_dir.with_name(state_dir.name + ".old")


def save_state(folder: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int, meta: dict) -> None:
    """Resumable state: weights + optimizer moments (safetensors) and scalars (JSON), written atomically."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    safetensors.torch.save_model(model, str(tmp / "model.safetensors"))
    tensors, scalars = {}, {}
    for pid, st in opt.state_dict()["state"].items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{key}"] = value.contiguous()
            else:
                scalars[f"{pid}.{key}"] = value
    safetensors.torch.save_file(tensors, str(tmp / "optimizer.safetensors"))
    atomic_write_json(tmp / "state.json", {"step": step, "scalars": scalars, **meta})
    old = previous_state(folder)
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def load_state(folder: Path, model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    safetensors.torch.load_model(model, str(folder / "model.safetensors"))
    meta = json.loads((folder / "state.json").read_text())
    tensors = safetensors.torch.load_file(str(folder / "optimizer.safetensors"))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    for key, value in meta["scalars"].items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    sd = opt.state_dict()
    sd["state"] = state
    opt.load_state_dict(sd)
    return meta


@contextmanager
def training_folder(out: Path, resume: bool, overwrite: bool) -> Iterator[dict[str, Any] | None]:
    """``--out`` prepared and locked for a training (an earlier training's own files removed, nothing else); yields
    the card of a finished training that ``--resume`` found there (nothing left to do), else None. A training
    refused before it wrote anything (its data or starting weights cannot be read) leaves no --out behind."""
    with no_empty_folder_on_failure(out):
        replaced = prepare_training_out(out, resume, overwrite, STATE_DIR)
        lock = RunLock(out)
        lock.acquire()
        try:
            remove_files(out, replaced)
            finished = json.loads((out / CARD).read_text()) if resume and finished_training(out) else None
            if finished is not None:
                log.info("%s is already trained; nothing to resume", out)
            yield finished
        finally:
            lock.release()


def check_same_training(out: Path, recorded: Mapping[str, Any], wanted: Mapping[str, Any], finished: bool) -> None:
    """Refuse to continue, or to answer with, a training made with other settings than the ones asked for.

    ``--resume`` on a finished training would otherwise print "nothing to resume" and the old metrics, measured
    under the old recipe (a PGD accuracy at the old eps), as if they answered the new command. Every setting in
    ``wanted`` is compared with what the folder ``recorded`` (card or saved state), as JSON values.
    """
    differ = [k for k in wanted if _as_json(recorded.get(k)) != _as_json(wanted[k])]
    if not differ:
        return
    shown = "; ".join(f"{k} {_as_json(recorded.get(k))} there, {_as_json(wanted[k])} here" for k in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    what = "a finished training" if finished else "an interrupted training"
    raise RunStateError(
        f"--out {out} holds {what} made with other settings ({shown}{more}); use --overwrite to train again, "
        "or another --out."
    )


def _as_json(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def finished_training(out: Path) -> bool:
    """A card and no training state (current or the previous one kept while saving): nothing left to resume."""
    state_dir = out / STATE_DIR
    return (out / CARD).exists() and not state_dir.exists() and not previous_state(state_dir).exists()
