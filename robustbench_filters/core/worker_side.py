"""One worker process of robfilt's pool (:mod:`.workers` is the parent's side): it joins the gloo group, then
runs the jobs the parent sends over its pipe until the parent says stop or goes away.

Why a module of its own: what runs in the child (signals, logging, the job loop) is read and changed apart from how
the parent starts, feeds and ends its workers, and the child imports only this and what its jobs need.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import pickle
import signal
import sys
import warnings
from multiprocessing.connection import Connection
from typing import Any

from .errors import RobfiltError
from .surface import Surface, surface

HOST = "127.0.0.1"  # every rank runs on this machine
STOP = b""  # the job that ends a worker


class _Terminated(KeyboardInterrupt):
    """SIGTERM from the parent: end now. Like Ctrl-C it passes through the runner's error handling untouched, and an
    atomic write in progress removes its temp file on the way out."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated(128 + signum)


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when its parent dies (no orphan even after ``kill -9``)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def worker_main(
    rank: int,
    world: int,
    conn: Connection,
    threads: int,
    parent: int,
    level: int,
    filters: list,
    warm: tuple[str, ...],
) -> None:
    """A worker: import torch and ``warm``, learn the store's port from the pipe (the parent starts its workers before
    it loads torch and opens the store after), join the group, then run jobs until the parent sends STOP or goes
    away. It logs and warns as the parent does (its level, its warning filters), and only what goes wrong: rank 0
    reports the run."""
    _die_with_parent(parent)
    warnings.filters[:] = filters
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    os.dup2(2, 1)  # stdout belongs to the parent (under --json it carries exactly one document)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"worker {rank}: %(levelname)s %(message)s"))
    root = logging.getLogger("robustbench_filters")
    root.handlers, root.propagate = [handler], False
    root.setLevel(max(level, logging.WARNING))  # rank 0 logs the run; workers only what goes wrong
    try:
        import torch
        import torch.distributed as dist

        from .launch import group_timeout

        torch.set_num_threads(threads)
        for module in warm:  # what the first job will need, imported while the parent imports its own
            importlib.import_module(module)
        try:
            port = conn.recv_bytes()
        except (EOFError, OSError):
            port = STOP  # the parent is gone
        if port == STOP:  # the parent ended before it opened the store
            os._exit(0)
        timeout = group_timeout()
        store = dist.TCPStore(HOST, int(port), world, False, timeout=timeout)
        conn.send(("ready", None))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
        _serve(rank, world, store, conn)
    except _Terminated:
        pass
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    os._exit(0)  # skip interpreter teardown: the gloo group and the store may already be gone with the parent


def _serve(rank: int, world: int, store: Any, conn: Connection) -> None:
    from . import distributed

    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        if payload == STOP:
            return
        try:
            job, fn, args, kwargs, where = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - an in-memory object this process cannot rebuild
            conn.send(("crashed", RobfiltError(
                f"a worker process cannot rebuild this run ({type(exc).__name__}: {exc}); models or data defined in "
                "a notebook or an interactive session stay in their process: pass workers=1, or define them in an "
                "importable module."
            )))  # fmt: skip
            os._exit(1)
        ctx = distributed.DistContext(
            rank=rank, world_size=world, local_rank=rank, backend="gloo", store=store, job=job
        )
        try:
            with distributed.pooled(ctx), surface(Surface(where)):
                fn(*args, **kwargs)
        except _Terminated:
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            if isinstance(exc, Exception) and distributed.collective(exc):
                conn.send(("failed", None))  # every rank raised it at the same step; the parent has it already
                continue
            conn.send(("crashed", distributed.portable(exc)))
            os._exit(1)  # a rank may wait for this one in a collective: leaving the group fails it at once
        conn.send(("ok", None))


__all__ = ["HOST", "STOP", "worker_main"]
