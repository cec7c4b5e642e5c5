"""How many CPU cores this process may use: the default number of worker processes (``--workers``).

``os.cpu_count()`` counts the machine's cores, not this process's. A process pinned to some cores
(``taskset``, a batch scheduler, ``docker --cpuset-cpus``) may run only on its affinity set, and a container with a
CPU quota (``docker --cpus 2``, a Kubernetes limit) gets ``quota / period`` cores' worth of time however many it
sees. More workers than that only share the same time and multiply the memory, so the count is the smallest of the
affinity set and every quota on the way from this process's cgroup to the root, in cgroup v2
(``cpu.max``: ``"<quota> <period>"`` or ``"max <period>"``) and v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
-1: none). A fractional quota is rounded up: the scheduler throttles the cgroup as a whole, so two processes on 1.5
cores' worth of time finish sooner than one.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cores(quota: float, period: float) -> int | None:
    """Cores' worth of time in a quota (None: no limit, or a value that is not one)."""
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def _v2_limit(text: str | None) -> int | None:
    """``cpu.max``: ``"max 100000"`` (no limit) or ``"150000 100000"``."""
    parts = (text or "").split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        return _cores(float(parts[0]), float(parts[1]))
    except ValueError:
        return None


def _v1_limit(folder: Path) -> int | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        return _cores(float(quota), float(period)) if quota and period else None
    except ValueError:
        return None


def _ancestors(root: Path, inner: str) -> list[Path]:
    """``root/inner`` and every folder above it up to ``root`` (a parent's quota also bounds its children)."""
    parts = [p for p in inner.strip("/").split("/") if p and p not in (".", "..")]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_limit(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The tightest CPU quota over this process's cgroups, v2 and v1, in whole cores (None: no quota found)."""
    limits: list[int] = []
    for line in (_read(proc_cgroup) or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, inner = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified tree
            limits += [x for d in _ancestors(root, inner) if (x := _v2_limit(_read(d / "cpu.max"))) is not None]
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own tree
            for mount in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
                if mount.is_dir():
                    limits += [x for d in _ancestors(mount, inner) if (x := _v1_limit(d)) is not None]
                    break
    return min(limits) if limits else None


def affinity_cores() -> int:
    """The cores the scheduler may run this process on (all of them where the platform cannot say)."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is not None:
        try:
            return max(1, len(getter(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity set, bounded by any cgroup CPU quota."""
    limit = cgroup_limit()
    cores = affinity_cores()
    return cores if limit is None else max(1, min(cores, limit))


__all__ = ["affinity_cores", "cgroup_limit", "usable_cores"]
