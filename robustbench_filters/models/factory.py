"""``create_model``: the one entry point that builds a registry model, untrained or from a checkpoint.

It sits above both the registry (which builds untrained models) and the checkpoint loader (which builds from a
card), so neither has to import the other's caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from .checkpoint import load_checkpoint
from .registry import build_from_spec, resolve_spec


def create_model(
    name: str,
    size: str = "micro",
    checkpoint: str | Path | None = None,
    **overrides: Any,
) -> nn.Module:
    """Build a model by name; ``checkpoint`` is a path, ``"zoo"`` for the bundled trained weights, or
    ``"zoo:sigma0.25"`` for the bundled weights trained with Gaussian noise (std 0.25) for randomized smoothing.

    Overrides reach every config field, e.g. ``create_model("deit-grc", grc_lambda=0.0)``. Image models take
    [0, 1] inputs. The model is returned in eval mode.
    """
    if checkpoint is not None:
        return load_checkpoint(checkpoint, name=name, size=size, **overrides)
    model = build_from_spec(resolve_spec(name, size, **overrides))
    return model.eval()
