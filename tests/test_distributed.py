"""Distributed evaluation: sharding, rank bookkeeping, and a real 2-process gloo run equal to a 1-process run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from dist_kinds import TORCHRUN_ENV

from robustbench_filters.cli import run
from robustbench_filters.core import distributed as D
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.runs.folder import RunWriter

ATTACK_ARGS = ["attack", "--model", "deit", "--attack", "fgsm", "--checkpoint", "none", "--n-examples", "16",
               "--batch-size", "4", "--eps", "0.01,0.05", "--quiet"]  # fmt: skip
LIPSCHITZ_ARGS = ["lipschitz", "--model", "deit", "--checkpoint", "none", "--data", "synthetic", "-n", "4",
                  "--batch-size", "1", "--method", "power", "--no-bounds", "--quiet"]  # fmt: skip
needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no gloo backend")


@pytest.fixture
def no_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def one_thread():
    """Reference runs use one thread, like each torchrun rank, so float reductions happen in the same order."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n_units", [0, 1, 3, 7, 24])
def test_shard_covers_every_unit_exactly_once(world: int, n_units: int) -> None:
    units = list(range(n_units))
    shards = [D.shard(units, r, world) for r in range(world)]
    assert sorted(u for s in shards for u in s) == units
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced


@pytest.fixture(scope="module")
def image_plan():
    """The planned units of a real image attack measurement (2 models, 2 attacks, 18 examples in batches of 4)."""
    from robustbench_filters.attacks.image import ImageAttack
    from robustbench_filters.configs import ImageAttackConfig
    from robustbench_filters.runs.measurement import PrepareContext

    config = ImageAttackConfig(
        models=("deit", "deit-grc"), attacks=("fgsm", "pgd"), n_examples=18, batch_size=4, checkpoint="none"
    )
    m = ImageAttack(config)
    m.prepare(PrepareContext(device=torch.device("cpu"), seed=0))
    return m


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_attack_units_cover_every_example_once_per_attack(world: int, image_plan) -> None:
    units, batches = image_plan.plan(), image_plan.batches
    n_examples = len(image_plan.ids)
    seen: dict[tuple[int, str], list[int]] = {}
    for rank in range(world):
        for u in D.shard(units, rank, world):
            seen.setdefault((u.model, u.part), []).extend(range(n_examples)[batches[u.batch]])
    assert set(seen) == {(mi, a) for mi in range(2) for a in ["clean", "fgsm", "pgd"]}
    assert all(sorted(ex) == list(range(n_examples)) for ex in seen.values())
    assert len({u.key for u in units}) == len(units)


def test_shard_rejects_bad_rank() -> None:
    with pytest.raises(ValueError):
        D.shard([1, 2], 2, 2)
    with pytest.raises(ValueError):
        D.shard([1, 2], 0, 0)


def test_env_context(monkeypatch: pytest.MonkeyPatch, no_torchrun_env: None) -> None:
    assert D.env_context() == D.DistContext() and D.init("cpu") == D.DistContext()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    ctx = D.env_context()
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.enabled, ctx.is_primary) == (3, 4, 1, True, False)
    assert D.local_device("cuda", ctx) == "cuda:1" and D.local_device("cpu", ctx) == "cpu"
    assert D.backend_for("cuda:1") == "nccl" and D.backend_for("cpu") == "gloo"
    monkeypatch.setenv("RANK", "7")
    with pytest.raises(RobfiltError, match="inconsistent"):
        D.env_context()


def test_cuda_unavailable_is_a_clear_error(no_torchrun_env: None, tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert run([*ATTACK_ARGS, "--device", "cuda", "--out", str(tmp_path / "a")]) == 2
    assert run([*LIPSCHITZ_ARGS, "--device", "cuda"]) == 2
    assert not (tmp_path / "a").exists()


def test_single_process_helpers_pass_through() -> None:
    assert D.all_or_none(D.DistContext(), lambda: 3) == 3
    with pytest.raises(KeyError):
        D.all_or_none(D.DistContext(), lambda: {}["missing"])
    assert isinstance(D._rebuild(1, "RunStateError", "locked"), RunStateError)
    assert "rank 2 failed with KeyError" in str(D._rebuild(2, "KeyError", "x"))


def test_secondary_writer_attaches_without_lock(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RunStateError, match="shares"):
        RunWriter(out, "attack", {"a": 1}, seed=0, primary=False).__enter__()
    with RunWriter(out, "attack", {"a": 1}, seed=0) as primary:
        assert (out / ".lock").exists()
        with RunWriter(out, "attack", {"a": 1}, seed=0, primary=False) as secondary:
            secondary.write_part("m0-clean-b0001", pd.DataFrame({"x": [1]}))
            with pytest.raises(RunStateError):
                secondary.finish(pd.DataFrame(), {})
        with pytest.raises(RunStateError, match="different run"):
            RunWriter(out, "attack", {"a": 2}, seed=0, primary=False).__enter__()
        assert not primary.is_done("m0-clean-b0001")
        primary.refresh()
        assert primary.is_done("m0-clean-b0001")


def test_amp_options_are_validated_and_recorded(no_torchrun_env: None, tmp_path: Path, capsys) -> None:
    assert run([*ATTACK_ARGS, "--amp-attacks", "--out", str(tmp_path / "a")]) == 2
    assert run([*ATTACK_ARGS, "--amp", "fp8", "--out", str(tmp_path / "b")]) == 2
    capsys.readouterr()
    assert run([*ATTACK_ARGS, "--amp", "bf16", "--n-examples", "4", "--json", "--out", str(tmp_path / "c")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["precision"] == {"clean": "bf16", "attacks": "fp32"}


def _torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "robustbench_filters.cli", *args]  # fmt: skip
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _same_run(a: Path, b: Path) -> None:
    pd.testing.assert_frame_equal(pd.read_parquet(a / "rows.parquet"), pd.read_parquet(b / "rows.parquet"))
    assert json.loads((a / "summary.json").read_text()) == json.loads((b / "summary.json").read_text())


@needs_gloo
def test_two_process_attack_run_equals_one_process_and_resumes(
    tmp_path: Path, no_torchrun_env: None, one_thread: None
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    assert run([*ATTACK_ARGS, "--out", str(one)]) == 0
    done = _torchrun([*ATTACK_ARGS, "--out", str(two), "--json"], tmp_path)
    result = json.loads(done.stdout)  # exactly one JSON document: rank 0's result (rank 1 prints nothing)
    assert Path(result["out"]) == two and "exit_code" not in result, done.stdout
    _same_run(one, two)
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["status"] == "complete"
    assert not (two / ".lock").exists()
    # A killed rank leaves some parts missing: --resume (any world size) recomputes only those.
    parts = sorted((two / "parts").glob("*.parquet"))
    assert len(parts) == 8
    for p in parts[1::2]:
        p.unlink()
    (two / "summary.json").unlink()
    kept = {p.name: p.stat().st_mtime_ns for p in parts[0::2]}
    assert run([*ATTACK_ARGS, "--out", str(two), "--resume"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in parts[0::2]} == kept
    _same_run(one, two)


@needs_gloo
def test_two_process_runs_equal_one_process_for_every_kind(
    tmp_path: Path, no_torchrun_env: None, every_kind_alone: Path
) -> None:
    """Image attack, LM attack, corruption, Lipschitz and certify runs: 2 gloo ranks give the 1-process rows, row for
    row."""
    import dist_kinds

    one, two = every_kind_alone, tmp_path / "two"
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env["OMP_NUM_THREADS"] = "1"
    script = Path(__file__).with_name("dist_kinds.py")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(two),
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for kind in dist_kinds.KINDS:
        _same_run(one / kind, two / kind)
        manifest = json.loads((two / kind / "manifest.json").read_text())
        assert manifest["world_size"] == 2 and manifest["status"] == "complete", kind


def test_attacks_run_with_frozen_weights_and_restore_the_flags(no_torchrun_env: None) -> None:
    from robustbench_filters.api.evaluate import evaluate

    class Probe(torch.nn.Module):
        """Records whether the weights required gradients while the engine ran the model."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(784, 10)
            self.frozen_seen: set[bool] = set()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.frozen_seen.add(not self.lin.weight.requires_grad)
            return self.lin(x.flatten(1))

    model = Probe()
    model.lin.bias.requires_grad_(False)
    evaluate([model], ["fgsm"], [0.05], n_examples=4, batch_size=4)
    assert model.frozen_seen == {True}
    assert model.lin.weight.requires_grad and not model.lin.bias.requires_grad
