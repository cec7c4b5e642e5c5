"""B8 (certify throughput) runs in --smoke mode, writes its JSON + Markdown, and times the same work on every side."""

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


def test_b8_smoke_writes_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    bench = importlib.import_module("benchmarks.b8_certify_throughput")
    result = bench.run(smoke=True, out=tmp_path)
    assert result["mode"] == "smoke" and result["benchmark"] == "b8_certify_throughput"
    stored = json.loads((tmp_path / "b8_certify_throughput.json").read_text())
    table = stored["tables"]["throughput"]
    assert {r["side"] for r in table} >= {"robfilt", "bare", "per-example loop"}
    assert all(r["samples_per_s"] > 0 for r in table)
    assert set(stored["targets"]) == {f"time ratio robfilt/bare at m={m}" for m in bench.SMOKE["draws"]}
    assert "(smoke)" in (tmp_path / "b8_certify_throughput.md").read_text()


def test_b8_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    """The shared benchmark command line (benchmarks/_common.py:cli), called here as `python -m` calls it."""
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks import _common

    bench = importlib.import_module("benchmarks.b8_certify_throughput")
    monkeypatch.setattr(sys, "argv", ["b8_certify_throughput", "--smoke", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        _common.cli(bench.run)
    assert done.value.code == 0
    assert "time ratio robfilt/bare" in capsys.readouterr().out


@pytest.mark.slow  # the same through `python -m` in a fresh process (what `make bench` does)
def test_b8_python_dash_m(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.b8_certify_throughput", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "time ratio robfilt/bare" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_b8_cuda_unavailable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    bench = importlib.import_module("benchmarks.b8_certify_throughput")
    with pytest.raises(SystemExit, match="no CUDA device"):
        bench.run(smoke=True, out=tmp_path, device="cuda")
