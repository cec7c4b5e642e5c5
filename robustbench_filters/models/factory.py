"""``create_model``: the one entry point that builds a registry model, from the zoo, a checkpoint or untrained.

It sits above both the registry (which builds untrained models) and the checkpoint loader (which builds from a
card), so neither has to import the other's caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ..core.errors import CheckpointError, unknown
from ..core.names import SIZES, ZOO_MODEL_SIZE, ZOO_MODELS, parse_name
from ..core.surface import flag, given
from .checkpoint import is_zoo_ref, load_checkpoint, zoo_path
from .registry import build_from_spec, resolve_spec

#: what ``checkpoint`` asks for untrained (random) weights with
UNTRAINED = "none"


def wants_untrained(checkpoint: str | Path | None) -> bool:
    """True only for the explicit request ``"none"`` (any case): None is "not given", i.e. the zoo default."""
    return checkpoint is not None and str(checkpoint).strip().lower() == UNTRAINED


def create_model(
    name: str,
    size: str = "micro",
    checkpoint: str | Path | None = "zoo",
    **overrides: Any,
) -> nn.Module:
    """Build a model by name with the weights the command line would use: the bundled trained weights by default.

    ``checkpoint``: ``"zoo"`` (the default, as ``robfilt``'s ``--checkpoint``; None means the same), ``"zoo:sigma0.25"``
    for the bundled weights trained with Gaussian noise (std 0.25) for randomized smoothing, a checkpoint folder,
    or ``"none"`` for untrained (seeded by torch's global RNG) weights, which only an explicit ``"none"`` gives, so a
    model is never silently untrained.

    Overrides reach every config field of an untrained model, e.g. ``create_model("deit-grc", checkpoint="none",
    grc_lambda=0.0)``; a checkpoint fixes the architecture, so only ``fused_attn`` may change on load. Image models
    take [0, 1] inputs. The model is returned in eval mode. A zoo model (``deit-at``, ``deit-grc-at``: adversarially
    trained) is its zoo weights: ``create_model("deit-at")``.
    """
    if name in ZOO_MODELS:
        return _zoo_model(name, size, checkpoint, overrides)
    if wants_untrained(checkpoint):
        return build_from_spec(resolve_spec(name, size, **overrides)).eval()
    checkpoint = "zoo" if checkpoint is None else checkpoint
    family, _, _ = parse_name(name)  # an unknown name or size is refused as such, not as missing weights
    if size not in SIZES[family]:
        raise unknown(f"size for {name}", size, SIZES[family])
    changed = sorted(k for k, v in overrides.items() if v is not None and k != "fused_attn")
    if changed:
        weights = "the zoo's" if is_zoo_ref(checkpoint) else f"checkpoint {checkpoint}'s"
        raise CheckpointError(
            f"{', '.join(changed)} would change the architecture {weights} weights were trained with; pass "
            f"{given('checkpoint', UNTRAINED)} for an untrained model with these settings, or drop "
            f"{'them' if len(changed) > 1 else 'it'}."
        )
    return load_checkpoint(checkpoint, name=name, size=size, **overrides)


def _zoo_model(name: str, size: str, checkpoint: str | Path | None, overrides: dict[str, Any]) -> nn.Module:
    """A zoo model (``deit-at``): its architecture with its bundled weights, the only weights the name stands for."""
    arch, training = ZOO_MODELS[name]
    if checkpoint not in (None, "zoo"):
        raise CheckpointError(
            f"{name} names the zoo's {arch} after {training}; its weights are the model: drop {flag('checkpoint')}, "
            f"or load the architecture, {arch}, with {given('checkpoint', str(checkpoint))}."
        )
    if size != ZOO_MODEL_SIZE:
        raise CheckpointError(f"{name} exists at size {ZOO_MODEL_SIZE} only; drop {given('size', size)}.")
    return load_checkpoint(zoo_path(name, size), name=arch, size=size, **overrides)
