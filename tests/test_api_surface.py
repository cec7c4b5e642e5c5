"""The Python API's public surface: its error type under the documented names, and numpy values wherever it takes
tensors and Python numbers.

A caller holds numbers in numpy and torch as often as in floats (``np.float32(0.02)``, an eps grid from
``np.linspace``, inputs loaded with numpy): each must be read as the value it holds, or refused by the value's own
rules, never because of its container.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from torch import nn

import robustbench_filters as rf
from robustbench_filters.configs.options import REGISTRY, Bool, Int, Many, Number, read
from robustbench_filters.core.surface import Surface


def test_the_error_type_is_public_under_both_documented_names() -> None:
    from robustbench_filters.core.errors import RobfiltError

    assert rf.RobfiltError is RobfiltError
    errors = importlib.import_module("robustbench_filters.errors")  # the import path before the layout move
    assert errors.RobfiltError is RobfiltError
    assert {"RobfiltError", "RunStateError", "CheckpointError"} <= set(errors.__all__)
    assert "RobfiltError" in rf.__all__ and "RobfiltError" in dir(rf)
    with pytest.raises(rf.RobfiltError):
        rf.evaluate("deit", n_examples=-1)


def _python_and_numpy(value: object) -> list[object]:
    """``value`` (a Python number or list of numbers) in every container a caller may hold it in."""
    if isinstance(value, bool):
        return [np.bool_(value), np.array(value), torch.tensor(value)]
    if isinstance(value, int):
        return [np.int64(value), np.int32(value), np.array(value), torch.tensor(value)]
    if isinstance(value, float):
        return [np.float64(value), np.float32(value), np.array(value, dtype=np.float32), torch.tensor(value)]
    return [np.array(value, dtype=np.float32), np.array(value), torch.tensor(value), [np.float32(v) for v in value]]


SAMPLES = {Int: 3, Number: 0.02, Bool: True}


def _sample(name: str) -> object | None:
    """A Python value of option ``name`` (None: the option holds no numbers)."""
    value = REGISTRY[name].value
    if isinstance(value, Many) and type(value.item) in (Int, Number):
        return [1, 2] if type(value.item) is Int else [0.01, 0.02]
    return SAMPLES.get(type(value))


NUMERIC = sorted(name for name in REGISTRY if _sample(name) is not None)


@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_option_reads_numpy_and_torch_values_as_python_ones(name: str) -> None:
    python = _sample(name)
    expected = read({name: python}, Surface.API)
    for held in _python_and_numpy(python):
        assert read({name: held}, Surface.API) == expected, (name, held)
    if isinstance(REGISTRY[name].value, Many):  # one numpy scalar is a list of one, as one float is
        one = python[0]
        for held in _python_and_numpy(one):
            assert read({name: held}, Surface.API) == read({name: [one]}, Surface.API), (name, held)


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


def test_evaluate_takes_a_float32_eps_array_as_the_same_run() -> None:
    model = _linear()
    grid = np.array([0.01, 0.02], dtype=np.float32)
    a = rf.evaluate(model, attacks="fgsm", eps=grid, n_examples=4)
    b = rf.evaluate(model, attacks="fgsm", eps=[0.01, 0.02], n_examples=4)
    assert {0.01, 0.02} <= set(a.rows["eps"].unique())
    cols = ["model", "example_id", "attack", "eps", "correct", "margin"]
    assert a.rows[cols].equals(b.rows[cols])


@pytest.mark.parametrize("eps", [np.float32(0.02), np.float64(0.02), torch.tensor(0.02), np.array(0.02)])
def test_benchmark_takes_one_numpy_or_torch_budget(eps: object) -> None:
    result = rf.benchmark(_linear(), eps=eps, attack="fgsm", n_examples=4)
    assert result.eps == 0.02


def test_estimate_lipschitz_takes_numpy_inputs_as_tensors() -> None:
    x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    a = rf.estimate_lipschitz(_linear(), inputs=x, bounds=False)
    b = rf.estimate_lipschitz(_linear(), inputs=torch.from_numpy(x.copy()), bounds=False)
    cols = [c for c in a.rows.columns if c not in ("seconds",)]
    assert a.rows[cols].equals(b.rows[cols])
    labels = rf.estimate_lipschitz(_linear(), inputs=x, input_labels=np.array([0, 1, 2]), bounds=False)
    assert len(labels.rows) == len(a.rows)


def _refusal(call) -> str:  # noqa: ANN001
    with pytest.raises(rf.RobfiltError) as refused:
        call()
    message = str(refused.value)
    assert "\n" not in message and "--" not in message, message  # Python keywords, never command-line flags
    return message


def test_python_refusals_of_run_folders_and_weights_name_the_callers_keywords(tmp_path, monkeypatch) -> None:
    """The run-folder, checkpoint and model refusals are shared by the CLI and the API; in Python each names its fix
    as a keyword (``overwrite=True``, ``checkpoint=none``), as the CLI names it as a flag."""
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    run = {"models": "deit", "attacks": "fgsm", "eps": 0.01, "n_examples": 2, "num_workers": 0}
    assert "overwrite=True" in _refusal(lambda: rf.evaluate(**run, out=foreign))
    rf.evaluate(**run, out=tmp_path / "done")
    again = _refusal(lambda: rf.evaluate(**{**run, "eps": 0.02}, out=tmp_path / "done"))
    assert "resume=True" in again and "overwrite=True" in again, again
    assert "save_adversarial=True" in _refusal(lambda: rf.load_adversarial(tmp_path / "done"))
    torch.save({"w": torch.zeros(1)}, tmp_path / "w.pt")
    assert "allow_pickle=True" in _refusal(lambda: rf.load_checkpoint(tmp_path / "w.pt", name="deit"))
    assert "checkpoint=none" in _refusal(lambda: rf.load_model("timm:resnet18", checkpoint="zoo"))
