"""Where this process stands among ranks, read from the environment alone: torchrun's layout, the collective
timeout, and the context a run computes in (:class:`DistContext`).

Apart from :mod:`.distributed` because none of it needs torch: the command line decides how many worker processes
to start (:mod:`.workers`) and starts them before it imports torch itself, so the two imports overlap.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import RobfiltError

TIMEOUT_ENV = "ROBFILT_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT_MIN = 180  # rank 0 runs the sanity checks while the others wait at a barrier: allow for that


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank, the number of ranks, its GPU index on the node, the backend."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    #: the store of the ranks robfilt started itself (their work queue and progress counts); None under torchrun
    store: Any = field(default=None, compare=False, repr=False)
    #: the pool's job number: this run's keys in ``store`` start with it
    job: int = 0
    #: in the pool's parent: raises when a worker process has died (rank 0 calls it while it waits for them)
    watch: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def pooled(self) -> bool:
        """Ranks robfilt started itself (``--workers``), not torchrun's."""
        return self.enabled and self.store is not None

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RobfiltError(f"environment variable {name}={raw!r} is not an integer; launch with torchrun.") from None


def env_context() -> DistContext:
    """The rank layout torchrun put into the environment (a single process when it is absent)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", 0)
    if world < 1 or not 0 <= rank < world or local < 0:
        raise RobfiltError(f"inconsistent torchrun environment: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}.")
    return DistContext(rank=rank, world_size=world, local_rank=local)


def group_timeout() -> _dt.timedelta:
    """How long a rank waits in a collective step (``ROBFILT_DIST_TIMEOUT_MIN``)."""
    return _timeout()


def _timeout() -> _dt.timedelta:
    minutes = _env_int(TIMEOUT_ENV, DEFAULT_TIMEOUT_MIN)
    if minutes <= 0:
        raise RobfiltError(f"{TIMEOUT_ENV} must be a positive number of minutes, got {minutes}.")
    return _dt.timedelta(minutes=minutes)


__all__ = ["DEFAULT_TIMEOUT_MIN", "TIMEOUT_ENV", "DistContext", "env_context", "group_timeout"]
