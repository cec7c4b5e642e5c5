"""Closed-form Lipschitz constants of the elementwise and normalisation layers (notes/lipschitz.md §1.2).

All constants are for the l2 norm. They are exact suprema of the Jacobian spectral norm over the stated domain,
so they compose with the rules of §1.1 into certified bounds. Every value here has a closed-form test.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.errors import RobfiltError
from ..core.surface import Surface, current_surface, switched

# sup |GELU'(x)| = Phi(sqrt 2) + exp(-1)/sqrt(pi), attained at x = sqrt(2) (exact erf GELU, timm's nn.GELU).
GELU_LIPSCHITZ: float = 0.5 * (1.0 + math.erf(1.0)) + math.exp(-1.0) / math.sqrt(math.pi)
# tanh approximation (GPT-2 ``gelu_new``), found numerically on a dense grid (notes §1.2); rounded *up*.
GELU_TANH_LIPSCHITZ: float = 1.1289932
# SiLU: sup |d/dx x sigmoid(x)|, numerically 1.0998393; rounded up.
SILU_LIPSCHITZ: float = 1.0998394


def activation_lipschitz(module: nn.Module, where: str = "") -> float:
    """The Lipschitz constant of a pointwise activation module.

    Elementwise maps act diagonally, so the constant is sup |phi'|. Anything not listed raises, because a
    silently guessed constant would make the certified bound wrong.
    """
    if isinstance(module, nn.GELU):
        return GELU_TANH_LIPSCHITZ if module.approximate == "tanh" else GELU_LIPSCHITZ
    if isinstance(module, (nn.ReLU, nn.Tanh, nn.Identity, nn.Dropout)):
        return 1.0
    if isinstance(module, nn.SiLU):
        return SILU_LIPSCHITZ
    raise uncovered(module, where)


# sup |phi''| of the smooth activations (for the second-order local bound, :mod:`.research.taylor`): GELU (exact and tanh)
# peaks at x = 0 with 2 phi(0) = sqrt(2/pi); SiLU at 0 with 1/2; tanh at 4/(3 sqrt 3). Rounded up.
GELU_CURVATURE: float = math.sqrt(2.0 / math.pi) * (1 + 1e-12)
SILU_CURVATURE: float = 0.5 * (1 + 1e-12)
TANH_CURVATURE: float = 4.0 / (3.0 * math.sqrt(3.0)) * (1 + 1e-12)


def activation_curvature(module: nn.Module) -> float:
    """sup |phi''| of a pointwise activation: the Lipschitz constant of its derivative.

    ReLU has a jump in phi' (no finite constant): ``inf``, which switches the second-order bound off for that
    layer while the first-order bounds still hold.
    """
    if isinstance(module, nn.GELU):
        return GELU_CURVATURE
    if isinstance(module, nn.SiLU):
        return SILU_CURVATURE
    if isinstance(module, nn.Tanh):
        return TANH_CURVATURE
    if isinstance(module, (nn.Identity, nn.Dropout)):
        return 0.0
    return math.inf


def uncovered(module: nn.Module | str, where: str = "") -> RobfiltError:
    """The error for a layer the certified bounds do not cover: names the layer type and where it sits."""
    name = module if isinstance(module, str) else type(module).__name__
    at = f" at {where}" if where else ""
    return RobfiltError(
        f"no certified Lipschitz bound for layer type {name!r}{at}; covered are timm DeiT/ViT and robfilt LM "
        f"blocks (LayerNorm, Linear, GELU/ReLU/SiLU/Tanh, timm Attention, BilateralAttention) - {empirical_only()}."
    )


def empirical_only() -> str:
    """The fix for a model the certified bounds do not cover, as the current surface spells it."""
    if current_surface() is Surface.CLI:
        return "run with --no-bounds and without --per-layer or --gap for the empirical lower bounds only"
    off = [switched(name, on=False) for name in ("bounds", "per_layer", "gap")]
    return f"pass {', '.join(off[:-1])} and {off[-1]} for the empirical lower bounds only"


def layernorm_output_radius(norm: nn.LayerNorm) -> float:
    """R such that every token of LN(x) has ||LN(x)_t||_2 <= R, for every input x.

    LN(x) = gamma * z + beta with ||z||^2 = d sigma^2 / (sigma^2 + eps) < d, so
    ||LN(x)_t|| <= max|gamma| sqrt(d) + ||beta||. Attention after a LayerNorm therefore only ever sees inputs in
    the ball of this radius, where dot-product attention *is* Lipschitz (notes §1.2, §1.4(g)).
    """
    check_layernorm(norm)
    d = norm.normalized_shape[-1]
    gamma = _gamma(norm)
    beta = norm.bias.detach().double().norm().item() if norm.bias is not None else 0.0
    return gamma * math.sqrt(d) + beta


def layernorm_lipschitz(norm: nn.LayerNorm, sigma_lo: torch.Tensor | float = 0.0) -> torch.Tensor | float:
    """Jacobian bound of LayerNorm for inputs whose per-token std is at least ``sigma_lo``.

    J(x) = diag(gamma) (1/s) (I - z z^T) C with s = sqrt(sigma^2 + eps) and ||z|| < 1, C the centring
    projection, so ||J(x)|| <= max|gamma| / sqrt(sigma^2(x) + eps). With ``sigma_lo = 0`` this is the global
    constant max|gamma| / sqrt(eps), attained exactly at zero variance when gamma = 1 (notes §1.2). LayerNorm
    acts token-wise, so the sequence Jacobian is block diagonal and the same constant bounds it.
    """
    check_layernorm(norm)
    gamma = _gamma(norm)
    if isinstance(sigma_lo, torch.Tensor):
        return gamma / torch.sqrt(sigma_lo.double().pow(2) + norm.eps)
    return gamma / math.sqrt(float(sigma_lo) ** 2 + norm.eps)


def check_layernorm(norm: nn.Module, where: str = "") -> None:
    """Only last-dimension LayerNorm with eps > 0 has the bounds above."""
    if not isinstance(norm, nn.LayerNorm) or len(norm.normalized_shape) != 1 or not norm.eps > 0:
        raise uncovered(norm, where)


def _gamma(norm: nn.LayerNorm) -> float:
    return norm.weight.detach().double().abs().max().item() if norm.weight is not None else 1.0


def normalizer_lipschitz(std: torch.Tensor) -> float:
    """(x - mean) / std per channel scales channel c by 1/std_c, so the constant is max_c 1/std_c."""
    return (1.0 / std.detach().double().abs()).max().item()


def mean_pool_lipschitz(n: int) -> float:
    """Averaging n tokens: the map x -> (1/n) sum_t x_t has operator norm exactly 1/sqrt(n)."""
    return 1.0 / math.sqrt(n)
