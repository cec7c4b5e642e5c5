"""B14 wall time: what a user waits for on two cores, end to end, as they run it.

Question: how long do the jobs a user waits on take, each a fresh process with robfilt's defaults (every core
through worker processes, the default attack at full strength), against the targets of issue 40?

- ``gate``: ``robfilt check --spec robustness.toml`` (what ``make ci-gate`` and CI run: the same n, eps, attacks
  and paired tests against ``baselines/zoo.json``); at most 5 minutes;
- ``demo``: ``make demo``'s command (the default attack on the four zoo DeiTs, 96 examples); at most 3 minutes;
- ``study-vision``: the study's vision-attack piece for one seed as the study makes it (its template: the default,
  ``pgd`` and ``fgsm`` on the four DeiTs at five eps, 500 examples, :func:`run_measurement` on the study's own
  seed-0 checkpoints inside a pool of every usable core); at most 5 minutes. The checkpoints are made before the
  clock starts: reused from ``reports/study/checkpoints`` when their cards match the study's recipe (what
  ``make study`` leaves there), else trained into the benchmark's temporary folder (about 5 minutes on 2 cores);
- ``study-vision-zoo`` (only when ``B14_CASES`` names it): the same piece on the zoo checkpoints (the same
  architecture and size, a longer recipe: more robust models, so dearer to attack), this benchmark's stand-in
  before the study's checkpoints were made here;
- ``ci`` (only when ``B14_CASES`` names it: it takes most of half an hour): ``bash .ci/run`` in a fresh clone of this
  checkout's HEAD (its own virtual environment from pyproject.toml, the suite and the gate); at most 20 minutes.

``B14_CASES`` (comma-separated) picks the cases (default ``gate,demo,study-vision``). Each case runs once: a
repetition costs minutes, and the load when it started and ended is printed beside it, so a reader can tell an idle
run from a busy one (the targets are stated for two idle cores). The gate's verdict must be a pass and the demo's
exit code 0 (a job that fails is not a time). ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_WAIT_POLICY`` and
``ROBFILT_WORKERS`` are cleared: the benchmark measures what users get.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B
from benchmarks.b13_workers import CLEARED, timed_run

NAME = "b14_wall_time"
ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"gate": 300.0, "demo": 180.0, "study-vision": 300.0, "study-vision-zoo": 300.0, "ci": 1200.0}
DEFAULT_CASES = ("gate", "demo", "study-vision")
ZOO_DEITS = "deit,deit-bsa,deit-grc,deit-bsa-grc"
STUDY_PIECE = """
import dataclasses, sys
from pathlib import Path
from robustbench_filters.api.evaluate import run_config
from robustbench_filters.study.plan import VISION_ATTACK_TEMPLATE as T
n = int(sys.argv[2])
config = dataclasses.replace(T, models=tuple(sys.argv[3].split(",")), checkpoint="zoo", n_examples=n,
                             eps=T.eps if n >= 500 else T.eps[:2])
run_config(config, out=Path(sys.argv[1]), workers=int(sys.argv[4]))
"""
#: the study's seed-0 vision checkpoints (untimed): reused when their cards match, else trained on every core
STUDY_CHECKPOINTS = """
import dataclasses, json, sys
from pathlib import Path
from robustbench_filters.core.workers import pool
from robustbench_filters.study.checkpoints import ensure_checkpoint
from robustbench_filters.study.plan import full_plan
from robustbench_filters.study.training import train_shared
if __name__ == "__main__":
    plan, root, reuse = full_plan(1), Path(sys.argv[1]), [Path(sys.argv[2])]
    if sys.argv[3] == "smoke":
        plan = dataclasses.replace(plan, vision_recipe=dataclasses.replace(plan.vision_recipe, epochs=None, steps=3))
    with pool(int(sys.argv[4])):
        train_shared(plan, [(m, 0) for m in plan.vision_models], root, reuse, None)
    infos = {m: ensure_checkpoint(plan, m, 0, root, reuse) for m in plan.vision_models}
    Path(sys.argv[5]).write_text(json.dumps({m: [str(i.path), i.weights_sha256] for m, i in infos.items()}))
"""
#: the study's vision-attack piece (timed), as the study's runner makes it
STUDY_RUN = """
import dataclasses, json, sys
from pathlib import Path
from robustbench_filters.core.workers import pool
from robustbench_filters.study import plan as P
from robustbench_filters.study.checkpoints import CheckpointInfo
from robustbench_filters.study.measure import run_measurement
if __name__ == "__main__":
    plan = P.full_plan(1)
    if sys.argv[2] == "smoke":
        plan = dataclasses.replace(plan, vision_attack=dataclasses.replace(plan.vision_attack, n_examples=8,
                                                                           eps=plan.vision_attack.eps[:2]))
    found = json.loads(Path(sys.argv[3]).read_text())
    ckpts = {m: CheckpointInfo(m, 0, Path(path), sha, False, 0.0, {}) for m, (path, sha) in found.items()}
    with pool(int(sys.argv[4])):
        run_measurement(P.Piece(P.VISION_ATTACK, 0), plan, ckpts, Path(sys.argv[1]))
"""


def _workers() -> int:
    from robustbench_filters.core.cores import usable_cores

    return usable_cores()


def commands(case: str, tmp: Path, smoke: bool) -> tuple[list[str], Path]:
    """The command line of ``case`` and the folder it runs in; smoke sizes shrink n (and the gate's spec)."""
    robfilt = [sys.executable, "-m", "robustbench_filters.cli"]
    if case == "gate":
        spec = ROOT / "robustness.toml"
        if smoke:
            from benchmarks.b11_fair_share import image_spec

            spec = image_spec(tmp, 8, batch_size=4)
        return [*robfilt, "check", "--spec", str(spec), "--out", str(tmp / "gate"), "--quiet"], ROOT
    if case == "demo":
        n = "8" if smoke else "96"
        return [*robfilt, "attack", "--model", ZOO_DEITS, "--n-examples", n, "--batch-size", "12", "--out",
                str(tmp / "demo"), "--quiet"], ROOT  # fmt: skip
    if case == "study-vision":
        found = tmp / "study-checkpoints.json"
        size = "smoke" if smoke else "full"
        setup = [sys.executable, "-c", STUDY_CHECKPOINTS, str(tmp / "checkpoints"), str(ROOT / "reports/study/checkpoints"),
                 size, str(_workers()), str(found)]  # fmt: skip
        subprocess.run(setup, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        return [sys.executable, "-c", STUDY_RUN, str(tmp / "study"), size, str(found), str(_workers())], ROOT
    if case == "study-vision-zoo":
        models = "deit,deit-grc" if smoke else ZOO_DEITS
        return [sys.executable, "-c", STUDY_PIECE, str(tmp / "study"), "8" if smoke else "500", models,
                str(_workers())], ROOT  # fmt: skip
    if case == "ci":
        clone = tmp / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        return ["bash", ".ci/run"], clone
    raise SystemExit(f"B14_CASES: unknown case {case!r}; the cases are {', '.join(LIMITS)}.")


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    B.resolve_device(device)
    cases = [c.strip() for c in os.environ.get("B14_CASES", ",".join(DEFAULT_CASES)).split(",") if c.strip()]
    if smoke:
        cases = [c for c in cases if c != "ci"]
    unknown = [c for c in cases if c not in LIMITS]
    if unknown:
        raise SystemExit(f"B14_CASES: unknown case {unknown[0]!r}; the cases are {', '.join(LIMITS)}.")
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="robfilt-b14-") as tmp:
        for case in cases:
            cmd, cwd = commands(case, Path(tmp), smoke)
            before = os.getloadavg()[0]
            wall, cpu = timed_run(cmd, env, cwd)
            after = os.getloadavg()[0]
            records.append({"case": case, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                            "target_s": LIMITS[case], "met": "yes" if wall <= LIMITS[case] else "NO",
                            "load_before": round(before, 2), "load_after": round(after, 2)})  # fmt: skip
    table = pd.DataFrame(records)
    notes = [
        f"Each case once, a fresh process with robfilt's defaults on {_workers()} usable core(s) (worker processes, "
        "one torch thread each); wall time includes start-up. load_before/after: the machine's 1-minute load "
        "when the case started and ended (the targets are for two idle cores; a busy machine has no idle core).",
        "gate: robfilt check --spec robustness.toml (make ci-gate's run, baseline included); demo: make demo's "
        "command; study-vision: the study's vision-attack piece for one seed on the study's own seed-0 checkpoints "
        "(made before the clock starts); study-vision-zoo: the same piece on the zoo checkpoints; ci: bash .ci/run "
        "in a fresh clone (the last two only when B14_CASES names them).",
    ]
    result = {
        "benchmark": NAME,
        "title": "B14 wall time: the gate, the demo and the study's vision piece as a user runs them",
        "question": "How long does a user wait for the gate, the demo and the study's vision-attack piece on 2 cores?",
        "mode": "smoke" if smoke else "full",
        "settings": {"cases": cases, "seed": seed, "limits_s": {c: LIMITS[c] for c in cases}},
        "machine": B.machine(),
        "targets": {f"{r['case']} wall seconds": B.target(r["wall_s"], r["target_s"], "<=") for r in records},
        "notes": notes,
    }
    return B.finish(NAME, result, {"wall time per job": table}, out)


if __name__ == "__main__":
    B.cli(run)
