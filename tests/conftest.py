"""Shared fixtures: deterministic seeds and tiny inputs for the model tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same RNG state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _library_logging() -> Iterator[None]:
    """An in-process CLI call installs the library's log handler and level (setup_logging); put them back, so a
    later test that counts stderr lines does not see INFO lines because of which test ran before it."""
    log = logging.getLogger("robustbench_filters")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers, log.level, log.propagate = saved[0], saved[1], saved[2]


@pytest.fixture
def images() -> torch.Tensor:
    """Two Fashion-MNIST-shaped images in [0, 1] (the input range of every image model)."""
    return torch.rand(2, 1, 28, 28)


@pytest.fixture
def tokens() -> torch.Tensor:
    """Two token sequences of length 24 for the micro LM (vocab 128)."""
    return torch.randint(0, 128, (2, 24))


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """A tiny GPT-2 and a tiny Llama with a BPE tokenizer, saved with save_pretrained (tests/_hf_models.py)."""
    from _hf_models import build

    return build(tmp_path_factory.mktemp("hf"))
