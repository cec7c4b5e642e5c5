"""Layer constants and wiring checks of the chain (:mod:`.chain`) and the bounds on it (:mod:`.certify`): which
timm blocks, MLPs, LayerScales and boosting stacks a certified bound covers, and the boosting sublayer."""

from __future__ import annotations

import torch
from timm.layers import DropPath, LayerScale, Mlp, PatchDropout
from timm.models.vision_transformer import Block
from torch import nn

from ..models.grc import BlockStack, boost
from .constants import activation_lipschitz, uncovered
from .spectral import linear_lipschitz


def _is_identity_in_eval(module: nn.Module) -> bool:
    return isinstance(module, (nn.Identity, nn.Dropout, DropPath, PatchDropout))


def _layerscale(module: nn.Module, where: str) -> float:
    if isinstance(module, nn.Identity):
        return 1.0
    if isinstance(module, LayerScale):
        return module.gamma.detach().double().abs().max().item()
    raise uncovered(module, where)


def _mlp_lipschitz(mlp: nn.Module, where: str) -> tuple[float, str]:
    if type(mlp).forward is not Mlp.forward:
        raise uncovered(mlp, where)
    for part in ("drop1", "norm", "drop2"):
        if not _is_identity_in_eval(getattr(mlp, part)):
            raise uncovered(getattr(mlp, part), f"{where}.{part}")
    for part in ("fc1", "fc2"):
        if not isinstance(getattr(mlp, part), nn.Linear):
            raise uncovered(getattr(mlp, part), f"{where}.{part}")
    w1, w2 = linear_lipschitz(mlp.fc1), linear_lipschitz(mlp.fc2)
    act = activation_lipschitz(mlp.act, f"{where}.act")
    return w2 * act * w1, f"||W2||={w2:.4g} * act={act:.7g} * ||W1||={w1:.4g}"


def _check_block(blk: nn.Module, where: str) -> None:
    if not isinstance(blk, Block) or type(blk).forward is not Block.forward:
        raise uncovered(blk, where)
    for part in ("drop_path1", "drop_path2"):
        if not _is_identity_in_eval(getattr(blk, part)):
            raise uncovered(getattr(blk, part), f"{where}.{part}")


def _sublayer(x: torch.Tensor, f: torch.Tensor, y0: torch.Tensor | None, lam: torch.Tensor | None) -> torch.Tensor:
    return x + f if lam is None else boost(x, f, y0, lam)


def _stack_lambdas(stack: nn.Module, depth: int, dtype: torch.dtype):
    if isinstance(stack, BlockStack) and stack.grc:
        lam = stack.lambdas().detach().to(dtype)
        return [(lam[i, 0], lam[i, 1] if lam.shape[1] == 2 else None) for i in range(depth)]
    if isinstance(stack, (nn.Sequential, BlockStack)):
        return [(None, None)] * depth
    raise uncovered(stack, "blocks")
