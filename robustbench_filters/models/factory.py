"""``create_model``: the one entry point that builds a registry model, untrained or from a checkpoint.

It sits above both the registry (which builds untrained models) and the checkpoint loader (which builds from a
card), so neither has to import the other's caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ..core.errors import RobfiltError
from ..core.names import ZOO_MODEL_SIZE, ZOO_MODELS
from .checkpoint import load_checkpoint, zoo_path
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
    [0, 1] inputs. The model is returned in eval mode. A zoo model (``deit-at``, ``deit-grc-at``: adversarially
    trained) is its zoo weights: ``create_model("deit-at", checkpoint="zoo")``.
    """
    if name in ZOO_MODELS:
        return _zoo_model(name, size, checkpoint, overrides)
    if checkpoint is not None:
        return load_checkpoint(checkpoint, name=name, size=size, **overrides)
    model = build_from_spec(resolve_spec(name, size, **overrides))
    return model.eval()


def _zoo_model(name: str, size: str, checkpoint: str | Path | None, overrides: dict[str, Any]) -> nn.Module:
    """A zoo model (``deit-at``): its architecture with its bundled weights, the only weights the name stands for."""
    arch, training = ZOO_MODELS[name]
    if checkpoint != "zoo":
        raise RobfiltError(
            f"{name} names the zoo's {arch} after {training}; its weights are the model: drop --checkpoint, or use "
            f"--model {arch} with --checkpoint {checkpoint}."
        )
    if size != ZOO_MODEL_SIZE:
        raise RobfiltError(f"{name} exists at size {ZOO_MODEL_SIZE} only; drop --size {size}.")
    return load_checkpoint(zoo_path(name, size), name=arch, size=size, **overrides)
