"""B13 workers: the wall time of the gate's image part with two worker processes against one process.

Question: does ``--workers 2`` (robfilt's default on two cores: this process and one worker it starts, one torch
thread each) finish the gate's image part at least 1.8 times sooner than ``--workers 1`` (one process; one torch
thread, as every process gets by default so that the rows do not depend on ``--workers``), with the same rows? The gate's image part is ``robfilt check``
on the ``[image]`` section of ``robustness.toml`` (the same models, eps and attack, B11's spec), with
``n_examples`` reduced so a repetition takes minutes and ``batch_size`` reduced with it so the run keeps the unit
count of the gate's own run (500 examples in batches of 128: 4 attack units per model). Each run is a fresh process,
as users run it, pinned to two cores when the machine has more (so "2 cores" means two); the sides alternate, so
load from elsewhere lands on both. Every run's rows and summary must equal the other side's byte for byte.

The benchmark clears ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_WAIT_POLICY`` and ``ROBFILT_WORKERS`` for its
runs: it measures what users get. Target: median wall time of ``--workers 1`` / median wall time of
``--workers 2`` >= 1.8 on two idle cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B
from benchmarks.b11_fair_share import image_spec
from robustbench_filters.runs.runner import queue_order
from robustbench_filters.runs.units import Unit

NAME = "b13_workers"
FULL = {"n_examples": 256, "batch_size": 64, "reps": 1}
SMOKE = {"n_examples": 8, "batch_size": 2, "reps": 1}
LIMIT = 1.8
SIDES: dict[str, list[str]] = {"--workers 1": ["--workers", "1"], "--workers 2": ["--workers", "2"]}
CLEARED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ROBFILT_WORKERS")


def two_cores() -> None:
    """In the child: run on two cores when the machine has more (the benchmark's question is about two)."""
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])


def timed_run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree: user + system, its reaped workers included) of ``cmd``; a
    failed run ends the benchmark with its exit code and the end of its stderr (a job that fails is not a time)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=two_cores)  # fmt: skip
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {err.decode(errors='replace').strip()[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


PASSES = ("fwd", "bwd", "conv_fwd", "conv_bwd")


def queue_balance(rows: pd.DataFrame, batch_size: int, processes: int = 2) -> float:
    """The run's model passes replayed through the pool's queue (:func:`~robustbench_filters.runs.runner.queue_order`)
    by ``processes`` processes of equal speed, each taking the next unit when free: all passes / the busiest
    process's. The speedup of the parallel part over one process at the same speed per process, counted in passes,
    so the machine's load does not enter it (start-up, the model checks and the merge are not in it)."""
    ids = sorted(rows.example_id.unique())
    batch = rows.example_id.map({e: i // batch_size for i, e in enumerate(ids)})
    models = list(dict.fromkeys(rows.model))
    attacks = [a for a in dict.fromkeys(rows.attack) if a != "clean"]
    passes = rows[list(PASSES)].sum(axis=1).groupby([rows.model, rows.attack, batch]).sum()
    cost = {Unit(models.index(m), a, int(b)): float(v) for (m, a, b), v in passes.items()}
    grid = {a: rows[rows.attack == a].eps.nunique() for a in attacks}
    plan = [Unit(mi, a, b) for mi in range(len(models)) for a in attacks for b in range(-(-len(ids) // batch_size))]
    plan += [Unit(mi, "clean", b) for mi in range(len(models)) for b in range(-(-len(ids) // batch_size))]
    busy = [0.0] * processes
    for unit in queue_order(plan, lambda u: 1.0 if u.part == "clean" else float(grid[u.part])):
        busy[busy.index(min(busy))] += cost.get(unit, 0.0)
    return sum(busy) / max(busy)


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)  # the gate runs on the CPU; asking for a missing device is still an error
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="robfilt-b13-") as tmp:
        spec = image_spec(Path(tmp), cfg["n_examples"], batch_size=cfg["batch_size"])
        reference: tuple[bytes, bytes] | None = None
        for rep in range(cfg["reps"]):
            for side, extra in SIDES.items():
                folder = Path(tmp) / f"r{rep}-{len(records)}"
                cmd = [sys.executable, "-m", "robustbench_filters.cli", "check", "--spec", str(spec), "--out",
                       str(folder), "--quiet", *extra]  # fmt: skip
                load = os.getloadavg()[0]
                wall, cpu = timed_run(cmd, env)
                rows = (
                    (folder / "image" / "rows.parquet").read_bytes(),
                    (folder / "image" / "summary.json").read_bytes(),
                )
                reference = reference or rows
                balance = queue_balance(pd.read_parquet(folder / "image" / "rows.parquet"), cfg["batch_size"])
                records.append({"side": side, "rep": rep, "wall_s": wall, "cpu_s": cpu, "load_1min": load,
                                "same_rows": rows == reference})  # fmt: skip
    frame = pd.DataFrame(records)
    walls = {side: B.median(list(frame[frame.side == side].wall_s)) for side in SIDES}
    speedup = walls["--workers 1"] / walls["--workers 2"]
    table = pd.DataFrame([
        {"side": side, "median_wall_s": round(walls[side], 1),
         "wall_s_reps": ", ".join(f"{v:.0f}" for v in part.wall_s),
         "cpu_s_reps": ", ".join(f"{v:.0f}" for v in part.cpu_s),
         "load_1min": ", ".join(f"{v:.1f}" for v in part.load_1min),
         "rows identical to the first run": "yes" if part.same_rows.all() else "NO"}
        for side in SIDES for part in [frame[frame.side == side]]
    ])  # fmt: skip
    notes = [
        f"robfilt check on robustness.toml's [image] section at n_examples={cfg['n_examples']}, batch_size="
        f"{cfg['batch_size']} (no baseline), {cfg['reps']} reps per side, alternated; each run a fresh process "
        "pinned to two cores; wall time includes start-up (imports, the worker's start).",
        "--workers 1: one process with one torch thread (every process's default: the rows do not depend on --workers); --workers 2:"
        " this process and one worker, one torch thread each. OMP_NUM_THREADS, MKL_NUM_THREADS, OMP_WAIT_POLICY, "
        "GOMP_SPINCOUNT and ROBFILT_WORKERS are cleared for every run.",
        "load_1min is the machine's 1-minute load when each run started: on a shared machine both sides carry it; "
        "the target is stated for two idle cores. A loaded machine has no idle core for a second process to use.",
        f"queue balance (load-independent): the run's model passes replayed through the pool's queue by two "
        f"processes of equal speed finish {balance:.3f} times sooner than by one (2 is perfect; start-up, model "
        "checks and the merge are not counted).",
    ]
    same = bool(frame.same_rows.all())
    result = {
        "benchmark": NAME,
        "title": "B13 workers: the gate's image part with 2 worker processes vs 1 process",
        "question": "How much sooner does --workers 2 finish the gate's image part than --workers 1, rows identical?",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "seed": seed, "sides": SIDES},
        "machine": B.machine(),
        "queue_balance_2": round(balance, 4),
        "targets": {
            "wall-time speedup --workers 2 over --workers 1": B.target(speedup, LIMIT, ">="),
            "rows and summaries identical (1 = yes)": B.target(float(same), 1.0, ">="),
        },
        "notes": notes,
    }
    return B.finish(NAME, result, {"wall time of the gate's image part": table}, out)


if __name__ == "__main__":
    B.cli(run)
