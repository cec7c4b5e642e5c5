"""robfilt's own worker processes (``--workers``): the one-process rows for every kind of run, the default count,
and the ways a run ends (a worker's error, Ctrl-C, ``--resume`` with another count) as in one process.

Processes meet through files and pipes here, never through sleeps: a model that must stop in a worker writes its
pid into a named pipe (the test blocks reading it) and then waits for a signal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from dist_kinds import TORCHRUN_ENV

from robustbench_filters.cli import run
from robustbench_filters.core import cores, workers
from robustbench_filters.core.errors import RobfiltError

needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no gloo backend")
INTERRUPTED = "interrupted; continue with --resume"

# A linear model that, when MODE says so, fails or stops in its forward on a unit's clean pass (no grad, a batch of 3
# or more: the runner's probes use 2 examples, the model checks 1). "fail-any" fails in any process;
# "fail-worker" / "block-worker" only in a worker process, and then first tell the test through the FIFO; the
# parent's own attack forward waits for that message in "fail-worker", so the worker surely fails on a unit.
FACTORY = r"""
import multiprocessing, os, threading
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(784, 10)

    def forward(self, x):
        mode = os.environ.get("ROBFILT_TEST_MODE", "")
        if not torch.is_grad_enabled() and x.shape[0] >= 3 and mode:
            worker = multiprocessing.parent_process() is not None
            if mode == "fail-any" or (mode == "fail-worker" and worker):
                if worker:
                    with open(os.environ["ROBFILT_TEST_FIFO"], "w") as f:
                        f.write(f"{os.getpid()}\n")
                raise ValueError("boom")
            if mode == "fail-worker" and not os.environ.get("ROBFILT_TEST_SEEN"):
                with open(os.environ["ROBFILT_TEST_FIFO"]) as f:  # until the worker has failed
                    f.read()
                os.environ["ROBFILT_TEST_SEEN"] = "1"
            if mode == "block-worker" and worker:
                with open(os.environ["ROBFILT_TEST_FIFO"], "w") as f:
                    f.write(f"{os.getpid()}\n")
                threading.Event().wait()
        return self.lin(x.flatten(1))


def build():
    return Net()
"""


@pytest.fixture
def no_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)


def _same_run(a: Path, b: Path) -> None:
    """Row for row and byte for byte: the merged rows and the summary."""
    assert (a / "rows.parquet").read_bytes() == (b / "rows.parquet").read_bytes(), (a, b)
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes(), (a, b)


# --- how many ---------------------------------------------------------------------------------------------------


def _cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "proc").write_text(proc)
    return root, tmp_path / "proc"


def test_cgroup_quotas_bound_the_cores(tmp_path: Path) -> None:
    v2 = _cgroup(
        tmp_path / "a", "0::/user/job\n", {"user/cpu.max": "150000 100000\n", "user/job/cpu.max": "max 100000"}
    )
    assert cores.cgroup_limit(*v2) == 2  # the parent's 1.5 cores bound the child; a fraction rounds up
    v2_none = _cgroup(tmp_path / "b", "0::/\n", {"cpu.max": "max 100000"})
    assert cores.cgroup_limit(*v2_none) is None
    v1 = _cgroup(tmp_path / "c", "4:cpu,cpuacct:/docker/x\n2:memory:/\n",
                 {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "50000", "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000",
                  "cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"})  # fmt: skip
    assert cores.cgroup_limit(*v1) == 1
    garbled = _cgroup(tmp_path / "d", "0::/\n", {"cpu.max": "lots"})
    assert cores.cgroup_limit(*garbled) is None
    assert cores.cgroup_limit(tmp_path / "missing", tmp_path / "missing-proc") is None


def test_usable_cores_is_the_affinity_set_within_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(cores, "cgroup_limit", lambda: None)
    assert cores.usable_cores() == 4
    monkeypatch.setattr(cores, "cgroup_limit", lambda: 2)
    assert cores.usable_cores() == 2
    monkeypatch.setattr(cores, "cgroup_limit", lambda: 8)
    assert cores.usable_cores() == 4


def test_how_many_workers(monkeypatch: pytest.MonkeyPatch, no_torchrun_env: None) -> None:
    monkeypatch.delenv(workers.ENV, raising=False)
    assert workers.resolve(None, default=3) == 3 and workers.resolve(None) == 1  # the CLI's default; the API's
    assert workers.resolve(2, default=3) == 2
    monkeypatch.setenv(workers.ENV, "4")
    assert workers.resolve(None, default=3) == 4 and workers.resolve(1, default=3) == 1
    for bad in (0, 257, True, 2.5):
        with pytest.raises(RobfiltError, match="whole number from 1 to 256"):
            workers.resolve(bad)
    monkeypatch.setenv(workers.ENV, "two")
    with pytest.raises(RobfiltError, match="ROBFILT_WORKERS='two'"):
        workers.resolve(None)
    monkeypatch.setenv(workers.ENV, "4")
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun its ranks are the processes: robfilt starts none
    monkeypatch.setenv("RANK", "1")
    assert workers.resolve(None, default=3) == 1 and workers.resolve(5) == 1
    with workers.pool(4) as opened:
        assert opened is None and workers.current() is None


def test_threads_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    # one per process whatever the count (rows must not depend on --workers), unless --threads / OMP_NUM_THREADS
    assert workers.thread_count(1) == 1 and workers.thread_count(2) == 1 and workers.thread_count(16) == 1
    assert workers.thread_count(2, threads=3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # where --threads puts its value
    assert workers.thread_count(8) == 2


def test_bad_worker_counts_are_one_line_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    args = ["attack", "--model", "deit", "--attack", "fgsm", "--checkpoint", "none", "-n", "2", "--quiet"]
    assert run([*args, "--workers", "0", "--out", str(tmp_path / "a")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == ["error: --workers must be a whole number from 1 to 256, got 0."]
    assert not (tmp_path / "a").exists()


STARTS_FIRST = """
import sys
from robustbench_filters.core import workers

before = "torch" in sys.modules  # what the command line has imported when it starts its workers
if __name__ == "__main__":
    procs = []
    try:
        with workers.pool(2, warm=[]) as opened:
            procs = list(opened._procs)
            print("torch before the workers:", before, "store:", opened._store is not None, flush=True)
            raise KeyboardInterrupt  # leave before any job, as Ctrl-C would
    except KeyboardInterrupt:
        pass
    print("ended:", [p.exitcode is not None for p in procs])
"""


def test_workers_start_before_torch_loads_and_end_with_a_pool_that_ran_nothing(no_torchrun_env: None) -> None:
    """The command line starts its workers before it imports torch (they learn the store's port over their pipe),
    so the two imports overlap; a pool left before its first job still ends every worker."""
    out = subprocess.run([sys.executable, "-c", STARTS_FIRST], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["torch before the workers: False store: True", "ended: [True]"]


def test_a_run_that_cannot_be_sent_is_refused_before_any_work(tmp_path: Path, no_torchrun_env: None) -> None:
    from robustbench_filters.api.evaluate import evaluate

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    model.note = lambda: None  # a lambda does not pickle
    with pytest.raises(RobfiltError, match=r"^workers 2 sends the run to worker processes, .* pass workers=1"):
        evaluate(model, ["fgsm"], [0.05], n_examples=4, out=tmp_path / "run", workers=2)
    assert not (tmp_path / "run").exists() and workers.current() is None


def _two_ranks() -> tuple[object, object, object]:
    """Two pooled contexts on one store (this process plays both ranks): the queue's arithmetic, no processes."""
    import datetime as dt

    from robustbench_filters.core.distributed import DistContext

    master = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=dt.timedelta(seconds=30), wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", master.port, 2, False, timeout=dt.timedelta(seconds=30))
    zero = DistContext(rank=0, world_size=2, store=master, job=7)
    one = DistContext(rank=1, world_size=2, local_rank=1, store=client, job=7)
    return master, zero, one


def _replay(order: list, seconds: dict, processes: int = 2, late: float = 1.0) -> list[list]:
    """Units taken from the queue in ``order`` by processes of equal speed, each taking the next unit when free
    (rank 0 starting ``late`` seconds after the others: it runs the model checks first); who took what."""
    free, taken = [late] + [0.0] * (processes - 1), [[] for _ in range(processes)]
    for unit in order:
        p = free.index(min(free))
        free[p] += seconds[unit.model]
        taken[p].append(unit)
    return taken


def test_the_queue_hands_every_model_to_every_process() -> None:
    """Equal-cost units whose models really differ (one costs 19 s a unit, the other 17.5: B13's gate part) must
    not fall into step with two processes, one taking every unit of the dearer model; the most expensive units still
    go first and the short last batch last."""
    from robustbench_filters.runs.runner import queue_order
    from robustbench_filters.runs.units import Unit

    work = {"pgd": 64.0, "clean": 1.0}

    def cost(u: Unit) -> float:
        return work[u.part] * (0.5 if u.batch == 3 else 1.0)  # the last batch is short

    for models in (2, 3, 4):
        units = [Unit(m, part, b) for m in range(models) for part in ("pgd", "clean") for b in range(4)]
        order = queue_order(units, cost)
        assert sorted(order) == sorted(units)
        assert [u.part for u in order[: 3 * models]] == ["pgd"] * (3 * models)  # full pgd batches first
        assert {u.batch for u in order[2 * models : 3 * models]} == {2}
        attacks = [u for u in order if u.part == "pgd"]
        seconds = {m: 17.5 + 1.5 * m for m in range(models)}
        for took in _replay(attacks, seconds):
            assert {u.model for u in took} == set(range(models)), (models, took)


def test_the_shared_queue_hands_out_every_unit_once_and_counts_progress() -> None:
    from robustbench_filters.core.workqueue import WorkQueue

    _, zero, one = _two_ranks()
    a, b = WorkQueue(zero), WorkQueue(one)
    units = list(range(7))
    mine_a, mine_b = a.units(units), b.units(units)
    taken: dict[str, list[int]] = {"a": [], "b": []}
    for who, it in (("a", mine_a), ("b", mine_b), ("b", mine_b), ("a", mine_a), ("b", mine_b)):
        taken[who].append(next(it))
    taken["a"] += list(mine_a)  # a takes the rest; b finds the queue empty
    assert list(mine_b) == []
    assert sorted(taken["a"] + taken["b"]) == units and taken["b"] == [1, 2, 4]
    b.publish(5, force=True)
    assert a.others_done() == 5 and b.others_done() == 0
    b.finish()
    reports: list[int] = []
    a.finish()  # the last rank to finish: rank 0's wait returns at once
    a.wait_all(lambda: reports.append(1))
    assert reports == []


def test_rank_zero_waits_for_the_last_rank_quietly(capfd) -> None:
    """Rank 0 draws the bar until the last rank finishes, and its waiting writes nothing to stderr (a store wait
    with a timeout wrote two c10d warnings per look: hundreds of lines at the end of a long run)."""
    from robustbench_filters.core.workqueue import WorkQueue

    _, zero, one = _two_ranks()
    b = WorkQueue(one)
    looks: list[float] = []

    def sleep(seconds: float) -> None:  # the other rank finishes while rank 0 waits (no real time passes)
        looks.append(seconds)
        if len(looks) == 3:
            b.finish()

    a = WorkQueue(zero, sleep=sleep)
    a.finish()
    reports: list[int] = []
    a.wait_all(lambda: reports.append(1))
    assert len(reports) == 3 and len(looks) == 3
    assert "c10d" not in capfd.readouterr().err


def test_a_failed_rank_stops_the_others_taking_units() -> None:
    from robustbench_filters.core.workqueue import WorkQueue

    _, zero, one = _two_ranks()
    a, b = WorkQueue(zero), WorkQueue(one)
    it = a.units(list(range(5)))
    assert next(it) == 0
    b.abort()
    assert a.aborted() and list(it) == []


def test_outside_a_pool_the_queue_hands_out_what_it_is_given() -> None:
    from robustbench_filters.core.distributed import DistContext
    from robustbench_filters.core.workqueue import WorkQueue

    queue = WorkQueue(DistContext())
    assert list(queue.units([3, 1, 2])) == [3, 1, 2]
    queue.publish(3)
    queue.finish()
    queue.wait_all(lambda: None)
    assert queue.others_done() == 0 and not queue.aborted()


def test_a_pooled_failure_travels_as_the_exception_itself() -> None:
    from robustbench_filters.core import distributed as D
    from robustbench_filters.core.errors import RunStateError

    err = OSError(28, "No space left on device", "/x/parts/m0.parquet")
    copy = D.portable(err)
    assert type(copy) is OSError and (copy.errno, copy.filename) == (28, "/x/parts/m0.parquet")
    assert isinstance(D.portable(RunStateError("locked")), RunStateError)

    class Local(Exception):  # a class pickle cannot find by name
        pass

    assert D.portable(Local("x")) == ("Local", "x")
    pooled = D.DistContext(rank=0, world_size=2, store=object())
    assert str(D._reraise(pooled, 1, ("RunStateError", "locked"))) == "locked"  # no "rank 1:" in a pool
    assert str(D._reraise(D.DistContext(world_size=2), 1, ("RunStateError", "locked"))) == "rank 1: locked"


# --- the same rows ------------------------------------------------------------------------------------------------


@needs_gloo
def test_every_kind_with_two_workers_equals_one_process(
    tmp_path: Path, no_torchrun_env: None, every_kind_alone: Path
) -> None:
    """Image attack (the default attack and a weak one), LM attack, corruption, Lipschitz and certify runs: two
    processes (one pool for all five runs, as a command keeps it) give the one-process rows, byte for byte."""
    import dist_kinds

    from robustbench_filters.api.evaluate import evaluate
    from robustbench_filters.core.threads import kept_threads

    saved = {"checkpoint": "none", "n_examples": 6, "batch_size": 2, "save_adversarial": True}  # temporary folders
    with kept_threads():  # as --workers 1 computes: this process alone, one torch thread (workers.thread_count)
        torch.set_num_threads(1)
        alone = evaluate("deit", ["fgsm"], [0.05], **saved).adversarial()
    with workers.pool(2) as pool:
        dist_kinds.run_all(tmp_path / "two")
        pooled = evaluate("deit", ["fgsm"], [0.05], **saved).adversarial()
        assert pool is not None and pool.job == len(dist_kinds.KINDS) + 1  # one worker start served every run
    assert torch.equal(alone[0], pooled[0]) and torch.equal(alone[1], pooled[1])  # adversarial examples too
    for kind in dist_kinds.KINDS:
        _same_run(every_kind_alone / kind, tmp_path / "two" / kind)
        manifest = json.loads((tmp_path / "two" / kind / "manifest.json").read_text())
        assert manifest["world_size"] == 2 and manifest["status"] == "complete", kind


# --- the ways a run ends ------------------------------------------------------------------------------------------


def _factory(tmp_path: Path) -> str:
    path = tmp_path / "blocking.py"
    path.write_text(FACTORY)
    return f"{path}:build"


def _attack_args(model: str, out: Path, count: int) -> list[str]:
    return ["attack", "--model", model, "--attack", "fgsm", "--eps", "0.02,0.05", "-n", "12", "--batch-size", "3",
            "--out", str(out), "--workers", str(count), "--quiet"]  # fmt: skip


def _complete_parts(out: Path) -> list[str]:
    """The finished units, after checking that nothing is half-written: no temp file, every part with its record."""
    if not (out / "parts").exists():  # stopped before the first unit was written
        return []
    names = sorted(p.name for p in (out / "parts").iterdir())
    assert not [n for n in names if n.startswith(".")], names
    done = [n[: -len(".parquet")] for n in names if n.endswith(".parquet")]
    assert sorted(n[: -len(".json")] for n in names if n.endswith(".json")) == done
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_gloo
def test_a_worker_error_is_the_one_process_error_and_resume_finishes_with_any_count(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_torchrun_env: None
) -> None:
    model = _factory(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("ROBFILT_TEST_FIFO", str(fifo))
    monkeypatch.setenv("ROBFILT_TEST_MODE", "fail-any")
    assert run(_attack_args(model, tmp_path / "one", 1)) == 2
    alone = capfd.readouterr().err.strip().splitlines()
    monkeypatch.setenv("ROBFILT_TEST_MODE", "fail-worker")
    assert run(_attack_args(model, tmp_path / "two", 2)) == 2
    pooled = capfd.readouterr().err.strip().splitlines()
    assert len(alone) == len(pooled) == 1 and "rank" not in pooled[0]
    assert alone[0].startswith("error: model ") and " raised ValueError: boom in m0-clean-b0000; " in alone[0], alone
    unit = re.compile(r"m0-(fgsm|clean)-b\d{4}")  # the worker failed on the unit it had taken
    assert unit.sub("UNIT", pooled[0]) == unit.sub("UNIT", alone[0])
    assert workers.current() is None
    # the parts finished before the error stay; --resume with any count finishes the run as one process would
    assert _complete_parts(tmp_path / "two")
    monkeypatch.delenv("ROBFILT_TEST_MODE")
    hook = _Recorder()
    from robustbench_filters.api.evaluate import evaluate

    options = {"attacks": ["fgsm"], "eps": [0.02, 0.05], "n_examples": 12, "batch_size": 3}
    evaluate(model, out=tmp_path / "two", resume=True, workers=2, progress=hook, **options)
    evaluate(model, out=tmp_path / "fresh", **options)
    _same_run(tmp_path / "fresh", tmp_path / "two")
    total = 4 * 2 + 4  # 4 attack units of 2 eps each, 4 clean units
    assert hook.calls[0][1] == 0 and hook.calls[1][1] > 0  # the finished units' work counted at once
    assert hook.calls[-1][1:] == (total, total)
    assert all(a[1] <= b[1] for a, b in zip(hook.calls, hook.calls[1:], strict=False))


@needs_gloo
def test_a_failed_sanity_check_exits_3_with_workers_as_alone(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_torchrun_env: None
) -> None:
    from test_exit_codes import MASKED  # a model whose rounding masks gradients: a sanity check fails

    (tmp_path / "masked.py").write_text(MASKED)
    monkeypatch.chdir(tmp_path)
    argv = ["attack", "--model", "masked.py:build", "--attack", "fgsm", "--eps", "0.1", "-n", "8", "--batch-size", "4",
            "-q"]  # fmt: skip
    lines = []
    for count in ("1", "2"):
        assert run([*argv, "--out", f"w{count}", "--workers", count]) == 3
        lines.append(capfd.readouterr().err.strip().splitlines()[-1])
    assert lines[0] == lines[1] and "sanity check(s) failed" in lines[0]
    _same_run(tmp_path / "w1", tmp_path / "w2")


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, task: str, completed: int, total: int, info: str = "") -> None:
        self.calls.append((task, completed, total))


def _sigint_default() -> None:
    """Ctrl-C as a terminal delivers it (a test runner started in the background ignores SIGINT, and children
    inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@needs_gloo
@pytest.mark.slow
def test_ctrl_c_ends_every_process_with_nothing_half_written(tmp_path: Path, no_torchrun_env: None) -> None:
    """Ctrl-C at a terminal reaches the whole process group while a worker computes: the command ends with the
    one-process line and exit code, no worker outlives it, and the folder resumes (with one process)."""
    model = _factory(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env |= {"ROBFILT_TEST_MODE": "block-worker", "ROBFILT_TEST_FIFO": str(fifo), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "robustbench_filters.cli", *_attack_args(model, out, 2)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_sigint_default)  # fmt: skip
    try:
        with open(fifo) as f:  # the worker is inside its forward now
            pid = int(f.readline())
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == INTERRUPTED, err
    assert not _alive(pid)
    done = _complete_parts(out)
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    assert len(done) < 8
    assert run([*_attack_args(model, out, 1), "--resume"]) == 0  # in this process (no ROBFILT_TEST_MODE here)
    assert run(_attack_args(model, tmp_path / "fresh", 1)) == 0
    _same_run(tmp_path / "fresh", out)


# --- the gate and the study ---------------------------------------------------------------------------------------

SPEC = """version = 1
name = "workers"
out = "gate"
sanity = "warn"

[image]
models = ["deit", "deit-grc"]
eps = [0.02]
n_examples = 8
batch_size = 2
steps = 3
seed = 0

[[image.require]]
attack = "clean"
min_acc = 0.0

[lm]
models = ["lm"]
attacks = ["wordswap"]
rates = [0.1]
n_examples = 4
batch_size = 2
seed = 0

[[lm.require]]
attack = "clean"
max_ppl = 1000.0

[lipschitz]
models = ["deit"]
n_examples = 2
batch_size = 1
method = "power"
power_iters = 3
seed = 0

[[lipschitz.require]]
max_lipschitz_lower = 1e9
"""


@needs_gloo
@pytest.mark.slow
def test_the_gate_with_two_workers_makes_the_one_process_runs(
    tmp_path: Path, gate_in_process: Path, no_torchrun_env: None, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "robustness.toml"
    spec.write_text(SPEC)
    (tmp_path / "pyproject.toml").write_text("")
    for count in (1, 2):
        code = run(["check", "--spec", str(spec), "--out", str(tmp_path / f"w{count}"), "--workers", str(count),
                    "--quiet", "--json"])  # fmt: skip
        result = json.loads(capfd.readouterr().out)
        assert code == 0 and result["passed"], result
    for section in ("image", "lm", "lipschitz"):
        _same_run(tmp_path / "w1" / section, tmp_path / "w2" / section)


@needs_gloo
@pytest.mark.slow
def test_the_study_with_two_workers_makes_the_one_process_pieces(tmp_path: Path, no_torchrun_env: None) -> None:
    """Every piece kind of the smoke study (its models are checkpoints held in memory: they travel as spec and
    weights), training included: the one-process rows. The one process computes with one torch thread, as
    ``--workers 1`` and every worker do: the API keeps its caller's thread count, and training under two threads adds
    its float reductions in another order (other weights, whose card says so), which is how this test failed under
    ``make test-slow`` (no pytest-xdist, so the test process kept torch's two threads) until 2026-12-08."""
    from small_study import smoke_plan

    from robustbench_filters.core.threads import kept_threads
    from robustbench_filters.study import run_study

    with kept_threads():
        torch.set_num_threads(1)
        run_study(smoke_plan(), tmp_path / "one", report=False)
    run_study(smoke_plan(), tmp_path / "two", report=False, workers=2)
    folders = sorted(p.parent.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("rows.parquet"))
    assert len(folders) == 8
    for folder in folders:
        _same_run(tmp_path / "one" / folder, tmp_path / "two" / folder)
    frame = pd.read_parquet(tmp_path / "two" / folders[0] / "rows.parquet")
    assert len(frame) > 0
