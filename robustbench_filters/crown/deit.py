"""The graph of a timm ``VisionTransformer`` as robfilt builds its DeiTs: plain, BSA (Gaussian or untied position
kernel: a constant bias on the attention logits), GRC (the boosting residual ``(1 - lambda) Y + F(LN(Y)) +
lambda Y_0``), LayerScale, GELU or ReLU MLPs, the class token or mean pooling, and the input normaliser.

Anything else in such a model (a gate, q/k norms, registers, a distillation head, a patch-embedding norm, a
forward hook other than the normaliser) is refused by name, because a bound of a graph that is not the model
would not be a bound of the model. :func:`.build.build_graph` also checks the graph's output against the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import DropPath, LayerScale, Mlp, PatchDropout
from timm.layers.attention import Attention
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

from ..models.bsa import BilateralAttention
from ..models.grc import BlockStack
from ..models.normalize import get_normalizer
from .bilinear import MatMul
from .elementwise import Elementwise
from .graph import Graph, residual
from .layernorm import layer_norm
from .ops import Conv, Linear, Op, Reshape, Scale
from .softmax import Softmax
from .support import unsupported

EVAL_IDENTITY = (nn.Identity, nn.Dropout, DropPath, PatchDropout)


class TokenPrefix(Op):
    """Patch tokens -> all tokens: prepend the prefix (class) token and add the positions, as ``_pos_embed`` does.
    Affine: ``lin`` pads zero rows for the prefix; the constant is ``_pos_embed`` of zero patch tokens."""

    def __init__(self, inp: int, prefix: int, offset: torch.Tensor, shape, name: str = "pos_embed") -> None:
        self.inputs, self.prefix, self.offset, self.shape, self.name = (inp,), prefix, offset, tuple(shape), name

    def forward(self, x):
        return F.pad(x, (0, 0, self.prefix, 0)) + self.offset

    def ibp(self, b):
        from .interval import Interval

        return Interval(self.forward(b.lo), self.forward(b.hi))

    def lin(self, rel, ts, mode="c"):
        return None if mode == "dm" else F.pad(ts[0], (0, 0, self.prefix, 0))

    def lin_t(self, rel, lam, mode, in_shapes):
        return [None] if mode == "dm" else [lam[..., self.prefix :, :]]

    def const(self, rel):
        return self.offset, None


def _identity_in_eval(module: nn.Module, where: str) -> None:
    if not isinstance(module, EVAL_IDENTITY):
        raise unsupported(module, where)


def _w(t: torch.Tensor | None, dtype, device) -> torch.Tensor | None:
    return None if t is None else t.detach().to(device=device, dtype=dtype)


def _linear(g: Graph, x: int, layer: nn.Module, where: str, dtype, device) -> int:
    if not isinstance(layer, nn.Linear):
        raise unsupported(layer, where)
    shape = (*g.shape(x)[:-1], layer.out_features)
    return g.add(Linear(x, _w(layer.weight, dtype, device), _w(layer.bias, dtype, device), shape, where))


def _layerscale(g: Graph, x: int, ls: nn.Module, where: str, dtype, device) -> int:
    if isinstance(ls, nn.Identity):
        return x
    if not isinstance(ls, LayerScale):
        raise unsupported(ls, where)
    return g.add(Scale(x, _w(ls.gamma, dtype, device), None, g.shape(x), where))


def _embedding(g: Graph, model: VisionTransformer, dtype, device) -> int:
    pe = model.patch_embed
    conv = pe.proj
    if getattr(model, "dynamic_img_size", False) or not isinstance(conv, nn.Conv2d):
        raise unsupported(conv if isinstance(conv, nn.Module) else "dynamic image size", "patch_embed")
    _identity_in_eval(pe.norm, "patch_embed.norm")
    for part in ("pos_drop", "patch_drop"):
        _identity_in_eval(getattr(model, part), part)
    if getattr(model, "reg_token", None) is not None:
        raise unsupported("register tokens", "reg_token")
    x = 0
    norm = get_normalizer(model)
    c, h, w = g.input_shape
    if norm is not None:
        inv = 1.0 / _w(norm.std, dtype, device).reshape(-1, 1, 1)
        mean = _w(norm.mean, dtype, device).reshape(-1, 1, 1)
        x = g.add(Scale(x, inv.expand(c, 1, 1), (-mean * inv).expand(c, h, w), (c, h, w), "input_norm"))
    gh, gw = pe.grid_size
    d = conv.out_channels
    x = g.add(Conv(x, conv, _w(conv.weight, dtype, device), _w(conv.bias, dtype, device), (d, gh, gw),
                   "patch_embed.proj"))  # fmt: skip
    x = g.add(Reshape(x, lambda t: t.flatten(-2).transpose(-1, -2), (gh * gw, d), "patch_embed.flatten",
                      lambda t: t.transpose(-1, -2).reshape(*t.shape[:-2], d, gh, gw)))  # fmt: skip
    with torch.no_grad():
        zero = torch.zeros(1, gh * gw, d, dtype=next(model.parameters()).dtype, device=next(model.parameters()).device)
        offset = model._pos_embed(zero).to(device=device, dtype=dtype)
    prefix = offset.shape[1] - gh * gw
    return g.add(TokenPrefix(x, prefix, offset, (offset.shape[1], d)))


def _attention(g: Graph, x: int, attn: nn.Module, where: str, dtype, device) -> int:
    if not isinstance(attn, Attention):
        raise unsupported(attn, where)
    for part in ("q_norm", "k_norm", "norm"):
        if not isinstance(getattr(attn, part, nn.Identity()), nn.Identity):
            raise unsupported(getattr(attn, part), f"{where}.{part}")
    if getattr(attn, "gate", None) is not None:
        raise unsupported("a gated attention", f"{where}.gate")
    _identity_in_eval(attn.attn_drop, f"{where}.attn_drop")
    _identity_in_eval(attn.proj_drop, f"{where}.proj_drop")
    n, _ = g.shape(x)
    heads, dh = attn.num_heads, attn.head_dim
    bias = None
    if isinstance(attn, BilateralAttention):
        with torch.no_grad():
            bias = attn.full_bias(n, next(attn.parameters()).device, next(attn.parameters()).dtype)
        bias = bias.detach().to(device=device, dtype=dtype)
    elif type(attn).forward is not Attention.forward:
        raise unsupported(attn, where)
    qkv = _linear(g, x, attn.qkv, f"{where}.qkv", dtype, device)
    scale = dh**-0.5

    def part(i: int, s: float):
        def fn(t: torch.Tensor) -> torch.Tensor:
            out = t.reshape(*t.shape[:-1], 3, heads, dh).select(-3, i).transpose(-3, -2)
            return out * s if s != 1.0 else out

        def fn_t(t: torch.Tensor) -> torch.Tensor:  # (..., H, N, dh) -> (..., N, 3 H dh), zeros elsewhere
            out = t.new_zeros(*t.shape[:-3], n, 3, heads, dh)
            out[..., i, :, :] = t.transpose(-3, -2) * s if s != 1.0 else t.transpose(-3, -2)
            return out.reshape(*t.shape[:-3], n, 3 * heads * dh)

        return fn, fn_t

    q = g.add(Reshape(qkv, *part(0, scale)[:1], (heads, n, dh), f"{where}.q", part(0, scale)[1]))
    k = g.add(Reshape(qkv, *part(1, 1.0)[:1], (heads, n, dh), f"{where}.k", part(1, 1.0)[1]))
    v = g.add(Reshape(qkv, *part(2, 1.0)[:1], (heads, n, dh), f"{where}.v", part(2, 1.0)[1]))
    z = g.add(MatMul(q, k, (heads, n, n), f"{where}.logits", transpose_y=True, bias=bias, inner=dh))
    s = g.add(Softmax(z, (heads, n, n), f"{where}.softmax"))
    o = g.add(MatMul(s, v, (heads, n, dh), f"{where}.mix", inner=n))
    m = g.add(Reshape(o, lambda t: t.transpose(-3, -2).flatten(-2), (n, heads * dh), f"{where}.merge",
                      lambda t: t.reshape(*t.shape[:-1], heads, dh).transpose(-3, -2)))  # fmt: skip
    return _linear(g, m, attn.proj, f"{where}.proj", dtype, device)


def _mlp(g: Graph, x: int, mlp: nn.Module, where: str, dtype, device) -> int:
    if not isinstance(mlp, Mlp) or type(mlp).forward is not Mlp.forward:
        raise unsupported(mlp, where)
    for part in ("drop1", "norm", "drop2"):
        _identity_in_eval(getattr(mlp, part), f"{where}.{part}")
    h = _linear(g, x, mlp.fc1, f"{where}.fc1", dtype, device)
    act = mlp.act
    if isinstance(act, nn.GELU) and act.approximate == "none":
        kind = "gelu"
    elif isinstance(act, nn.ReLU):
        kind = "relu"
    else:
        raise unsupported(act, f"{where}.act")
    h = g.add(Elementwise(h, kind, g.shape(h), f"{where}.act"))
    return _linear(g, h, mlp.fc2, f"{where}.fc2", dtype, device)


def _first_token(x: int, n: int, d: int, name: str) -> Reshape:
    """(N, D) -> (1, D): the class token alone (its adjoint pads the other tokens with zeros)."""
    return Reshape(x, lambda t: t[..., :1, :], (1, d), name, lambda t: F.pad(t, (0, 0, 0, n - 1)))


def _lambdas(stack: nn.Module) -> list[tuple[float, float]]:
    if isinstance(stack, BlockStack) and stack.grc:
        lam = stack.lambdas().detach().double()
        return [(float(lam[i, 0]), float(lam[i, 1]) if lam.shape[1] == 2 else 0.0) for i in range(len(stack))]
    if isinstance(stack, nn.Sequential):
        return [(0.0, 0.0)] * len(stack)
    raise unsupported(stack, "blocks")


def vit_graph(model: VisionTransformer, name: str, dtype: torch.dtype, device: torch.device) -> Graph:
    """The graph of a (robfilt or timm) ViT on [0, 1] images, logits out."""
    for attr, what in (("attn_pool", "attention pooling"), ("head_dist", "a distillation head")):
        if getattr(model, attr, None) is not None:
            raise unsupported(what, attr)
    img = model.patch_embed.img_size
    g = Graph.start((model.patch_embed.proj.in_channels, int(img[0]), int(img[1])), name, "vit")
    x = _embedding(g, model, dtype, device)
    if isinstance(model.norm_pre, nn.LayerNorm):
        x = layer_norm(g, x, model.norm_pre, "norm_pre", dtype, device)
    elif not isinstance(model.norm_pre, nn.Identity):
        raise unsupported(model.norm_pre, "norm_pre")
    y0 = x
    g.notes["y0"] = y0
    tokens = g.shape(x)[0]
    lams = _lambdas(model.blocks)
    grc = isinstance(model.blocks, BlockStack) and model.blocks.grc
    last = len(model.blocks) - 1
    for i, (blk, (lam_a, lam_m)) in enumerate(zip(model.blocks, lams, strict=True)):
        where = f"blocks.{i}"
        if not isinstance(blk, Block) or type(blk).forward is not Block.forward:
            raise unsupported(blk, where)
        for p in ("drop_path1", "drop_path2"):
            _identity_in_eval(getattr(blk, p), f"{where}.{p}")
        for kind, norm, inner, ls, lam in (("attn", blk.norm1, blk.attn, blk.ls1, lam_a),
                                           ("mlp", blk.norm2, blk.mlp, blk.ls2, lam_m)):  # fmt: skip
            if not isinstance(norm, nn.LayerNorm):
                raise unsupported(norm, f"{where}.{'norm1' if kind == 'attn' else 'norm2'}")
            h = layer_norm(g, x, norm, f"{where}.{kind}.norm", dtype, device)
            fn = _attention if kind == "attn" else _mlp
            h = fn(g, h, inner, f"{where}.{kind}", dtype, device)
            h = _layerscale(g, h, ls, f"{where}.{kind}.ls", dtype, device)
            x = residual(g, x, h, y0 if grc else None, lam, f"{where}.{kind}.residual")
            if i == last and kind == "attn" and model.global_pool == "token" and tokens > 1:
                # only the class token reaches the head from here on (every later op acts per token): bounding
                # the others would cost a fifth of the passes and say nothing about the logits
                x = g.add(_first_token(x, tokens, g.shape(x)[1], f"{where}.attn.class_token"))
                if grc:
                    y0 = g.add(_first_token(y0, tokens, g.shape(y0)[1], f"{where}.y0.class_token"))
    if isinstance(model.norm, nn.LayerNorm):
        x = layer_norm(g, x, model.norm, "norm", dtype, device)
    elif not isinstance(model.norm, nn.Identity):
        raise unsupported(model.norm, "norm")
    n, d = g.shape(x)
    pool = model.global_pool
    if pool == "token":
        x = g.add(
            Reshape(x, lambda t: t.select(-2, 0), (d,), "pool", lambda t: F.pad(t[..., None, :], (0, 0, 0, n - 1)))
        )
    elif pool == "avg":
        start = 0 if getattr(model, "pool_include_prefix", False) else model.num_prefix_tokens

        def avg_t(t: torch.Tensor) -> torch.Tensor:
            return F.pad((t / (n - start))[..., None, :].expand(*t.shape[:-1], n - start, d), (0, 0, start, 0))

        x = g.add(Reshape(x, lambda t: t[..., start:, :].mean(-2), (d,), "pool", avg_t))
    else:
        raise unsupported(f"global_pool={pool!r}", "pool")
    if isinstance(model.fc_norm, nn.LayerNorm):
        x = layer_norm(g, x, model.fc_norm, "fc_norm", dtype, device)
    elif not isinstance(model.fc_norm, nn.Identity):
        raise unsupported(model.fc_norm, "fc_norm")
    _identity_in_eval(model.head_drop, "head_drop")
    if isinstance(model.head, nn.Linear):
        x = _linear(g, x, model.head, "head", dtype, device)
    elif not isinstance(model.head, nn.Identity):
        raise unsupported(model.head, "head")
    g.output = x
    cls = [i for i, op in enumerate(g.ops) if op.name.endswith(".class_token")]
    if cls:  # the ops after the selection ran on every token in the model: count them so (see Graph.pruned_macs)
        g.pruned_macs = (tokens - 1) * sum(op.macs() for op in g.ops[cls[0] + 1 :] if op.shape[:1] == (1,))
    g.notes["grc"] = grc
    g.notes["depth"] = len(model.blocks)
    g.notes["tokens"] = tokens
    return g
