"""The study's trainings shared by the worker pool: every core trains, and the weights do not depend on how many.

A study trains each of a seed's four variants before it measures them, and those trainings are independent units.
In one process they run one after another on one torch thread (about two minutes each for the micro DeiTs), while
the other cores wait. Inside a pool (``robfilt study --workers N``, by default every usable core) each rank takes
the next untrained checkpoint from the pool's queue and trains it with one thread, as one process would: training
seeds from the recipe and the seed alone, so a checkpoint trained by a worker is the same file, byte for byte, as
one trained alone (a test holds this).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..core import distributed
from ..core.progress import ProgressHook
from ..core.workers import current
from ..core.workqueue import WorkQueue
from .checkpoints import checkpoint_folder, ensure_checkpoint, find_reusable
from .plan import StudyPlan

log = logging.getLogger(__name__)

#: a (model, seed) checkpoint the study needs
Unit = tuple[str, int]


def untrained(plan: StudyPlan, units: Sequence[Unit], root: Path, reuse_dirs: Sequence[Path]) -> list[Unit]:
    """The units no matching checkpoint exists for yet (in ``root`` or a reuse folder)."""
    return [
        (m, s) for m, s in units if find_reusable(plan, m, s, checkpoint_folder(plan, m, s, root), reuse_dirs) is None
    ]


def train_shared(
    plan: StudyPlan, units: Sequence[Unit], root: Path, reuse_dirs: Sequence[Path], progress: ProgressHook | None
) -> list[Unit]:
    """Train ``units`` on the pool's ranks when a pool of several processes is open and more than one needs
    training; returns what was trained this way (the caller reads those from their cards, as trained now). Outside a
    pool, or for a single unit, nothing happens here: the caller reuses or trains in order."""
    pool = current()
    if pool is None or pool.size < 2:
        return []
    todo = untrained(plan, units, root, reuse_dirs)
    if len(todo) < 2:
        return []
    log.info("training %d checkpoints on %d processes", len(todo), pool.size)
    pool.call(_train_on_rank, plan, todo, root, list(reuse_dirs), local={"progress": progress})
    return todo


def _train_on_rank(
    plan: StudyPlan, units: list[Unit], root: Path, reuse_dirs: list[Path], progress: ProgressHook | None = None
) -> None:
    """One rank's share: claim the next unit from the queue until none is left (rank 0 then waits for the rest)."""
    ctx = distributed.init()
    queue = WorkQueue(ctx)
    try:
        for model, seed in queue.units(units):
            ensure_checkpoint(plan, model, seed, root, reuse_dirs, progress if ctx.is_primary else None)
    except KeyboardInterrupt:
        raise  # Ctrl-C or SIGTERM: the pool ends every rank; the store may be gone
    except BaseException:
        queue.abort()  # the others take no further unit
        queue.finish()
        raise
    queue.finish()
    if ctx.is_primary:
        queue.wait_all(lambda: None)


__all__ = ["Unit", "train_shared", "untrained"]
