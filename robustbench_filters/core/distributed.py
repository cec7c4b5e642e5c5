"""Distributed evaluation on torch.distributed: torchrun detection, the process group, sharding, rank agreement.

Why this shape: every robfilt run is already a list of deterministic units (model x attack x batch, or model x
batch for Lipschitz) whose rows do not depend on which process computes them, because each unit is seeded from
its own identity. Scaling out is then only a question of *who* computes which unit. Ranks take whole units
round-robin (:func:`shard`), write their own part files into the shared run folder, and rank 0 merges them into
``rows.parquet`` and ``summary.json``. Sharding whole units, never examples, keeps every batch, and so every
per-batch seed, identical to a one-process run: the merged rows are the same bytes for any world size.

No tensors cross ranks. The collectives carry small Python objects (errors), so gloo on CPUs and NCCL on GPUs
both serve. Every collective step goes through :func:`all_or_none`: a rank that fails makes every rank raise,
so no rank waits forever on a barrier.

torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (plus the rendezvous variables). Without them
everything here is a no-op and robfilt runs as one process.

robfilt also starts ranks itself (``--workers``, :mod:`.workers`): the same process group, over gloo, with a store
the ranks share. Those runs are *pooled* (:attr:`DistContext.pooled`): the ranks take units from a shared queue
(:mod:`.workqueue`) instead of fixed shards, and a failure reaches the caller as the very exception one process
would have raised (the workers are an implementation detail, so no "rank N" in the message).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import pickle
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from . import errors
from .errors import RobfiltError
from .launch import DistContext, env_context, group_timeout
from .surface import flag, given

log = logging.getLogger(__name__)

T = TypeVar("T")
W = TypeVar("W")


def backend_for(device: str) -> str:
    """NCCL for GPU ranks, gloo for CPU ranks (the only backends the collectives here need)."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


_POOLED: DistContext | None = None


@contextlib.contextmanager
def pooled(ctx: DistContext) -> Iterator[None]:
    """Runs inside this block are rank ``ctx.rank`` of a pool robfilt started (:mod:`.workers` sets it per job)."""
    global _POOLED
    before, _POOLED = _POOLED, ctx
    try:
        yield
    finally:
        _POOLED = before


def init(device: str = "cpu") -> DistContext:
    """Join torchrun's process group once per process; a plain launch returns the single-process context.

    Inside a job of robfilt's own worker pool the pool's context is returned (its group is already joined). A
    process group the caller initialised already is reused as it is (library use inside a training script).
    """
    if _POOLED is not None:
        return _POOLED
    ctx = env_context()
    if not ctx.enabled:
        return ctx
    if not dist.is_available():
        raise RobfiltError("this torch build has no torch.distributed; run robfilt as one process (without torchrun).")
    if dist.is_initialized():
        if dist.get_world_size() != ctx.world_size or dist.get_rank() != ctx.rank:
            raise RobfiltError("the initialised process group does not match RANK/WORLD_SIZE of the environment.")
        return replace(ctx, backend=str(dist.get_backend()))
    backend = backend_for(device)
    kwargs: dict = {}
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RobfiltError(
                f"{flag('device')} cuda under torchrun needs a CUDA device on every rank; use {given('device', 'cpu')}."
            )
        torch.cuda.set_device(ctx.local_rank)  # object collectives and barriers run on this rank's own GPU
        kwargs["device_id"] = torch.device("cuda", ctx.local_rank)
    dist.init_process_group(backend=backend, timeout=group_timeout(), **kwargs)
    atexit.register(_shutdown)
    log.info("rank %d of %d (local rank %d) joined the %s process group", ctx.rank, ctx.world_size, ctx.local_rank,
             backend)  # fmt: skip
    return replace(ctx, backend=backend)


def _shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def local_device(device: str, ctx: DistContext) -> str:
    """``cuda`` means this rank's own GPU (``cuda:LOCAL_RANK``) under torchrun; an explicit index is kept."""
    if ctx.enabled and device == "cuda":
        return f"cuda:{ctx.local_rank}"
    if ctx.enabled and device.startswith("cuda:"):
        log.warning("--device %s pins every rank of this node to one GPU; pass --device cuda instead", device)
    return device


def shard(units: Sequence[T], rank: int, world: int) -> list[T]:
    """The units rank ``rank`` of ``world`` computes: every ``world``-th unit, starting at ``rank``.

    A pure function of its arguments, so every rank derives the same partition without talking to the others;
    the shards are disjoint and together cover every unit exactly once.
    """
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    return list(units[rank::world])


def _describe(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


def _rebuild(rank: int, name: str, message: str) -> RobfiltError:
    """Another rank's failure as an exception here: the same RobfiltError subclass when it was one."""
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, RobfiltError):
        return cls(message if rank == 0 else f"rank {rank}: {message}")
    return RobfiltError(f"rank {rank} failed with {name}: {message}")


def portable(exc: BaseException) -> BaseException | tuple[str, str]:
    """``exc`` itself when it survives pickling unchanged (type and message), else its description.

    A pooled rank's failure travels as the exception object, so the caller raises what one process would have
    raised (an OSError keeps its errno, a RobfiltError its class and exit code); the worker's traceback rides along
    as a note for failures that print one (a bug).
    """
    try:
        copy = pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception type may refuse to pickle
        return _describe(exc)
    if type(copy) is not type(exc) or str(copy) != str(exc):
        return _describe(exc)
    if not isinstance(exc, RobfiltError) and exc.__traceback__ is not None:
        copy.add_note("in a worker process:\n" + "".join(traceback.format_exception(exc)).rstrip())
    return copy


def _reraise(ctx: DistContext, rank: int, outcome: BaseException | tuple[str, str]) -> BaseException:
    if isinstance(outcome, BaseException):
        return outcome
    if ctx.pooled:  # a description only: the class by name where robfilt knows it, without a rank
        cls = getattr(errors, outcome[0], None)
        if isinstance(cls, type) and issubclass(cls, RobfiltError):
            return cls(outcome[1])
        return RuntimeError(f"a worker process failed with {outcome[0]}: {outcome[1]}")
    return _rebuild(rank, *outcome)


def collective(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by :func:`all_or_none`, so every rank raised it at the same step (no rank is
    left waiting in a collective for this one)."""
    return bool(getattr(exc, "_robfilt_collective", False))


def abandon(exc: BaseException) -> BaseException:
    """Mark ``exc`` as the end of the group (a worker process died): :func:`all_or_none` re-raises it at once,
    without the collective step the dead rank would never join."""
    with contextlib.suppress(AttributeError):
        exc._robfilt_abandon = True  # type: ignore[attr-defined]
    return exc


def _mark(exc: BaseException) -> BaseException:
    with contextlib.suppress(AttributeError):  # exceptions with __slots__ cannot carry the mark
        exc._robfilt_collective = True  # type: ignore[attr-defined]
    return exc


def all_or_none(ctx: DistContext, fn: Callable[[], T]) -> T:
    """Run this rank's share of a step; if any rank fails, every rank raises (a collective, so also a barrier).

    The failing rank re-raises its own exception with its traceback; the others raise a one-line RobfiltError
    naming the rank, which the CLI prints without a traceback.
    """
    if not ctx.enabled:
        return fn()
    result: T | None = None
    error: Exception | None = None
    try:
        result = fn()
    except Exception as exc:  # reported to every rank, then re-raised below
        if getattr(exc, "_robfilt_abandon", False):
            raise
        error = exc
    outcomes: list[Any] = [None] * ctx.world_size
    mine = None if error is None else portable(error) if ctx.pooled else _describe(error)
    dist.all_gather_object(outcomes, mine)
    if error is not None:
        raise _mark(error)
    for rank, outcome in enumerate(outcomes):
        if outcome is not None:
            raise _mark(_reraise(ctx, rank, outcome))
    return result  # type: ignore[return-value]


def broadcast(ctx: DistContext, value: T) -> T:
    """Rank 0's ``value`` on every rank (a small picklable object)."""
    if not ctx.enabled:
        return value
    box: list[Any] = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextlib.contextmanager
def shared_run(ctx: DistContext, make_writer: Callable[[bool], contextlib.AbstractContextManager[W]]) -> Iterator[W]:
    """Open one run folder for all ranks: rank 0 locks it and writes the manifest, then the others attach.

    Generic over the writer (the run folder's :class:`~..runs.folder.RunWriter`), so this module stays below runs/.

    ``make_writer(primary)`` builds the writer; only the primary one takes the lock, applies --resume or
    --overwrite and writes the manifest. Secondary writers wait for that, check the fingerprint and then only
    write their own part files, whose keys are unique per unit.
    """
    with contextlib.ExitStack() as stack:
        if not ctx.enabled:
            yield stack.enter_context(make_writer(True))
            return
        primary = all_or_none(ctx, lambda: stack.enter_context(make_writer(True)) if ctx.is_primary else None)
        secondary = all_or_none(ctx, lambda: None if ctx.is_primary else stack.enter_context(make_writer(False)))
        yield primary if ctx.is_primary else secondary


__all__ = [
    "DistContext",
    "abandon",
    "all_or_none",
    "backend_for",
    "broadcast",
    "collective",
    "env_context",
    "group_timeout",
    "init",
    "local_device",
    "pooled",
    "portable",
    "shard",
    "shared_run",
]
