"""B11 fair share: robfilt's CPU time on a busy machine, next to its CPU time on the same machine without the load.

Question: does robfilt take only its share of a busy machine? The gate's image part (``robfilt check`` on the
``[image]`` section of ``robustness.toml``: the same models, eps and attack, ``n_examples`` reduced so a run takes a
minute, no baseline) runs as users run it, in a fresh process with robfilt's defaults, alternately alone ("idle")
and beside two busy one-thread processes (``python -c 'while True: pass'``). CPU time is user + system time of
robfilt's whole process tree (``os.wait4``: the gate's supervised child and the worker processes it starts and
reaps included). Waiting threads that spin (libgomp's default, which torch uses) hold cores that the threads they
wait for need, so a busy machine multiplies the CPU time of the same work; robfilt's default is one worker process
per usable core with one torch thread each (robustbench_filters/core/workers.py), and inside a process with several
threads ``OMP_WAIT_POLICY=PASSIVE`` lets waiting threads sleep (robustbench_filters/core/threads.py).
``--workers 1`` (one process with torch's own thread count, waiting passively: the default before workers) runs
beside it for reference.

The benchmark clears ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_WAIT_POLICY`` and ``ROBFILT_WORKERS`` for its
runs (``make bench`` sets one thread for the other benchmarks): it measures the default users get.
Target: median busy CPU time / median idle CPU time <= 1.3 with the defaults. "Idle" is this machine as
it is: on a shared machine other work runs in both conditions, which the report's load column shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B

NAME = "b11_fair_share"
FULL = {"n_examples": 8, "reps": 3, "busy": 2}
SMOKE = {"n_examples": 2, "reps": 1, "busy": 2}
LIMIT = 1.3
REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "robustness.toml"
#: the settings of a side: extra ``robfilt check`` arguments
SIDES: dict[str, list[str]] = {"defaults": [], "--workers 1": ["--workers", "1"]}
CLEARED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ROBFILT_WORKERS")
BUSY = "import sys; sys.stdout.write('.'); sys.stdout.flush()\nwhile True: pass"


def image_spec(folder: Path, n_examples: int, batch_size: int | None = None) -> Path:
    """The gate spec's ``[image]`` section with ``n_examples`` examples (in batches of ``batch_size`` when given)
    and one requirement that always holds."""
    section = tomllib.loads(SPEC.read_text())["image"]
    keep = {k: v for k, v in section.items() if k != "require"}
    keep["n_examples"] = n_examples
    if batch_size is not None:
        keep["batch_size"] = batch_size
    lines = ["version = 1", 'name = "B11 fair share (the gate\'s image part)"', 'sanity = "fail"', "", "[image]"]
    lines += [f"{k} = {_toml(v)}" for k, v in keep.items()]
    lines += ["", "[[image.require]]", 'attack = "clean"', "min_acc = 0.0"]
    (folder / "pyproject.toml").write_text("")  # the spec's project folder
    path = folder / "fair_share.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


@contextmanager
def busy(n: int) -> Iterator[None]:
    """``n`` one-thread processes spinning on a core each, started (each has written its first byte) before the
    block runs and killed after it."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE) for _ in range(n)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.read(1) == b"."
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(CPU seconds of the process tree, wall seconds, exit code) of ``cmd`` (user + system, waited children
    included)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {err.decode(errors='replace').strip()[-800:]}")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - start, proc.returncode


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)  # the gate runs on the CPU; asking for a missing device is still an error
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="robfilt-b11-") as tmp:
        spec = image_spec(Path(tmp), cfg["n_examples"])
        for rep in range(cfg["reps"]):
            for side, extra in SIDES.items():
                for loaded in (False, True):  # alternated, so load from elsewhere lands on both conditions
                    cmd = [sys.executable, "-m", "robustbench_filters.cli", "check", "--spec", str(spec), "--out",
                           str(Path(tmp) / f"r{rep}-{len(records)}"), "--quiet", *extra]  # fmt: skip
                    load = os.getloadavg()[0]
                    with busy(cfg["busy"] if loaded else 0):
                        cpu, wall, _ = cpu_seconds(cmd, env)
                    records.append({"side": side, "busy": loaded, "rep": rep, "cpu_s": cpu, "wall_s": wall,
                                    "load_1min": load})  # fmt: skip
    frame = pd.DataFrame(records)
    rows, ratios = [], {}
    for side in SIDES:
        idle = frame[(frame.side == side) & ~frame.busy]
        loaded = frame[(frame.side == side) & frame.busy]
        ratios[side] = B.median(list(loaded.cpu_s)) / B.median(list(idle.cpu_s))
        for name, part in (("idle", idle), (f"beside {cfg['busy']} busy processes", loaded)):
            rows.append({
                "settings": side, "condition": name, "median_cpu_s": round(B.median(list(part.cpu_s)), 1),
                "median_wall_s": round(B.median(list(part.wall_s)), 1),
                "cpu_s_reps": ", ".join(f"{v:.1f}" for v in part.cpu_s),
                "wall_s_reps": ", ".join(f"{v:.0f}" for v in part.wall_s),
                "load_1min": ", ".join(f"{v:.1f}" for v in part.load_1min),
            })  # fmt: skip
    table = pd.DataFrame(rows)
    table["cpu_ratio_busy_idle"] = [round(ratios[r["settings"]], 3) for r in rows]
    notes = [
        f"robfilt check on robustness.toml's [image] section at n_examples={cfg['n_examples']} (no baseline), "
        f"{cfg['reps']} reps per side and condition, alternated; CPU = user + system of the process tree.",
        "defaults: one process per usable core (robfilt starts the workers), one torch thread each; --workers 1: one "
        "process with torch's own thread count (one per core), OMP_WAIT_POLICY=PASSIVE. OMP_NUM_THREADS, "
        "MKL_NUM_THREADS, OMP_WAIT_POLICY, GOMP_SPINCOUNT and ROBFILT_WORKERS are cleared for every run.",
        "load_1min is the machine's 1-minute load when each run started: on a shared machine the idle runs are "
        "not idle, and both conditions carry that load.",
    ]
    result = {
        "benchmark": NAME,
        "title": "B11 fair share: the gate's image part, busy vs idle CPU time",
        "question": "Does robfilt's CPU time stay close to its idle CPU time beside two busy one-thread processes?",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "seed": seed, "sides": SIDES},
        "machine": B.machine(),
        "targets": {"CPU-time ratio busy/idle (defaults)": B.target(ratios["defaults"], LIMIT)},
        "notes": notes,
    }
    return B.finish(NAME, result, {"CPU time of the gate's image part": table}, out)


if __name__ == "__main__":
    B.cli(run)
