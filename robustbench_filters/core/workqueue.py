"""Who computes which unit, and how far every rank has got: a shared queue and shared progress counts.

Under torchrun each rank computes a fixed round-robin shard (:func:`.distributed.shard`). That is poor when units
cost very different amounts (an attack unit whose survivors need the convergence check's rerun costs many times
one without): a rank can sit idle while another still has several expensive units. The ranks robfilt starts
itself (``--workers``) share a store, and there every rank *claims* the next unclaimed unit from one counter
(``store.add``, atomic) when it is free, most expensive units first: the longest a rank waits at the end is about
one unit. Units are seeded by their own identity, so which rank computes a unit, and in which order, does not
change its rows (runs/units.py).

The same store carries progress: every rank publishes how many work steps it has done, and rank 0 draws the sum
(one bar for the whole run, with an ETA). Rank 0 waits for the others here, polling the store, rather than in a
collective: a process blocked inside a collective cannot take Ctrl-C until the collective returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from .distributed import DistContext

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how often progress counts are published and drawn, and how often rank 0 looks whether the others are done
PUBLISH_S = 0.25


class WorkQueue:
    """This rank's view of a run's units: which to compute next, and the progress every rank has made.

    In a pool every rank claims from one shared counter until the queue is empty or a rank has failed; elsewhere
    (one process, torchrun's fixed shards) the queue hands out what it is given and the store is not used.
    """

    def __init__(
        self, ctx: DistContext, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.ctx, self.clock, self.sleep = ctx, clock, sleep
        self.prefix = f"robfilt/job{ctx.job}"
        self._published = -1.0
        self._finished = False

    # --- units --------------------------------------------------------------------------------------------------

    def units(self, order: Sequence[T]) -> Iterator[T]:
        """The units this rank computes, one at a time: ``order`` itself outside a pool (one process, or this
        torchrun rank's shard), else each next unclaimed unit of ``order`` (the same list on every rank)."""
        ctx = self.ctx
        if not ctx.pooled:
            yield from order
            return
        store = ctx.store
        while not self.aborted():
            if ctx.watch is not None:
                ctx.watch()  # a worker that died holds a claimed unit it will never write: stop, do not go on
            index = int(store.add(f"{self.prefix}/next", 1)) - 1
            if index >= len(order):
                return
            yield order[index]

    def abort(self) -> None:
        """This rank failed: the others take no further unit (the run stops as one process would)."""
        if self.ctx.pooled:
            self._set(f"{self.prefix}/abort", "1")

    def _set(self, key: str, value: str) -> None:
        """Set ``key`` so that every rank sees it once this returns: a TCPStore client sends a set without waiting
        for the server, and the server answers one connection's commands in order, so a check on the same
        connection returns only after the set has landed (under load another rank could look in between)."""
        self.ctx.store.set(key, value)
        self.ctx.store.check([key])

    def aborted(self) -> bool:
        return bool(self.ctx.pooled and self.ctx.store.check([f"{self.prefix}/abort"]))

    # --- progress -----------------------------------------------------------------------------------------------

    def publish(self, done: int, force: bool = False) -> None:
        """Share this rank's count of finished work steps (at most every :data:`PUBLISH_S` unless ``force``)."""
        if not self.ctx.pooled:
            return
        now = self.clock()
        if force or now - self._published >= PUBLISH_S:
            self._set(f"{self.prefix}/done/{self.ctx.rank}", str(done))
            self._published = now

    def others_done(self) -> int:
        """Work steps the other ranks have published (rank 0 adds them to its own for the bar)."""
        if not self.ctx.pooled:
            return 0
        store, total = self.ctx.store, 0
        for rank in range(self.ctx.world_size):
            key = f"{self.prefix}/done/{rank}"
            if rank != self.ctx.rank and store.check([key]):
                total += int(store.get(key))
        return total

    # --- the end ------------------------------------------------------------------------------------------------

    def finish(self) -> None:
        """This rank computes no more units of this run (done, or failed)."""
        if not self.ctx.pooled or self._finished:
            return
        self._finished = True
        if int(self.ctx.store.add(f"{self.prefix}/finished", 1)) == self.ctx.world_size:
            self._set(f"{self.prefix}/all-finished", "1")

    def wait_all(self, report: Callable[[], None]) -> None:
        """Rank 0: wait until every rank has finished its units, calling ``report`` between looks (the bar).

        Looks at the store (a non-blocking ``check``) every :data:`PUBLISH_S`, so Ctrl-C reaches this process within
        a fraction of a second, and a worker process that died is noticed (the context's ``watch``) instead of
        waited for. Not ``store.wait`` with a timeout: each timeout writes two c10d warnings to stderr, hundreds
        of lines while the last unit of a long run finishes.
        """
        if not self.ctx.pooled:
            return
        key = f"{self.prefix}/all-finished"
        while not self.ctx.store.check([key]):
            if self.ctx.watch is not None:
                self.ctx.watch()  # a worker that died never finishes: fail instead of waiting forever
            report()
            self.sleep(PUBLISH_S)


__all__ = ["PUBLISH_S", "WorkQueue"]
