"""Shared fixtures: deterministic seeds and tiny inputs for the model tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same RNG state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture
def images() -> torch.Tensor:
    """Two Fashion-MNIST-shaped images in [0, 1] (the input range of every image model)."""
    return torch.rand(2, 1, 28, 28)


@pytest.fixture
def tokens() -> torch.Tensor:
    """Two token sequences of length 24 for the micro LM (vocab 128)."""
    return torch.randint(0, 128, (2, 24))
