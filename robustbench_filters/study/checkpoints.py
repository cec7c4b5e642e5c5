"""Train-or-reuse: a study checkpoint is reused only when its card proves it came from the same recipe.

A card (``card.json``) records the model name and size, the full recipe, the data spec, the data checksum and
the seed (see :mod:`robustbench_filters.train.loop`). A candidate folder is reused when all of these equal what the
study would train; anything else (another recipe, other data, another seed, a half-written folder) is not
trusted and the model is trained again. A killed training resumes from its saved state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..core.errors import CheckpointError
from ..core.family import Family
from ..core.progress import ProgressHook
from ..models.checkpoint import CARD, WEIGHTS, read_card
from ..models.registry import parse_name
from ..train.loop import Recipe, card_recipe_value, train
from ..train.state import STATE_DIR
from .plan import StudyPlan, recipe_tag

log = logging.getLogger(__name__)


@dataclass
class CheckpointInfo:
    """Where a model's weights are, their hash, and whether they were trained now or reused.

    ``wall_time_s`` is what this call spent (0 for a reused checkpoint); ``card_wall_s`` is the training time the
    checkpoint's card records, so a study that reuses weights can still say what they cost (None: not recorded)."""

    model: str
    seed: int
    path: Path
    weights_sha256: str
    trained: bool
    wall_time_s: float
    metrics: dict
    card_wall_s: float | None = None
    #: not on disk yet: the manifest's record stands in for it until a measurement that must run needs the weights
    deferred: bool = False


def _seconds(value: object) -> float | None:
    """A recorded number of seconds (None: absent or not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _card_wall_s(card: dict) -> float | None:
    return _seconds((card.get("recipe") or {}).get("wall_time_s"))


@cache
def data_checksum(family: Family, data: str) -> str:
    """The checksum ``train`` writes into the card for this training data (computed the same way)."""
    if family is Family.IMAGE:
        from ..data import load_images

        return load_images(data, split="train").checksum
    from ..data import load_text

    return hashlib.sha256(load_text(data, split="train").encode()).hexdigest()


def card_mismatch(card: dict, model: str, size: str, data: str, checksum: str, seed: int, recipe: Recipe) -> str | None:
    """Why ``card`` does not describe the checkpoint the study would train (None: it does)."""
    rc = card.get("recipe") or {}
    if card.get("name") != model or card.get("size") != size:
        return f"model {card.get('name')} ({card.get('size')})"
    if rc.get("seed") != seed:
        return f"seed {rc.get('seed')}"
    if rc.get("data") != data or rc.get("data_checksum") != checksum:
        return "training data"
    want = json.loads(json.dumps(dataclasses.asdict(recipe)))
    diff = sorted(k for k, v in want.items() if card_recipe_value(rc, k) != v)
    return f"recipe fields {diff}" if diff else None


def _candidates(target: Path, reuse_dirs: Sequence[Path]) -> Iterable[Path]:
    yield target
    for root in reuse_dirs:
        root = Path(root)
        if (root / CARD).exists():
            yield root
        if root.is_dir():
            yield from sorted(p for p in root.iterdir() if (p / CARD).exists())


def find_reusable(plan: StudyPlan, model: str, seed: int, target: Path, reuse_dirs: Sequence[Path]) -> Path | None:
    """The first candidate folder whose card matches the study's recipe, data checksum and seed."""
    family = parse_name(model)[0]
    checksum = data_checksum(family, plan.data(model))
    for folder in _candidates(target, reuse_dirs):
        if not (folder / WEIGHTS).exists() or not (folder / CARD).exists():
            continue
        try:
            card = read_card(folder / CARD)
        except CheckpointError as exc:
            log.warning("not reusing %s: %s", folder, exc)
            continue
        why = card_mismatch(card, model, plan.size, plan.data(model), checksum, seed, plan.recipe(model))
        if why is None:
            return folder
        if folder == target:
            log.warning("%s was trained with another %s; training it again", folder, why)
    return None


def checkpoint_folder(plan: StudyPlan, model: str, seed: int, root: Path) -> Path:
    """Where the study trains ``model`` for ``seed``: named by what determines the weights (:func:`recipe_tag`)."""
    return root / f"{model}-{plan.size}-s{seed}-{recipe_tag(plan, model)}"


def deferred_checkpoint(
    plan: StudyPlan, model: str, seed: int, root: Path, record: dict | None
) -> CheckpointInfo | None:
    """The manifest's record of a checkpoint whose folder is gone (a clone: checkpoints are not committed).

    A resumed study need not retrain weights that no unfinished measurement uses: the record's hash is what the
    finished measurements were made with, so their input fingerprints still match. Only a record of this very
    folder (same recipe tag) with a hash stands in, whether this study trained it or found it there from an earlier
    call (a study resumed after its checkpoints were made records them as reused); the weights are trained when a
    piece that must run needs them (and a different hash then re-measures every piece that used them)."""
    target = checkpoint_folder(plan, model, seed, root)
    if target.exists() or not isinstance(record, dict) or record.get("status") != "done":
        return None
    sha = record.get("weights_sha256")
    if not isinstance(sha, str) or not sha:
        return None
    if record.get("path") != str(target.relative_to(root.parent)):
        return None
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    return CheckpointInfo(
        model, seed, target, sha, False, 0.0, metrics, _seconds(record.get("card_wall_s")), deferred=True
    )


def ensure_checkpoint(
    plan: StudyPlan,
    model: str,
    seed: int,
    root: Path,
    reuse_dirs: Sequence[Path] = (),
    progress: ProgressHook | None = None,
) -> CheckpointInfo:
    """Reuse a matching checkpoint or train one into ``root/<model>-<size>-s<seed>-<recipe tag>``."""
    target = checkpoint_folder(plan, model, seed, root)
    found = find_reusable(plan, model, seed, target, reuse_dirs)
    if found is not None:
        card = json.loads((found / CARD).read_text())
        log.info("reusing %s (seed %d) from %s", model, seed, found)
        return CheckpointInfo(
            model, seed, found, card["weights_sha256"], False, 0.0, card.get("metrics", {}), _card_wall_s(card)
        )
    t0 = time.perf_counter()
    resume = (target / STATE_DIR).exists()
    log.info("%s %s (seed %d) into %s", "resuming" if resume else "training", model, seed, target)
    train(
        model,
        plan.size,
        data=plan.data(model),
        recipe=dataclasses.replace(plan.recipe(model)),
        seed=seed,
        out=target,
        resume=resume,
        overwrite=not resume,
        command=f"robfilt study (plan {plan.name}, seed {seed})",
        progress=progress,
    )
    return trained_checkpoint(plan, model, seed, root, time.perf_counter() - t0)


def trained_checkpoint(
    plan: StudyPlan, model: str, seed: int, root: Path, wall_time_s: float | None = None
) -> CheckpointInfo:
    """The checkpoint just trained into the study's folder, read from its card (``wall_time_s`` None: the card's
    training time, for one a worker process trained)."""
    target = checkpoint_folder(plan, model, seed, root)
    card = json.loads((target / CARD).read_text())
    wall = _card_wall_s(card) if wall_time_s is None else wall_time_s
    return CheckpointInfo(
        model, seed, target, card["weights_sha256"], True, wall or 0.0, card.get("metrics", {}), _card_wall_s(card)
    )
