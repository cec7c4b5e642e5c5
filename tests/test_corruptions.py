"""Image corruptions: identity at severity 0, monotone severities, per-example determinism, engine, mCE, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from robustbench_filters.api.evaluate import evaluate as evaluate_corruptions
from robustbench_filters.attacks.corruption import summarize_corruption_rows
from robustbench_filters.attacks.corruption_transforms import (
    CORRUPTIONS,
    SEVERITIES,
    corrupt,
    get_corruption,
    pregenerate,
)
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_images


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return load_images("fashion-mnist", split="test").x[:16]


def _noise(name: str, x: torch.Tensor, ids: range) -> torch.Tensor | None:
    return pregenerate(name, tuple(x.shape[1:]), [1000 + i for i in ids])


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_severity_zero_is_identity(x: torch.Tensor, name: str) -> None:
    assert torch.equal(corrupt(x, name, 0, _noise(name, x, range(len(x)))), x)


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_higher_severity_moves_inputs_further(x: torch.Tensor, name: str) -> None:
    noise = _noise(name, x, range(len(x)))
    dist = [float((corrupt(x, name, s, noise) - x).flatten(1).norm(dim=1).mean()) for s in (0, *SEVERITIES)]
    assert all(b > a for a, b in zip(dist, dist[1:], strict=False)), dist
    for s in SEVERITIES:
        out = corrupt(x, name, s, noise)
        assert out.shape == x.shape and out.dtype == x.dtype
        assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


@pytest.mark.parametrize("name", ["gaussian_noise", "impulse_noise"])
def test_noise_is_per_example_and_seeded(x: torch.Tensor, name: str) -> None:
    full = corrupt(x, name, 3, _noise(name, x, range(len(x))))
    again = corrupt(x, name, 3, _noise(name, x, range(len(x))))
    part = corrupt(x[5:9], name, 3, _noise(name, x[5:9], range(5, 9)))
    assert torch.equal(full, again)
    assert torch.equal(full[5:9], part)  # independent of the batch it is in
    other = corrupt(x, name, 3, pregenerate(name, tuple(x.shape[1:]), [7 + i for i in range(len(x))]))
    assert not torch.equal(full, other)


def test_unknown_corruption_is_an_error(capsys) -> None:
    with pytest.raises(RobfiltError, match="unknown corruption 'fog'"):
        get_corruption("fog")
    with pytest.raises(RobfiltError, match="unknown corruption 'fog'"):
        evaluate_corruptions(["deit"], ["corruption:fog"], n_examples=4, checkpoint="none")
    with pytest.raises(RobfiltError, match="separate command"):
        evaluate_corruptions(["deit"], ["corruption", "pgd"], n_examples=4, checkpoint="none")
    assert run(["attack", "--quiet", "--model", "deit", "--attack", "corruption:fog", "--checkpoint", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(r"error: unknown corruption 'fog'", err), err


def test_mce_is_normalised_by_the_baseline() -> None:
    rows = []
    for model, errs in {"deit": (0.5, 0.5), "deit-grc": (0.25, 0.5)}.items():
        for i in range(4):
            rows.append(
                {"model": model, "example_id": i, "kind": "clean", "attack": "clean", "eps": 0.0, "correct": True}
            )
            for name, err in zip(("gaussian_noise", "contrast"), errs, strict=True):
                for s in (1, 2):
                    rows.append({"model": model, "example_id": i, "kind": "contamination",
                                 "attack": f"corruption:{name}", "eps": float(s), "correct": i >= 4 * err})  # fmt: skip
    summary = summarize_corruption_rows(pd.DataFrame(rows))
    assert summary["deit"].mce == pytest.approx(1.0)
    assert summary["deit-grc"].corruptions["gaussian_noise"].ce == pytest.approx(0.5)
    assert summary["deit-grc"].mce == pytest.approx(0.75)
    assert summary["deit-grc"].mean_acc == pytest.approx(0.625)
    assert summarize_corruption_rows(pd.DataFrame(rows), baseline="deit-bsa")["deit"].mce is None


def test_cli_corruption_run_json_and_table(capsys, tmp_path: Path) -> None:
    argv = ["attack", "--model", "deit,deit-bsa-grc", "--attack", "corruption", "--checkpoint", "none",
            "--n-examples", "12", "--batch-size", "8"]  # fmt: skip
    assert run([*argv, "--out", str(tmp_path / "a"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kind"] == "corruption" and summary["baseline"] == "deit"
    assert summary["models"]["deit"]["mce"] == pytest.approx(1.0)
    assert list(summary["models"]["deit-bsa-grc"]["corruptions"]) == list(CORRUPTIONS)
    assert summary["checks_summary"]["fail"] == 0, summary["checks"]
    rows = pd.read_parquet(tmp_path / "a" / "rows.parquet")
    assert len(rows) == 2 * 12 * (1 + len(CORRUPTIONS) * len(SEVERITIES))
    assert set(rows.kind) == {"clean", "contamination"} and set(rows[rows.kind == "clean"].attack) == {"clean"}
    # Both models saw the same corrupted images: identical distances per example, corruption and severity.
    dist = rows[rows.kind == "contamination"].pivot_table("pert_norm", ["example_id", "attack", "eps"], "model")
    assert (dist["deit"] == dist["deit-bsa-grc"]).all()

    assert run([*argv, "--out", str(tmp_path / "b"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "accuracy % [95% Wilson CI] under corruptions" in out and "mCE" in out and "gaussian_noise" in out
