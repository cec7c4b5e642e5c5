"""Every API function that takes tensors checks them as ``evaluate`` checks ``data``: one line naming its parameter.

``evaluate``, ``benchmark`` and ``certify`` take ``data=(x, y)``; ``attack`` takes ``x`` and ``y``;
``estimate_lipschitz`` takes ``inputs``. Out-of-range pixels, a wrong dtype, a wrong shape, NaN and empty tensors
are refused before anything is measured, in one line that names the parameter the caller used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import robustbench_filters as rf
from robustbench_filters.core.errors import RobfiltError

N = 4


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(1 * 28 * 28, 10))


def _labels() -> torch.Tensor:
    return torch.arange(N) % 10


BAD_IMAGES: list[tuple[str, torch.Tensor, str]] = [
    ("pixels in 0-255", torch.full((N, 1, 28, 28), 255.0), "have values in [255, 255], not [0, 1]"),
    ("negative pixels", torch.full((N, 1, 28, 28), -0.5), "normalised?"),
    ("wrong dtype", torch.zeros(N, 1, 28, 28, dtype=torch.int32), "have dtype torch.int32"),
    ("wrong shape", torch.zeros(N, 28 * 28), "must be (N, C, H, W), (N, H, W, C) or (N, H, W)"),
    ("NaN", torch.full((N, 1, 28, 28), float("nan")), "contain NaN or inf"),
    ("empty", torch.zeros(0, 1, 28, 28), "no images"),
]

#: function name -> (call with images x, the parameter name the message must carry)
CALLS: dict[str, tuple[Callable[[torch.Tensor], Any], str]] = {
    "evaluate": (lambda x: rf.evaluate(_net(), "fgsm", [0.1], data=(x, _labels()[: len(x)]), n_examples=None), "data"),
    "benchmark": (lambda x: rf.benchmark(_net(), data=(x, _labels()[: len(x)]), eps=0.1, n_examples=None), "data"),
    "certify": (lambda x: rf.certify(_net(), [0.25], data=(x, _labels()[: len(x)]), n_examples=None), "data"),
    "attack": (lambda x: rf.attack(_net(), x, _labels()[: len(x)], eps=0.1), "x"),
    "estimate_lipschitz": (lambda x: rf.estimate_lipschitz("deit", checkpoint="none", inputs=x), "inputs"),
}


@pytest.mark.parametrize("function", list(CALLS))
@pytest.mark.parametrize(("case", "x", "needle"), BAD_IMAGES, ids=[c for c, _, _ in BAD_IMAGES])
def test_bad_images_are_one_line_naming_the_parameter(function: str, case: str, x: torch.Tensor, needle: str) -> None:
    call, parameter = CALLS[function]
    with pytest.raises(RobfiltError) as err:
        call(x)
    message = str(err.value)
    assert "\n" not in message, message
    assert parameter in message, message
    if case == "empty" and parameter == "data":  # an empty pair is refused with the data option itself
        assert message == "data holds no images; give at least one (image, label) pair."
    else:
        assert needle in message, message


@pytest.mark.parametrize(
    ("y", "needle"),
    [
        (torch.full((N,), 0.5), "labels y contain 0.5, which is not a whole number"),
        (torch.zeros(N - 1, dtype=torch.long), f"labels y must be a 1-D sequence of {N} class indices"),
        (torch.full((N,), -1), "labels y contain -1; class indices start at 0"),
    ],
)
def test_bad_labels_of_attack_name_y(y: torch.Tensor, needle: str) -> None:
    with pytest.raises(RobfiltError) as err:
        rf.attack(_net(), torch.rand(N, 1, 28, 28), y, eps=0.1)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_tensors_on_the_meta_device_are_refused() -> None:
    x = torch.zeros(N, 1, 28, 28, device="meta")
    with pytest.raises(RobfiltError, match="images x are on the meta device"):
        rf.attack(_net(), x, _labels(), eps=0.1)
    with pytest.raises(RobfiltError, match=r"images \(data\[0\]\) are on the meta device"):
        rf.evaluate(_net(), "fgsm", [0.1], data=(x, _labels()), n_examples=None)


def test_lipschitz_inputs_of_a_generic_module_are_finite_floats() -> None:
    """A module robfilt does not know takes any float inputs (features, not pixels): finite and not empty."""
    lin = nn.Linear(3, 2)
    with pytest.raises(RobfiltError, match="inputs contain NaN or inf"):
        rf.estimate_lipschitz(lin, inputs=torch.full((2, 3), float("nan")))
    with pytest.raises(RobfiltError, match="inputs must be a batch of at least one example"):
        rf.estimate_lipschitz(lin, inputs=torch.zeros(0, 3))
    with pytest.raises(RobfiltError, match="must be float tensors, got dtype torch.int64"):
        rf.estimate_lipschitz(lin, inputs=torch.zeros(2, 3, dtype=torch.long))
