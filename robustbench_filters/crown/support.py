"""What the bound engine covers, and the one-line refusal of anything else."""

from __future__ import annotations

from ..core.errors import RobfiltError

SUPPORTED = (
    "timm VisionTransformer DeiTs as robfilt builds them (plain, BSA, GRC, LayerScale; GELU or ReLU MLPs; class-token "
    "or mean pooling; the input normaliser) and plain nn.Sequential stacks of Linear, Conv2d, ReLU, GELU and Flatten"
)


def unsupported(what: object, where: str) -> RobfiltError:
    """The refusal for a layer (or a whole model) the graph builders do not know."""
    name = what if isinstance(what, str) else type(what).__name__
    return RobfiltError(f"crown bounds do not cover {name} at {where}; they cover {SUPPORTED}.")
