"""B9 (default strength) and B10 (DeiT-S overhead) run in --smoke mode and write their JSON + Markdown.

Both build real runs end to end (B9 includes autoattack-standard with FAB-T and Square, B10 a timm DeiT at 224 px),
so they are slow tests; the timing targets live in the benchmarks, never here.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO))
    return lambda name: importlib.import_module(f"benchmarks.{name}")


@pytest.mark.slow
def test_b9_smoke_compares_the_default_with_pgd_and_autoattack_standard(bench, tmp_path: Path) -> None:
    result = bench("b9_default_strength").run(smoke=True, out=tmp_path)
    stored = json.loads((tmp_path / "b9_default_strength.json").read_text())
    (cell,) = stored["tables"]["robust examples, passes and time per cell"]
    # the smoke cell (8 examples at 0.05) can fall whole to APGD-CE, the first stage of both attacks, before any
    # later stage runs: then both spend the same passes (58 and 58 on 2026-12-08). B9's full cells are where the
    # default must cost at most a tenth (the benchmark's target, not a test's)
    assert cell["default_robust"] <= cell["pgd_robust"] and 0 < cell["default_passes"] <= cell["standard_passes"]
    assert cell["pass_share"] == round(cell["default_passes"] / cell["standard_passes"], 3)
    assert set(result["targets"]) == {
        "max robust examples over autoattack-standard beyond the allowance, per cell",
        "max pass share default/autoattack-standard per cell",
    }
    assert "(smoke)" in (tmp_path / "b9_default_strength.md").read_text()


@pytest.mark.slow
def test_b10_smoke_does_the_same_work_on_both_sides(bench, tmp_path: Path) -> None:
    result = bench("b10_deit_small").run(smoke=True, out=tmp_path)
    stored = json.loads((tmp_path / "b10_deit_small.json").read_text())
    (robfilt, bare) = stored["tables"]["wall time"]
    assert robfilt["model_passes"] == bare["model_passes"]  # eps too small to fool: early exit skips nothing
    assert "time ratio robfilt/bare" in result["targets"]
