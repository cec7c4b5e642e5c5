"""robfilt's own worker processes (``--workers N``): every core used, without the user starting torchrun.

Why processes, and why this shape. A run is a list of independent units, each seeded by its own identity
(runs/units.py), and torch computes the small models robfilt measures on a CPU far better in several one-thread
processes than in one process with several threads (measured in docs/scaling.md and benchmarks/b13_workers.py).
torchrun already gives the runner that layout; this module makes it without torchrun:

- the calling process is rank 0 and starts ``N - 1`` workers (the ``spawn`` start method: a forked child would
  inherit torch's OpenMP pool, which does not survive ``fork``); they join one gloo process group with it, over a
  store rank 0 serves on the loopback address, and take one torch thread each (``--threads`` or cores / N);
- the pool lives as long as the command (:func:`pool`): ``robfilt check`` and ``robfilt study`` make many runs
  and pay the workers' start-up (importing torch, about two seconds) once. Workers start at the first run that
  uses them, so a command that makes no CPU run starts none;
- a run is sent to every worker as one pickled job (the measurement before it has loaded anything, the run folder
  and the flags) over a pipe; every rank then runs the same runner call (:mod:`.distributed` sees the pool's
  context), and ranks share the units through a queue (:mod:`.workqueue`). Rows are the one-process rows: every
  unit is computed from its own identity, whichever process takes it;
- a pipe, not a collective, carries the jobs: a worker waits for the next job for as long as a study trains
  (hours), which no collective's timeout allows, and its end of the pipe closing tells it the parent is gone.

The job travels as a pickle written by this process and read by its own children over a private pipe: trusted
data, never a file. What cannot travel (an object that refuses pickling, a model class defined in a notebook) is
refused in one line before any work, or as soon as a worker cannot rebuild it: pass ``workers=1`` for those.

Ending: workers ignore SIGINT (Ctrl-C at a terminal reaches every process of the group; the parent decides), and
end on SIGTERM by raising SystemExit, so an atomic write in progress removes its temp file; the parent ends them
on every way out of the pool (and on Linux the kernel ends them if the parent dies: ``PR_SET_PDEATHSIG``), and
reaps them, so their CPU time counts in the parent's (``os.wait4``, B11). A worker that fails inside a collective
step fails every rank the same way (:func:`.distributed.all_or_none`); one that fails anywhere else, or dies,
ends the pool and the parent raises the worker's exception.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import multiprocessing
import os
import pickle
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .cores import usable_cores
from .errors import RobfiltError
from .io import kept_environment
from .launch import DistContext, env_context, group_timeout
from .surface import Surface, current_surface, flag, switched
from .worker_side import HOST, STOP, worker_main

log = logging.getLogger(__name__)

#: the default of ``--workers`` when set (a whole number), like OMP_NUM_THREADS for ``--threads``
ENV = "ROBFILT_WORKERS"
MAX_WORKERS = 256
#: seconds a worker gets to end by itself (a finished job, SIGTERM) before it is killed
GRACE_S = 10.0


def requested(workers: int | None) -> int | None:
    """``--workers`` as given, else ``ROBFILT_WORKERS`` (None: neither), checked."""
    raw: Any = workers
    if raw is None:
        env = os.environ.get(ENV, "").strip()
        if not env:
            return None
        try:
            raw = int(env)
        except ValueError:
            raise RobfiltError(
                f"{ENV}={env!r} is not a whole number; set it to a number of processes, e.g. 2."
            ) from None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_WORKERS:
        raise RobfiltError(f"{flag('workers')} must be a whole number from 1 to {MAX_WORKERS}, got {raw!r}.")
    return raw


def resolve(workers: int | None, default: int | None = None) -> int:
    """How many processes a command computes with: ``workers``, else ROBFILT_WORKERS, else ``default`` (the
    command line's default: :func:`.cores.usable_cores`; the API's: 1). Under torchrun its ranks are the
    processes: robfilt starts none of its own."""
    count = requested(workers)
    if count is None:
        count = default if default is not None else 1
    if env_context().enabled:
        if count > 1 and workers is not None:
            log.info("under torchrun the ranks it started are the workers; %s %d is ignored", flag("workers"), count)
        return 1
    return count


def default_count() -> int:
    """The command line's default number of processes: the usable cores (affinity and cgroup quotas)."""
    return usable_cores()


def thread_count(workers: int, threads: int | None = None) -> int:
    """Torch threads per process: ``threads``, else OMP_NUM_THREADS (where ``--threads`` puts its value), else one.

    Why one, whatever the number of processes: a unit's numbers must not depend on ``--workers``, and torch's
    kernels round some float reductions differently with another thread count (measured: the same LM PGD run gave
    a perturbation norm that differed in its last bits with two threads and with one). Every unit is computed with
    the same count in any process, so ``--workers N`` gives the ``--workers 1`` rows for any N; one thread per
    process is also the fastest layout measured on a CPU (docs/scaling.md). ``workers`` is kept for callers."""
    del workers
    if threads is None:
        with contextlib.suppress(ValueError):
            threads = int(os.environ.get("OMP_NUM_THREADS", "").strip())
    return threads if threads is not None and threads >= 1 else 1


# ------------------------------------------------------------------------------------------------- the parent
class WorkerPool:
    """Rank 0 and ``size - 1`` worker processes; :meth:`call` runs one function on every rank."""

    def __init__(self, size: int, threads: int | None = None) -> None:
        self.size, self.threads = size, thread_count(size, threads)
        self.job = 0
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._answers: dict[Connection, tuple[str, Any]] = {}
        self._store: Any = None
        self._group = False

    @property
    def started(self) -> bool:
        return bool(self._procs)

    def call(
        self, fn: Callable[..., Any], *args: Any, local: dict[str, Any] | None = None,
        reduce: Callable[[Any], Any] | None = None, **kwargs: Any,
    ) -> Any:  # fmt: skip
        """``fn(*args, **kwargs)`` on every rank, with ``local`` keywords (a progress hook) on rank 0 only;
        returns rank 0's result. ``fn`` and the arguments must pickle (``fn`` as a module-level function);
        ``reduce(obj)`` may give the pickle reduction of an object that does not pickle as it is (None: as usual)."""
        job = self.job + 1
        try:
            payload = _dumps((job, fn, args, kwargs, current_surface().value), reduce)
        except Exception as exc:  # noqa: BLE001 - pickling raises many types
            raise RobfiltError(
                f"{flag('workers')} {self.size} sends the run to worker processes, and it holds an object that cannot "
                f"be sent ({type(exc).__name__}: {exc}); pass {self._one()}, or give models by reference (a name, "
                "file.py:factory)."
            ) from None
        self._start()
        from . import distributed  # torch is loaded by now (the group is up)

        self.job = job
        for conn in self._conns:
            conn.send_bytes(payload)
        ctx = DistContext(rank=0, world_size=self.size, backend="gloo", store=self._store, job=job,
                                      watch=self._watch)  # fmt: skip
        try:
            with distributed.pooled(ctx), self._own_threads():
                result = fn(*args, **kwargs, **(local or {}))
        except BaseException as exc:
            if isinstance(exc, Exception) and distributed.collective(exc) and self._crash_report() is None:
                self._acks()  # every rank raised at the same step: the pool stays usable
                raise
            crashed = None if isinstance(exc, KeyboardInterrupt) else self._crash_report()
            self.close(now=True)  # a rank may be stuck in a collective: end them all (the next run starts anew)
            if crashed is not None and crashed is not exc:
                raise crashed from None
            raise
        self._acks()
        return result

    def _one(self) -> str:
        return "--workers 1" if current_surface() is Surface.CLI else "workers=1"

    # --- start and stop -------------------------------------------------------------------------------------------

    def start(self, warm: Sequence[str] = ()) -> None:
        """Start the worker processes now, without waiting for them: they import torch and the ``warm`` modules
        while this process goes on (a command starts them before its own heavy imports, which then overlap).

        They start before this process imports torch (a second on a CPU), and learn the store's port over their
        pipe once it listens: a command that has not loaded torch yet loses no time to the workers' start."""
        if self.started:
            return
        if "torch" in sys.modules:  # a group can exist only where torch is loaded
            import torch.distributed as dist

            if dist.is_initialized():
                raise RobfiltError(
                    f"a torch.distributed process group is already set up in this process; {flag('workers')} "
                    f"{self.size} needs its own: pass {self._one()}."
                )
        spawn = multiprocessing.get_context("spawn")
        level = logging.getLogger("robustbench_filters").getEffectiveLevel()
        atexit.register(self.close, now=True)
        with _environment({name: str(self.threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}):
            for rank in range(1, self.size):
                parent_end, child_end = spawn.Pipe()
                proc = spawn.Process(
                    target=worker_main, name=f"robfilt-worker-{rank}",
                    args=(rank, self.size, child_end, self.threads, os.getpid(), level, _builtin_filters(),
                          tuple(warm)),
                )  # fmt: skip
                proc.start()
                child_end.close()
                self._procs.append(proc)
                self._conns.append(parent_end)
        try:
            import torch.distributed as dist

            self._store = dist.TCPStore(HOST, 0, self.size, True, timeout=group_timeout(), wait_for_workers=False)
            for conn in self._conns:
                conn.send_bytes(str(self._store.port).encode())
        except BaseException:
            self.close(now=True)
            raise

    def _start(self) -> None:
        """Started, and the group joined: what a job needs."""
        self.start()
        if self._group:
            return
        import torch.distributed as dist

        try:
            self._gather("ready")  # each has imported what it imports first and reached the store; none died
        except BaseException:
            self.close(now=True)
            raise
        log.info("started %d worker process(es), %d torch thread(s) each", self.size - 1, self.threads)
        hook = sys.excepthook  # torch's own prefixes "[rank0]:" to every line of a traceback this process prints
        dist.init_process_group("gloo", store=self._store, rank=0, world_size=self.size,
                                timeout=group_timeout())  # fmt: skip
        sys.excepthook = hook
        self._group = True

    def close(self, now: bool = False) -> None:
        """End every worker and reap it; idempotent. Idle workers are asked to stop; with ``now`` (Ctrl-C, a rank
        that failed outside a collective step) they get SIGTERM, and this process leaves the group, which ends a
        wait inside a collective; whoever has not ended after :data:`GRACE_S` is killed."""
        if not self._procs and not self._group:
            return
        import torch.distributed as dist

        for proc in self._procs:
            if now:
                with contextlib.suppress(OSError):
                    proc.terminate()
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send_bytes(STOP)
        if self._group and dist.is_initialized():
            dist.destroy_process_group()
        self._group = False
        _end(self._procs)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._answers, self._store = [], [], {}, None

    # --- while a job runs ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _own_threads(self) -> Iterator[None]:
        """Rank 0 computes with the workers' thread count, and gets its own back afterwards (a study trains in
        this process between runs, with the command's threads)."""
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        if torch is not None:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if torch is not None and before is not None:
                torch.set_num_threads(before)

    def _receive(self, conn: Connection) -> tuple[str, Any]:
        try:
            status, error = conn.recv()
        except (EOFError, OSError):
            return "died", None
        return status, error

    def _crash_report(self) -> BaseException | None:
        """The exception a worker sent before it ended (it failed outside a collective step), if one did."""
        for conn in self._conns:
            if conn not in self._answers and conn.poll():
                self._answers[conn] = self._receive(conn)
        for status, error in self._answers.values():
            if status == "crashed":
                return _as_exception(error)
        return None

    def _watch(self) -> None:
        """Raise when a worker has died: its own exception when it sent one (rank 0 calls this while it shares
        units with the workers and while it waits for them)."""
        dead = next((rank for rank, p in enumerate(self._procs, start=1) if p.exitcode is not None), None)
        if dead is None:
            return
        from . import distributed

        crashed = self._crash_report()
        code = self._procs[dead - 1].exitcode
        raise distributed.abandon(crashed or RobfiltError(
            f"worker process {dead} ended unexpectedly (exit code {code}); the finished units are kept: continue "
            f"with {switched('resume')}."
        ))  # fmt: skip

    def _gather(self, expected: str) -> None:
        """Wait for every worker's answer to the current step (``ready`` at start, ``ok``/``failed`` after a job);
        a worker that crashed or died raises here."""
        pending = {conn: proc for conn, proc in zip(self._conns, self._procs, strict=True) if conn not in self._answers}
        while pending:
            ready = wait([*pending, *(p.sentinel for p in pending.values())])
            for conn in [c for c, p in pending.items() if c in ready or p.sentinel in ready]:
                self._answers[conn] = self._receive(conn)
                del pending[conn]
        answers, self._answers = self._answers, {}
        allowed = {expected, "failed"} if expected == "ok" else {expected}
        bad = next(((status, error) for status, error in answers.values() if status not in allowed), None)
        if bad is None:
            return
        self.close(now=True)
        if bad[0] == "crashed":
            raise _as_exception(bad[1])
        if expected == "ready":
            raise RobfiltError(
                f"a worker process could not start (see its error above); pass {self._one()} to compute in this "
                'process. A script that asks for workers must start its work under `if __name__ == "__main__":` '
                "(Python's rule for processes it spawns)."
            )
        raise RobfiltError(
            f"a worker process ended unexpectedly (see its error above); continue the run with {switched('resume')}."
        )

    def _acks(self) -> None:
        """Wait until every worker has finished the job (the run's last collective step has passed everywhere)."""
        self._gather("ok")


class _JobPickler(pickle.Pickler):
    """A pickler that asks ``reduce`` first (objects that do not pickle as they are, such as robfilt's models)."""

    def __init__(self, file: io.BytesIO, reduce: Callable[[Any], Any] | None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.reduce = reduce

    def reducer_override(self, obj: Any) -> Any:
        reduced = self.reduce(obj) if self.reduce is not None else None
        return NotImplemented if reduced is None else reduced


def _builtin_filters() -> list[Any]:
    """This process's warning filters on built-in categories: a worker warns as this process does (the command
    line silences some dependencies' chatter), and a category only this process can name would stop it starting."""
    return [f for f in warnings.filters if getattr(f[2], "__module__", None) == "builtins"]


def _dumps(obj: Any, reduce: Callable[[Any], Any] | None) -> bytes:
    buffer = io.BytesIO()
    _JobPickler(buffer, reduce).dump(obj)
    return buffer.getvalue()


def _as_exception(error: Any) -> BaseException:
    if isinstance(error, BaseException):
        return error
    name, message = error
    return RuntimeError(f"a worker process failed with {name}: {message}")


def _end(procs: list[Any]) -> None:
    """Reap ``procs``: each gets :data:`GRACE_S` to end by itself, then SIGTERM, then SIGKILL."""
    for proc in procs:
        proc.join(GRACE_S)
        if proc.exitcode is None:
            proc.terminate()
            proc.join(GRACE_S)
        if proc.exitcode is None:
            proc.kill()
            proc.join()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the processes started inside the block (spawn copies the environment)."""
    with kept_environment(values):
        os.environ.update(values)
        yield


_ACTIVE: WorkerPool | None = None


def current() -> WorkerPool | None:
    """The pool a :func:`pool` block opened in this process (None: none, or one process)."""
    return _ACTIVE


@contextlib.contextmanager
def pool(size: int, threads: int | None = None, warm: Sequence[str] | None = None) -> Iterator[WorkerPool | None]:
    """Compute the runs made inside this block with ``size`` processes (this one and ``size - 1`` workers).

    ``size`` 1 (or a torchrun launch) opens nothing. Inside an open pool the open pool serves, whatever ``size``.
    The workers start at the first run that uses them, or at once with ``warm`` (the modules they import first:
    a command passes its measurement's), and end with the block, however it ends.
    """
    global _ACTIVE
    if _ACTIVE is not None or size <= 1 or env_context().enabled:
        yield _ACTIVE
        return
    _ACTIVE = opened = WorkerPool(size, threads)
    try:
        if warm is not None:
            opened.start(warm)
        yield opened
    except BaseException:
        _ACTIVE = None
        opened.close(now=True)
        raise
    _ACTIVE = None
    opened.close()


__all__ = ["ENV", "WorkerPool", "current", "default_count", "pool", "requested", "resolve", "thread_count"]
