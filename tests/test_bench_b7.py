"""B7 (CLI start-up) runs in --smoke mode, writes its JSON + Markdown, and times every side in fresh processes."""

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


@pytest.fixture
def b7(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("benchmarks.b7_cli_startup")


def test_b7_smoke_writes_results(b7, tmp_path: Path) -> None:
    result = b7.run(smoke=True, out=tmp_path)
    assert result["mode"] == "smoke" and result["benchmark"] == "b7_cli_startup"
    stored = json.loads((tmp_path / "b7_cli_startup.json").read_text())
    table = {r["process"]: r for r in stored["tables"]["start-up wall time"]}
    assert set(table) == {*b7.COMMANDS, *b7.REFERENCES}
    assert all(r["median_s"] > 0 for r in table.values())
    assert all(table[c]["heavy_imports"] == "none" for c in b7.COMMANDS)  # the probe found no torch, timm, ...
    assert set(stored["targets"]) == {f"{c} median (s)" for c in b7.COMMANDS}
    assert "(smoke)" in (tmp_path / "b7_cli_startup.md").read_text()


def test_b7_probe_sees_heavy_imports(b7) -> None:
    assert b7.heavy_imports(["models", "list"]) == []
    assert "torch" in b7.heavy_imports(["models", "show", "deit"])  # show builds the model: the probe can tell


def test_b7_failing_side_is_a_clear_error(b7) -> None:
    with pytest.raises(SystemExit, match="exited 3"):
        b7._spawn([sys.executable, "-c", "raise SystemExit(3)"])


@pytest.mark.slow  # the same run as above through `python -m` (what `make bench` does); ~15 s on a busy machine
def test_b7_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.b7_cli_startup", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "robfilt --help median (s)" in done.stdout and (tmp_path / "b7_cli_startup.md").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_b7_cuda_unavailable_is_a_clear_error(b7, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no CUDA device"):
        b7.run(smoke=True, out=tmp_path, device="cuda")
