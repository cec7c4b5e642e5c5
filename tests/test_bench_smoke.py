"""Every benchmark runs in --smoke mode and writes its JSON + Markdown; no timing is asserted here."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = ["b1_eps_sweep", "b2_engine_overhead", "b3_attention_cost", "b4_lipschitz_throughput"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO))
    return lambda name: importlib.import_module(f"benchmarks.{name}")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_smoke(name: str, bench, tmp_path: Path) -> None:
    result = bench(name).run(smoke=True, out=tmp_path)
    assert result["mode"] == "smoke" and result["benchmark"] == name
    stored = json.loads((tmp_path / f"{name}.json").read_text())
    assert stored["tables"] and stored["machine"]["cpu_cores"] >= 1
    assert all({"value", "target", "met"} <= set(t) for t in stored["targets"].values())
    markdown = (tmp_path / f"{name}.md").read_text()
    assert markdown.startswith("# ") and "(smoke)" in markdown


def test_benchmark_command_line(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The command line every benchmark shares (benchmarks/_common.py:cli), called here as `python -m` calls it."""
    from benchmarks import _common

    b2 = bench("b2_engine_overhead")
    monkeypatch.setattr(sys, "argv", ["b2_engine_overhead", "--smoke", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        _common.cli(b2.run)
    assert done.value.code == 0
    assert "time ratio robfilt/bare" in capsys.readouterr().out
    assert (tmp_path / "b2_engine_overhead.json").exists()


@pytest.mark.slow  # the same through `python -m` in a fresh process (what `make bench` does)
def test_benchmark_python_dash_m(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.b2_engine_overhead", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "time ratio robfilt/bare" in done.stdout
    assert (tmp_path / "b2_engine_overhead.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_cuda_unavailable_is_a_clear_error(name: str, bench, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no CUDA device"):
        bench(name).run(smoke=True, out=tmp_path, device="cuda")


@pytest.mark.slow  # three fresh robfilt processes (the gate, the demo, the study piece) at smoke sizes
def test_wall_time_benchmark_runs_each_job(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("B14_CASES", raising=False)
    result = bench("b14_wall_time").run(smoke=True, out=tmp_path)
    rows = json.loads((tmp_path / "b14_wall_time.json").read_text())["tables"]["wall time per job"]
    assert [r["case"] for r in rows] == ["gate", "demo", "study-vision"]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in rows) and len(result["targets"]) == 3
