"""CPU threads on a shared machine: how many torch computes with, and how the waiting ones wait.

torch's CPU kernels run on an OpenMP pool (GNU libgomp in the PyPI wheels). By default a libgomp thread that waits
at the end of a parallel region spins for a while before it sleeps. On an idle machine that costs little; beside
other busy processes a spinning thread holds a core that the thread it waits for needs, and every region ends in
spinning. Measured on a 2-core machine under load (``benchmarks/b11_fair_share.py``, docs/scaling.md): the gate's
image part took 5-7x the CPU time of the same work with one thread, while with ``OMP_WAIT_POLICY=PASSIVE``
(waiting threads sleep at once) two threads took about the CPU time of one, idle or busy, and ran twice as fast.

So robfilt's commands set ``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets a policy, and keep torch's own
thread count (one per core); ``--threads N`` (every computing command) or ``OMP_NUM_THREADS`` choose another. Both
are environment settings that the OpenMP runtime reads once, when torch loads it, so :func:`configure_threads` runs
before the command imports torch (robfilt imports it lazily); they also reach the processes a command starts (the
gate's child, data-loader workers). In the Python API the caller's process keeps its own settings
(``torch.set_num_threads``; ``OMP_WAIT_POLICY=PASSIVE`` in the environment before ``import torch``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

from .errors import RobfiltError
from .io import kept_environment
from .surface import flag

log = logging.getLogger(__name__)

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
#: waiting OpenMP threads sleep at once instead of spinning (the measured choice; see the module docstring)
DEFAULT_WAIT_POLICY = "PASSIVE"
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
MAX_THREADS = 1024


def configure_threads(threads: int | None, env: MutableMapping[str, str] | None = None) -> None:
    """Set the wait policy (unless ``env`` has one) and, when given, the thread count, before torch starts.

    ``threads`` (``--threads``) overrides ``OMP_NUM_THREADS``; without it the environment's count, else torch's
    default, applies. When torch is already loaded (a command run in-process) its thread count is set directly;
    the wait policy then stays what the process started with.
    """
    env = os.environ if env is None else env
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
            raise RobfiltError(f"{flag('threads')} must be a whole number from 1 to {MAX_THREADS}, got {threads!r}.")
        for name in THREAD_ENVS:
            env[name] = str(threads)
    env.setdefault(WAIT_POLICY_ENV, DEFAULT_WAIT_POLICY)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    log.debug("torch was loaded before the thread settings; %s stays as the process started", WAIT_POLICY_ENV)
    if threads is not None:
        torch.set_num_threads(threads)


@contextmanager
def kept_threads() -> Iterator[None]:
    """Restore the environment's thread settings and a loaded torch's thread count afterwards.

    A command run in-process (``robustbench_filters.cli.run``, as tests and notebooks call it) must leave its
    caller as it found it: ``--threads 3`` in one call would otherwise set the count of every later computation in
    that process, and of every process it starts.
    """
    torch = sys.modules.get("torch")
    count = torch.get_num_threads() if torch is not None else None
    try:
        with kept_environment((*THREAD_ENVS, WAIT_POLICY_ENV)):
            yield
    finally:
        if torch is not None and count is not None and torch.get_num_threads() != count:
            torch.set_num_threads(count)


__all__ = ["DEFAULT_WAIT_POLICY", "MAX_THREADS", "WAIT_POLICY_ENV", "configure_threads", "kept_threads"]
