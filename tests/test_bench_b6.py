"""B6 (image folder scaling) runs in --smoke mode: folder made and cached, child process measured, results written."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_b6_smoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    b6 = importlib.import_module("benchmarks.b6_imagefolder")
    monkeypatch.setattr(b6, "CACHE", tmp_path / "cache")
    result = b6.run(smoke=True, out=tmp_path / "out")
    assert result["mode"] == "smoke" and set(result["targets"]) == {"peak RSS (GB)", "time to first attacked batch (s)"}
    run = result["measurements"][0]
    assert run["n_files"] == 300 and run["decoded"] == 16 and run["batch_shape"] == [8, 3, 224, 224]
    assert [s["stage"] for s in run["stages"]][1:5] == [
        "build model",
        "open (index files)",
        "take first batch",
        "one PGD step",
    ]
    assert 0 < run["moved"] <= 4 / 255 + 1e-6 and run["peak_mb"] > 0
    stored = json.loads((tmp_path / "out" / "b6_imagefolder.json").read_text())
    assert stored["tables"] and "(smoke)" in (tmp_path / "out" / "b6_imagefolder.md").read_text()
    folder = Path(result["settings"]["folder"])
    assert (folder / ".complete").exists() and len(list(folder.rglob("*.png"))) == 300
    assert b6.make_folder(300, 224, 10)[1] == 0.0  # cached: not made again
