"""benchmark(): RobustBench's one call on robfilt's engine.

Same numbers as evaluate() on the same inputs (tensors, numpy arrays, a torch Dataset), intervals and n, the
sanity checks (a failing one is a field and a logged warning), determinism, L2 and corruptions, and one-line
errors for every bad argument.
"""

from __future__ import annotations

import logging
import math
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import robustbench_filters as rf
from robustbench_filters.api import benchmark as benchmarking
from robustbench_filters.api.benchmark import AccuracyInterval, BenchmarkResult, benchmark
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.runs.folder import load_run

N, CLASSES = 40, 4
FAST = {"attack": "pgd", "steps": 5}


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, CLASSES))


@pytest.fixture(scope="module")
def net_data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A tiny net and images it labels itself: clean accuracy 100%, so the attack has something to break."""
    net = _net()
    x = torch.rand(N, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        net[-1].bias -= net(x).mean(0)  # centre the logits so that every class is predicted
        y = net(x).argmax(1)
    assert sorted(set(y.tolist())) == list(range(CLASSES))  # every class present: the data has 4 classes
    return net, x, y


def _acc(entry: Any) -> AccuracyInterval:
    return AccuracyInterval(entry.acc, entry.lo, entry.hi, entry.n)


def test_tensors_give_evaluates_numbers(net_data) -> None:
    net, x, y = net_data
    res = benchmark(net, data=(x, y), eps=0.05, n_examples=32, **FAST)
    ref = evaluate(net, "pgd", eps=[0.05], data=(x, y), n_examples=32, steps=5)
    model = ref.summary.models["model0"]
    assert isinstance(res, BenchmarkResult)
    assert res.clean == _acc(model.clean) and res.robust == _acc(model.robust[0])
    pd.testing.assert_frame_equal(res.run.rows, ref.rows)
    assert (res.model, res.threat_model, res.attack, res.eps) == ("model0", "Linf", "pgd", 0.05)
    assert res.clean.n == res.robust.n == 32 and res.clean.acc == 1.0
    assert 0.0 < res.robust.acc < res.clean.acc  # the attack breaks some examples, not all
    assert res.robust.lo <= res.robust.acc <= res.robust.hi
    assert res.accuracies == (res.clean.acc, res.robust.acc)
    assert res.all_checks_passed and {c.name for c in res.checks} >= {"eps=0 equals clean", "inside eps-ball and [0,1]"}
    assert res.run_dir is None  # a temporary folder, removed


@pytest.mark.parametrize("kind", ["numpy", "dataset"])
def test_numpy_arrays_and_a_dataset_give_the_same_numbers(net_data, kind: str) -> None:
    net, x, y = net_data
    data = (x.numpy(), y.numpy()) if kind == "numpy" else TensorDataset(x, y)
    res = benchmark(net, data=data, eps=0.05, n_examples=32, **FAST)
    ref = benchmark(net, data=(x, y), eps=0.05, n_examples=32, **FAST)
    assert (res.clean, res.robust) == (ref.clean, ref.robust)
    pd.testing.assert_frame_equal(res.run.rows, ref.run.rows)


def test_same_seed_same_numbers_other_seed_other_examples(net_data) -> None:
    net, x, y = net_data
    a = benchmark(net, data=(x, y), eps=0.05, n_examples=20, seed=3, **FAST)
    b = benchmark(net, data=(x, y), eps=0.05, n_examples=20, seed=3, **FAST)
    c = benchmark(net, data=(x, y), eps=0.05, n_examples=20, seed=4, **FAST)
    pd.testing.assert_frame_equal(a.run.rows, b.run.rows)
    assert (a.clean, a.robust, a.checks) == (b.clean, b.robust, b.checks)
    assert set(a.run.rows.example_id) != set(c.run.rows.example_id)


def test_all_examples_by_default(net_data) -> None:
    net, x, y = net_data
    res = benchmark(net, data=(x, y), eps=0.05, **FAST)
    assert res.clean.n == res.robust.n == N


def test_l2_threat_model(net_data) -> None:
    net, x, y = net_data
    res = benchmark(net, data=(x, y), threat_model="L2", eps=0.5, n_examples=24, **FAST)
    linf = benchmark(net, data=(x, y), threat_model="Linf", eps=0.5, n_examples=24, **FAST)
    assert res.eps == 0.5 and res.threat_model == "L2"
    assert res.run.summary.norm == "l2" and set(res.run.rows.norm) == {"l2"}
    adv = res.run.rows[res.run.rows.attack == "pgd"]
    assert (adv.pert_norm <= 0.5 + 1e-5).all()
    assert res.robust.acc > linf.robust.acc  # an L2 ball of 0.5 is far smaller than an Linf ball of 0.5
    assert benchmark(net, data=(x, y), threat_model="l2", eps=0.5, n_examples=24, **FAST).robust == res.robust


def test_robustbench_threat_model_enum_is_accepted(net_data) -> None:
    class ThreatModel(Enum):  # RobustBench's enum has these values
        Linf = "Linf"
        L2 = "L2"

    net, x, y = net_data
    res = benchmark(net, data=(x, y), threat_model=ThreatModel.L2, eps=0.5, n_examples=8, **FAST)
    assert res.threat_model == "L2"


def test_corruptions_mean_accuracy_over_cells(net_data) -> None:
    net, x, y = net_data
    res = benchmark(net, data=(x, y), threat_model="corruptions", n_examples=16)
    model = res.run.summary.models["model0"]
    assert (res.attack, res.eps) == ("corruption", None)
    assert res.robust.n == 16 and math.isclose(res.robust.acc, model.mean_acc)
    cells = res.run.rows[res.run.rows.kind == "contamination"]
    assert len(cells) == 16 * 5 * 5  # examples x corruptions x severities
    assert math.isclose(res.robust.acc, cells.correct.mean())
    assert res.robust.lo <= res.robust.acc <= res.robust.hi
    assert res.clean == _acc(model.clean)


def test_zoo_reference_keeps_its_verified_run_folder(tmp_path: Path) -> None:
    res = benchmark("deit", eps=8 / 255, n_examples=16, attack="pgd", steps=2, out=tmp_path / "run")
    ref = evaluate(["deit"], ["pgd"], eps=[8 / 255], n_examples=16, steps=2)
    assert res.model == "deit" and res.run_dir == tmp_path / "run"
    assert res.clean == _acc(ref.summary.models["deit"].clean)
    assert res.robust == _acc(ref.summary.models["deit"].robust[0])
    finished = load_run(res.run_dir)  # hashes verified
    assert finished.summary.checks_summary.passed is True


def test_default_attack_is_the_strong_ensemble(net_data) -> None:
    net, x, y = net_data
    res = benchmark(net, data=(x, y), eps=8 / 255, n_examples=8)
    assert (res.attack, res.eps) == ("apgd-adaptive", 8 / 255)
    fooled = set(res.run.rows.fooled_by) - {""}
    assert fooled <= {"clean", "apgd-ce", "apgd-t"} and fooled - {"clean"}  # the stages, per-example worst case
    assert res.run.summary.models[res.model].robust[0].strength == "strong"


class NoisyNet(nn.Module):
    """Different outputs for the same input: the determinism check must fail, and the result must say so."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + 0.5 * torch.randn(len(x), CLASSES)


def test_a_failed_check_is_a_field_and_a_warning(net_data, caplog: pytest.LogCaptureFixture) -> None:
    _, x, y = net_data
    with caplog.at_level(logging.WARNING, logger="robustbench_filters.api.benchmark"):
        res = benchmark(NoisyNet(), data=(x, y), eps=0.05, n_examples=16, **FAST)
    assert not res.all_checks_passed
    assert "eval mode, deterministic" in [c.name for c in res.failed_checks]
    assert all(not c.passed for c in res.failed_checks) and len(res.checks) > len(res.failed_checks)
    assert "sanity check FAILED: eval mode, deterministic" in caplog.text


def test_evaluate_takes_one_model_and_one_attack_name(net_data) -> None:
    net, x, y = net_data  # an nn.Sequential alone is one model, not the list of its layers
    one = evaluate(net, "pgd", eps=[0.05], data=(x, y), n_examples=8, steps=2)
    listed = evaluate([net], ["pgd"], eps=[0.05], data=(x, y), n_examples=8, steps=2)
    pd.testing.assert_frame_equal(one.rows, listed.rows)


def test_lazy_export() -> None:
    assert rf.benchmark is benchmarking.benchmark and rf.BenchmarkResult is BenchmarkResult
    assert "benchmark" in dir(rf)


def _tensors() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(10, 3, 8, 8), torch.arange(10) % CLASSES


BAD = [
    ({"threat_model": "Linf2"}, "unknown threat_model 'Linf2'"),
    ({"threat_model": "corruptions_3d"}, "unknown threat_model"),
    ({"eps": None}, "has no default eps grid; pass eps=[8/255]"),  # tensors: the config's rule
    ({"eps": -0.1}, "eps -0.1 is negative or not finite"),
    ({"eps": float("nan")}, "eps must be a finite number"),
    ({"eps": "big"}, "eps 'big' is not a number"),
    ({"eps": [0.01, 0.02]}, "benchmark measures one eps"),
    ({"eps": 8.0}, "did you mean 8/255"),
    ({"threat_model": "corruptions", "eps": 0.1}, "eps does not apply to corruption runs"),
    (
        {"threat_model": "corruptions", "eps": None, "attack": "pgd"},
        "attack 'pgd' cannot run in a corruption evaluation",
    ),
    ({"n_examples": 11}, "n_examples=11 is larger than the data (10 examples); pass n_examples=10 or fewer"),
    ({"n_examples": 0}, "n_examples must be positive"),
    ({"n_examples": 2.5}, "n_examples must be an integer, got 2.5"),
    ({"attack": "fgsm", "threat_model": "L2"}, "attack 'fgsm' has no l2 version"),
    ({"attack": "pgdd"}, "unknown attack 'pgdd'"),
    ({"attack": "wordswap"}, "attack 'wordswap' does not fit image models"),
    ({"batch_size": 0}, "batch_size must be positive"),  # the API's own names, never CLI flags
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"rates": [0.1]}, "rates does not apply to image attack runs"),
]


@pytest.mark.parametrize(("kwargs", "match"), BAD, ids=[str(k) for k, _ in BAD])
def test_bad_arguments_are_one_line(kwargs: dict, match: str) -> None:
    with pytest.raises(RobfiltError) as err:
        benchmark(_net(), data=_tensors(), **{"eps": 0.1, **kwargs})
    assert match in str(err.value) and "\n" not in str(err.value)
    assert "--" not in str(err.value)  # an API error never names a command-line flag


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (lambda x: x, "model must be a torch nn.Module or a model reference"),
        (42, "got int"),
        ([_net(), _net()], "benchmark takes one model"),
        ("lm", "a language model reads text"),  # LMs benchmark on text (tests/test_hf_attack.py), not arrays
        ("no-such-model", "unknown model"),
    ],
)
def test_bad_models_are_one_line(model: object, match: str) -> None:
    with pytest.raises(RobfiltError) as err:
        benchmark(model, data=_tensors(), n_examples=4)  # type: ignore[arg-type]
    assert match in str(err.value) and "\n" not in str(err.value)


def test_bad_data_is_one_line() -> None:
    with pytest.raises(RobfiltError, match="images alone are not enough"):
        benchmark(_net(), data=np.zeros((4, 3, 8, 8), dtype=np.float32), eps=0.1, n_examples=2)
    with pytest.raises(RobfiltError, match="larger than the data"):  # a spec string: the engine counts
        benchmark("deit", data="fashion-mnist", eps=0.1, n_examples=10**6)


@pytest.mark.parametrize("eps", [None, 0.1])
def test_empty_data_is_refused_in_one_line(eps: float | None) -> None:
    """Issue 30's regression: empty tensors ran a run with no units, whose summary raised an AttributeError."""
    x, y = _tensors()
    with pytest.raises(RobfiltError) as err:
        benchmark(_net(), data=(x[:0], y[:0]), n_examples=None, eps=eps)
    assert str(err.value) == "data holds no images; give at least one (image, label) pair."
