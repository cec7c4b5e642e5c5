"""Shared fixtures: deterministic seeds, tiny inputs for the model tests, one finished run folder for the session,
and the gate evaluated in this process."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

# The suite computes in this process too (commands run in-process), and OpenMP reads its wait policy once, when
# torch loads it: without this, waiting threads spin, and beside other busy processes every parallel region ends in
# spinning. Measured with two busy loops on 2 cores: tests/test_crown_models.py took 125 s with PASSIVE and had done
# 15 of its 47 tests after 240 s without. robfilt's own commands set the policy with the same function, and
# importing it does not load torch.
if "torch" in sys.modules:  # a plugin loaded it first: the policy is fixed already; say so, the suite still runs
    warnings.warn("torch was imported before tests/conftest.py: OpenMP's waiting threads may spin", stacklevel=1)
from robustbench_filters.core.threads import configure_threads  # noqa: E402

configure_threads(None)
# Under pytest-xdist (make test runs one pytest worker per core) each worker computes with one torch thread, as
# robfilt's own worker processes do: two workers with two threads each would contend for 2 cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# The suite's commands compute in their own process (tests/test_workers.py starts worker processes on purpose):
# robfilt's default, one process per core, would start workers for every command a test runs. Child processes
# the tests start inherit it. Set ROBFILT_WORKERS yourself to run the suite with workers.
os.environ.setdefault("ROBFILT_WORKERS", "1")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (make test) starts one pytest worker per core robfilt may use (CPU affinity and cgroup quotas,
    as ``--workers`` counts them), not one per core the machine has."""
    from robustbench_filters.core.cores import usable_cores

    return usable_cores()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` (make test) hands out the heaviest files first and keeps the files that read one session
    folder in one worker (tests/scheduling.py); any other ``--dist`` is xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    from scheduling import HeavyFirst

    return HeavyFirst(config, log)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same RNG state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _library_logging() -> Iterator[None]:
    """An in-process CLI call installs the library's log handler and level (setup_logging); put them back, so a
    later test that counts stderr lines does not see INFO lines because of which test ran before it."""
    log = logging.getLogger("robustbench_filters")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers, log.level, log.propagate = saved[0], saved[1], saved[2]


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """A folder ``make(folder)`` fills, made once per test session: under pytest-xdist the first worker that asks
    makes it in the temp root all workers share, holding a file lock the others wait on (an event, not a sleep);
    a marker written last says it is complete, so a worker that died halfway leaves nothing a later one trusts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # the run's temp root, one level above each worker's own
    done = root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
            make(folder)
            done.write_text(str(folder))
    return Path(done.read_text())


def _finish_run(folder: Path) -> None:
    import finished

    from robustbench_filters.cli import run

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a child process (OMP_NUM_THREADS=1): its numbers equal a child's
    try:
        assert run([*finished.ARGS, "--out", str(folder / "run")]) == 0
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A finished run folder (``finished.ARGS``), made once per session: read it, never change it (use
    ``finished_run_copy``). The session fails if a test changed it, so one test cannot skew another."""
    import finished

    out = made_once(tmp_path_factory, "finished", _finish_run) / "run"
    made = finished.digest(out)
    yield out
    assert finished.digest(out) == made, f"a test changed the shared finished run {out}; work on a copy"


def _every_kind_alone(folder: Path) -> None:
    import dist_kinds

    from robustbench_filters.core.threads import kept_threads

    with pytest.MonkeyPatch.context() as env, kept_threads():
        for name in dist_kinds.TORCHRUN_ENV:  # this process alone, whatever started pytest
            env.delenv(name, raising=False)
        torch.set_num_threads(1)  # as --workers 1 and each torchrun rank compute: one torch thread
        dist_kinds.run_all(folder / "one")


@pytest.fixture(scope="session")
def every_kind_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of run (tests/dist_kinds.py) computed by this process alone, made once per session: the rows that
    two workers (tests/test_workers.py) and two torchrun ranks (tests/test_distributed.py) must give. Read only."""
    return made_once(tmp_path_factory, "every-kind-alone", _every_kind_alone) / "one"


@pytest.fixture
def finished_run_copy(finished_run: Path, tmp_path: Path) -> Path:
    """This test's own copy of :func:`finished_run`, at ``tmp_path/run``: tamper with it, resume it, lock it."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out


@pytest.fixture
def gate_in_process(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``run(["check", ...])`` evaluates the gate in this process instead of in a supervised child (each child pays
    ~10 s of imports). The test's process poses as that child: it has the child's environment marker, and the gate
    writes its result record (returned here) as the child would. The exit codes and stderr lines are the child's own,
    which the supervisor passes on unchanged; the supervisor itself is tested with real children in
    tests/test_exit_codes.py and tests/test_gate_check.py::test_json_output_shape."""
    from robustbench_filters.cli.check import CHILD_ENV

    record = tmp_path_factory.mktemp("gate-record") / "result.json"
    monkeypatch.setenv(CHILD_ENV, f"in-process:{record}")
    return record


@pytest.fixture(scope="session")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-seed smoke study as a clone holds it (tests/small_study.py); copy it before changing it."""
    from small_study import finished_study

    return made_once(tmp_path_factory, "small-study", lambda folder: finished_study(folder / "study")) / "study"


@pytest.fixture
def images() -> torch.Tensor:
    """Two Fashion-MNIST-shaped images in [0, 1] (the input range of every image model)."""
    return torch.rand(2, 1, 28, 28)


@pytest.fixture
def tokens() -> torch.Tensor:
    """Two token sequences of length 24 for the micro LM (vocab 128)."""
    return torch.randint(0, 128, (2, 24))


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """A tiny GPT-2 and a tiny Llama with a BPE tokenizer, saved with save_pretrained (tests/_hf_models.py)."""
    from _hf_models import build

    return build(tmp_path_factory.mktemp("hf"))
