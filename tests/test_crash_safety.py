"""Crash safety with real process kills: kill -9 at a seeded point the child reports (tests/crash_kill.py), then
--resume gives identical results.

A reader must refuse the unfinished run in between, and a second writer must be locked out while a run is live.
The other kinds of run (LM, corruption, Lipschitz, certify) and Ctrl-C are in tests/test_crash_resume_kinds.py.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import finished
import pandas as pd
import pytest
import safetensors.torch
import torch
from crash_kill import ENV, assert_same_run, finish_here, parts, paused_at

from robustbench_filters.core.errors import RunStateError
from robustbench_filters.runs.folder import load_run

ATTACK = [
    "attack",
    "--model",
    "deit",
    "--attack",
    "pgd",
    "--steps",
    "10",
    "--eps",
    "0.01,0.05",
    "--checkpoint",
    "none",
    "--n-examples",
    "40",
    "--batch-size",
    "4",
    "-q",
]
TRAIN = ["train", "--model", "deit-grc", "--steps", "24", "--batch-size", "16", "--ckpt-every", "4", "-q"]


# Where a kill -9 can leave a unit, each a point the child reports: its finished temp file not yet renamed, its
# parquet renamed but its hash record not yet written, or both written.
KILL_POINTS = {"temp file": "parts/.*.parquet.*.tmp", "parquet only": "parts/*.parquet", "recorded": "parts/*.json"}


def _kill_and_resume_attack(tmp_path: Path, seed: int) -> None:
    """kill -9 at a seeded unit and point of its write, then --resume: the same run as one never killed."""
    reference = tmp_path / "reference"
    finish_here(ATTACK + ["--out", str(reference)])
    killed = tmp_path / "killed"
    rng = random.Random(seed)
    at, point = rng.randint(1, 15), rng.choice(sorted(KILL_POINTS))
    with paused_at(ATTACK + ["--out", str(killed)], killed, KILL_POINTS[point], at) as child:
        assert parts(killed) == (at - 1 if point == "temp file" else at)
        assert child.stop(signal.SIGKILL)[0] == -signal.SIGKILL
    assert (killed / ".lock").exists()  # the dead process left its lock behind
    with pytest.raises(RunStateError, match="unfinished"):
        load_run(killed)
    finish_here(ATTACK + ["--out", str(killed), "--resume"])  # reclaims the stale lock
    assert_same_run(reference, killed)
    assert not list(killed.rglob("*.tmp"))  # the dead write's temp file is swept


def test_kill9_attack_then_resume_is_identical(tmp_path):
    _kill_and_resume_attack(tmp_path, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill9_attack_at_random_points(tmp_path, seed):
    _kill_and_resume_attack(tmp_path, seed)


def _train_step(out: Path) -> int:
    import json

    return json.loads((out / "train_state" / "state.json").read_text())["step"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_kill9_training_then_resume_reaches_the_same_weights(tmp_path, seed):
    reference = tmp_path / "reference"
    finish_here(TRAIN + ["--out", str(reference)])
    killed = tmp_path / "killed"
    kill_at = random.Random(seed).choice([4, 8, 12, 16])
    # the state folder lands by a rename every 4 steps (--ckpt-every 4): stop right after the one of step kill_at
    with paused_at(TRAIN + ["--out", str(killed)], killed, "train_state", kill_at // 4) as child:
        assert _train_step(killed) == kill_at
        assert child.stop(signal.SIGKILL)[0] == -signal.SIGKILL
    finish_here(TRAIN + ["--out", str(killed), "--resume"])
    a = safetensors.torch.load_file(str(reference / "model.safetensors"))
    b = safetensors.torch.load_file(str(killed / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_second_writer_on_the_same_out_is_locked_out(finished_run_copy):
    """While this process holds a run folder's lock, another robfilt process that would write there (--resume) is
    refused in one line, exit 2, and changes nothing; so is --overwrite. Once the lock is released it runs."""
    from robustbench_filters.cli import run
    from robustbench_filters.runs.lock import RunLock

    out, args = finished_run_copy, finished.ARGS
    with RunLock(out):  # the test itself is the live writer: no race with a run that might finish first
        before = _snapshot(out)
        second = subprocess.run(
            [sys.executable, "-m", "robustbench_filters.cli", *args, "--out", str(out), "--resume"],
            env=ENV,
            capture_output=True,
            text=True,
        )
        assert second.returncode == 2, second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and "being written by another robfilt process" in err[0]
        assert _snapshot(out) == before
        assert run([*args, "--out", str(out), "--overwrite"]) == 2  # not even --overwrite removes a live run
        assert _snapshot(out) == before
    finish_here([*args, "--out", str(out), "--resume"])  # the refusals were the lock's: free, it runs
    assert load_run(out).manifest["status"] == "complete"


@pytest.mark.parametrize("error", ["ENOSPC", "EACCES"])
def test_write_failure_mid_run_ends_cleanly_and_resume_finishes(tmp_path, capfd, monkeypatch, error):
    """A full disk (or lost permission) after some units: one-line error, complete parts intact, resume works."""
    import errno

    import robustbench_filters.core.io as results
    from robustbench_filters.cli import run

    args = ["16" if a == "40" else a for a in ATTACK]
    reference = tmp_path / "reference"
    assert run(args + ["--out", str(reference)]) == 0
    real = results.atomic_write
    calls = {"n": 0}

    def failing(path, write):
        if "parts" in str(path) and str(path).endswith(".parquet"):
            calls["n"] += 1
            if calls["n"] > 3:
                code = getattr(errno, error)
                raise OSError(code, "No space left on device" if error == "ENOSPC" else "Permission denied", str(path))
        return real(path, write)

    monkeypatch.setattr(results, "atomic_write", failing)
    out = tmp_path / "run"
    assert run(args + ["--out", str(out)]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--resume" in err[0]
    parts = sorted((out / "parts").glob("*.parquet"))
    assert len(parts) == 3 and all(len(pd.read_parquet(p)) for p in parts)  # complete units survive
    assert not list(out.rglob("*.tmp")) and not (out / "summary.json").exists()
    assert not (out / ".lock").exists()  # released on the way out
    monkeypatch.setattr(results, "atomic_write", real)
    assert run(args + ["--out", str(out), "--resume"]) == 0
    a, b = load_run(reference), load_run(out)
    pd.testing.assert_frame_equal(a.rows, b.rows)
    assert a.summary == b.summary


TINY = [{"40": "4", "10": "1"}.get(a, a) for a in ATTACK]  # 2 units


def _leave_killed_first_manifest(out: Path) -> None:
    """What a kill -9 inside the first manifest write leaves: the lock file and the temp file of that write."""
    out.mkdir()
    (out / ".lock").write_text("pid=999999 host=gone\n")
    (out / ".manifest.json.k2j3x_9q.tmp").write_text('{"format": "robfilt-run", "kin')


@pytest.mark.parametrize("again", [["--resume"], []], ids=["resume", "plain"])
def test_a_folder_killed_in_its_first_manifest_write_runs_again(tmp_path, again):
    """Before the manifest landed there is no run to refuse: the same command, with or without --resume, starts it
    there (it used to be refused as a folder of someone else's files) and sweeps the dead write's temp file."""
    from robustbench_filters.cli import run

    out = tmp_path / "run"
    _leave_killed_first_manifest(out)
    assert run(TINY + ["--out", str(out), *again]) == 0
    assert load_run(out).manifest["status"] == "complete"
    assert not list(out.rglob("*.tmp")) and not (out / ".lock").exists()


def test_someone_elses_temp_file_still_makes_a_foreign_folder(tmp_path, capfd):
    """Only robfilt's own temp manifest is ignored: other hidden files keep the folder off limits."""
    from robustbench_filters.cli import run

    out = tmp_path / "run"
    out.mkdir()
    (out / ".notes.tmp").write_text("mine")
    assert run(TINY + ["--out", str(out)]) == 2
    assert "not a robfilt run folder" in capfd.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [".notes.tmp"]


_DIE_AT_FIRST_MANIFEST = """
import os, signal, sys
real = os.replace
def replace(src, dst):  # kill -9 between the temp file of the first manifest write and its rename
    if str(dst).endswith("manifest.json"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.replace = replace
from robustbench_filters.cli import run
run(sys.argv[1:])
"""


@pytest.mark.slow
def test_kill9_in_the_first_manifest_write_then_resume(tmp_path):
    """The real kill leaves exactly the lock and a temp manifest (the state the test above builds); --resume runs."""
    out = tmp_path / "run"
    died = subprocess.run([sys.executable, "-c", _DIE_AT_FIRST_MANIFEST, *TINY, "--out", str(out)], env=ENV)
    assert died.returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 2 and left[0] == ".lock" and left[1].startswith(".manifest.json."), left
    finish_here(TINY + ["--out", str(out), "--resume"])
    assert load_run(out).manifest["status"] == "complete"
    assert not list(out.rglob("*.tmp"))


def test_a_kill_while_resuming_a_finished_run_leaves_it_unfinished_not_broken(tmp_path, monkeypatch):
    """--resume on a finished run first marks it running, then drops its old rows and summary: stopped in between,
    readers see an unfinished run to --resume (not a complete run whose summary is missing)."""
    from robustbench_filters.cli import run

    out = tmp_path / "run"
    assert run(TINY + ["--out", str(out)]) == 0
    real = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        real(self, missing_ok=missing_ok)
        if self.name == "summary.json":
            raise KeyboardInterrupt  # stands in for a kill right after the summary went

    monkeypatch.setattr(Path, "unlink", unlink)
    assert run(TINY + ["--out", str(out), "--resume"]) == 130
    monkeypatch.setattr(Path, "unlink", real)
    with pytest.raises(RunStateError, match="unfinished"):
        load_run(out)
    assert run(TINY + ["--out", str(out), "--resume"]) == 0
    assert load_run(out).manifest["status"] == "complete"
