"""The one walker of a covered model: affine embedding -> stages -> readout, built once and checked once.

Every certified number is computed on a :class:`Chain`, never on the model's own ``forward``:
:mod:`.certify` walks it for the global constant, the layer-by-layer local constant and the per-block records;
:mod:`.local_bound` sweeps it stage by stage for the refined local constant; the research code
(:mod:`.research`) differentiates its stages. A chain exists for three structures:

- timm ``VisionTransformer`` (robfilt DeiTs, BSA/GRC variants, stock timm ViTs) and robfilt ``CausalLM``: one stage
  per residual sublayer on the hidden state ``h`` (B, N, D), with the boosting input ``Y_0`` held fixed,

      h -> (1 - lambda) h + ls * F(LN(h)) + lambda Y_0          (lambda = 0: the stock residual)

  with F the attention or the MLP, plus an optional ``norm_pre`` LayerNorm stage. The embedding in front is affine
  in the input (patch convolution + constant prefix tokens + positions, or the LM's token embeddings + positions),
  and the readout is LayerNorm -> token selection, mean or max -> (fc_norm) -> linear head;
- a plain ``nn.Sequential`` (nested Sequentials flattened) of the layers :mod:`.coverage` has constants for: one
  ``layer`` stage per leaf, composed by the product rule.

:func:`build_chain` raises the one-line :class:`RobfiltError` naming the first uncovered layer (or forward hook)
before any number is computed, and the callers verify :meth:`Chain.forward` against the model's own output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..core.family import Family
from ..models.lm import CausalLM
from ..models.normalize import get_normalizer, normalize_input
from .attention_bound import check_attention
from .constants import check_layernorm, normalizer_lipschitz, uncovered
from .coverage import check_sequential, flatten_sequential
from .layers import _check_block, _is_identity_in_eval, _layerscale, _mlp_lipschitz, _stack_lambdas, _sublayer
from .spectral import conv_lipschitz, spectral_norm
from .target import Target

#: One input-independent factor of the global bound in front of the first stage: (layer, kind, value, detail).
Factor = tuple[str, str, float, str]


@dataclass
class Embedding:
    """x -> h_0, affine. ``patch_map`` M (D, p) and the constant ``offset`` describe h_t = M x_patch + c_t.

    ``lipschitz`` and ``token_gain`` fold the input normaliser into the patch matrix (the stage-wise bounds use
    them); ``factors`` are the same map as the global bound composes it, one layer at a time (normaliser, then
    the convolution), so the factor table names each."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    lipschitz: float  # global constant of x -> h_0
    token_gain: torch.Tensor | None  # (N,) constant of x -> h_{0,t} (0 for constant prefix tokens); None: generic
    patch_map: torch.Tensor | None  # (D, p) for non-overlapping patch embeddings on a [0, 1] box, else None
    num_prefix: int
    factors: tuple[Factor, ...] = ()


@dataclass
class Stage:
    """One map of the chain on the hidden state (boosting input held fixed)."""

    name: str
    kind: str  # "attn" | "mlp" | "norm" | "layer" (one leaf of a plain Sequential)
    block: int  # block index (-1 for norm_pre and Sequential leaves)
    norm: nn.LayerNorm | None  # None for "layer"
    inner: nn.Module | None  # the attention or MLP module, or the leaf (None for "norm")
    ls_module: nn.Module
    ls: float  # max |LayerScale gamma| (1 without LayerScale)
    lam: float  # boosting lambda (0: plain residual)
    lam_t: torch.Tensor | None  # the lambda tensor the model uses (None: plain residual)
    is_causal: bool

    def branch(self, h: torch.Tensor) -> torch.Tensor:
        """ls * F(LN(h)) (dropout and DropPath are identities in eval mode, checked at build time)."""
        z = self.norm(h)
        out = self.inner(z, is_causal=self.is_causal) if self.kind == "attn" else self.inner(z)
        return self.ls_module(out)

    def forward(self, h: torch.Tensor, y0: torch.Tensor | None) -> torch.Tensor:
        if self.kind == "norm":
            return self.norm(h)
        if self.kind == "layer":
            return self.inner(h)
        return _sublayer(h, self.branch(h), y0, self.lam_t)


@dataclass
class Readout:
    """LayerNorm -> pool (one token, or the mean / max of tokens ``start:``) -> fc_norm -> head.

    ``flatten`` (plain Sequentials): the last stage's output, flattened per example."""

    pool: str  # "token" | "avg" | "max" | "flatten"
    index: int  # the selected token ("token"); -1 = last position
    start: int  # first averaged token ("avg")
    norm: nn.LayerNorm | None
    fc_norm: nn.LayerNorm | None
    head: nn.Linear | None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.pool == "flatten":
            return h.reshape(h.shape[0], -1)
        if self.pool == "token":
            t = h[:, self.index]
            t = self.norm(t) if self.norm is not None else t
        else:
            t = (self.norm(h) if self.norm is not None else h)[:, self.start :]
            t = t.mean(1) if self.pool == "avg" else t.amax(1)
        t = self.fc_norm(t) if self.fc_norm is not None else t
        return self.head(t) if self.head is not None else t


@dataclass
class Chain:
    """The whole covered model. ``y0_stage``: index of the stage whose input is the boosting input Y_0.

    ``kind`` is ``vit``, ``lm`` or ``sequential``; the stage-wise local bounds exist for the first two."""

    name: str
    kind: str
    family: Family | None
    embedding: Embedding
    stages: list[Stage]
    readout: Readout
    grc: bool
    y0_stage: int

    def states(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None, torch.Tensor]:
        """(stage inputs h_0..h_K, Y_0, logits) at x; h_K is the readout's input."""
        h = self.embedding.fn(x)
        hs, y0 = [h], None
        for i, stage in enumerate(self.stages):
            if i == self.y0_stage and self.grc:
                y0 = h
            h = stage.forward(h, y0)
            hs.append(h)
        return hs, y0, self.readout.forward(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.states(x)[2]

    @property
    def transformer(self) -> bool:
        return self.kind != "sequential"


def _optional_norm(module: nn.Module, where: str) -> nn.LayerNorm | None:
    if isinstance(module, nn.Identity):
        return None
    check_layernorm(module, where)
    return module


def _stages(stack: nn.Module, dtype: torch.dtype, is_causal: bool, first: int) -> list[Stage]:
    lambdas = _stack_lambdas(stack, len(stack), dtype)
    stages = []
    for i, (blk, lams) in enumerate(zip(stack, lambdas, strict=True)):
        where = f"blocks.{i}"
        _check_block(blk, where)
        check_attention(blk.attn, f"{where}.attn")
        _mlp_lipschitz(blk.mlp, f"{where}.mlp")  # fc1 -> act -> fc2 only (no norm, no dropout in eval)
        for kind, norm, inner, ls_mod, lam in (
            ("attn", blk.norm1, blk.attn, blk.ls1, lams[0]),
            ("mlp", blk.norm2, blk.mlp, blk.ls2, lams[1]),
        ):
            check_layernorm(norm, f"{where}.{'norm1' if kind == 'attn' else 'norm2'}")
            ls = _layerscale(ls_mod, f"{where}.ls{1 if kind == 'attn' else 2}")
            stages.append(
                Stage(name=f"{where}.{kind}", kind=kind, block=first + i, norm=norm, inner=inner, ls_module=ls_mod,
                      ls=ls, lam=float(lam) if lam is not None else 0.0, lam_t=lam, is_causal=is_causal)
            )  # fmt: skip
    return stages


def _patch_embedding(model: VisionTransformer) -> Embedding:
    pe = model.patch_embed
    conv = pe.proj
    if not isinstance(conv, nn.Conv2d) or tuple(conv.dilation) != (1, 1) or conv.groups != 1:
        raise uncovered(conv, "patch_embed.proj")
    w = conv.weight.detach().double()
    mat = w.reshape(w.shape[0], -1)
    norm = get_normalizer(model)  # the root's pre-hook normaliser: model(x) runs it before the patch embedding
    if norm is not None:  # (x - mean) / std per input channel, folded into the patch matrix
        inv = (1.0 / norm.std.detach().double().flatten()).repeat_interleave(w.shape[2] * w.shape[3])
        mat = mat * inv[None, :]
    gain = spectral_norm(mat)
    kh, kw = conv.kernel_size
    sh, sw = conv.stride
    tiled = (kh, kw) == (sh, sw) and tuple(conv.padding) == (0, 0)
    lip = gain * math.sqrt(math.ceil(kh / sh) * math.ceil(kw / sw))
    n_patch = int(pe.num_patches)
    prefix = model.num_prefix_tokens
    token_gain = torch.cat([torch.zeros(prefix, dtype=torch.float64), torch.full((n_patch,), gain).double()])
    factors: list[Factor] = []
    if norm is not None:
        factors.append(("input_norm", "normalizer", normalizer_lipschitz(norm.std), "max_c 1/std_c"))
    detail = "||W.reshape(C_out, C_in k k)||_2 (non-overlapping: exact)" if tiled else "sqrt(overlap) ||W_mat||_2"
    factors.append(("patch_embed.proj", "patch_embed", conv_lipschitz(conv, "patch_embed.proj"), detail))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return model.patch_drop(model._pos_embed(model.patch_embed(normalize_input(model, x))))

    return Embedding(fn=fn, lipschitz=lip, token_gain=token_gain, patch_map=mat if tiled else None, num_prefix=prefix,
                     factors=tuple(factors))  # fmt: skip


def _vit_chain(model: VisionTransformer, name: str, dtype: torch.dtype) -> Chain:
    for attr, what in (("attn_pool", "attn_pool"), ("head_dist", "head_dist")):
        if getattr(model, attr, None) is not None:
            raise uncovered(attr if attr != "head_dist" else "distilled DeiT head", what)
    if getattr(model, "dynamic_img_size", False):
        raise uncovered("VisionTransformer with dynamic_img_size", "patch_embed")
    if not isinstance(model.patch_embed.norm, nn.Identity):
        raise uncovered(model.patch_embed.norm, "patch_embed.norm")
    for part in ("pos_drop", "patch_drop", "head_drop"):
        if not _is_identity_in_eval(getattr(model, part)):
            raise uncovered(getattr(model, part), part)
    stages: list[Stage] = []
    pre = _optional_norm(model.norm_pre, "norm_pre")
    if pre is not None:
        stages.append(Stage("norm_pre", "norm", -1, pre, None, nn.Identity(), 1.0, 0.0, None, False))
    y0_stage = len(stages)
    stages += _stages(model.blocks, dtype, is_causal=False, first=0)
    pool = model.global_pool
    if pool not in ("token", "avg", "max"):
        raise uncovered(f"global_pool={pool!r}", "pool")
    head = model.head
    if not isinstance(head, (nn.Linear, nn.Identity)):
        raise uncovered(head, "head")
    readout = Readout(
        pool=pool, index=0, start=0 if model.pool_include_prefix else model.num_prefix_tokens,
        norm=_optional_norm(model.norm, "norm"), fc_norm=_optional_norm(model.fc_norm, "fc_norm"),
        head=head if isinstance(head, nn.Linear) else None,
    )  # fmt: skip
    grc = any(s.lam_t is not None for s in stages)
    return Chain(name, "vit", Family.IMAGE, _patch_embedding(model), stages, readout, grc, y0_stage)


def _lm_chain(model: CausalLM, name: str, dtype: torch.dtype, n_tokens: int) -> Chain:
    if not _is_identity_in_eval(model.drop):
        raise uncovered(model.drop, "drop")

    def fn(emb: torch.Tensor) -> torch.Tensor:
        t = emb + model.pos_embed[:, : emb.shape[1]] if model.add_positions else emb
        return model.drop(t)

    emb = Embedding(fn=fn, lipschitz=1.0, token_gain=torch.ones(n_tokens, dtype=torch.float64), patch_map=None,
                    num_prefix=0)  # fmt: skip
    stages = _stages(model.blocks, dtype, is_causal=True, first=0)
    check_layernorm(model.norm, "norm")
    readout = Readout(pool="token", index=-1, start=0, norm=model.norm, fc_norm=None, head=model.lm_head)
    grc = any(s.lam_t is not None for s in stages)
    return Chain(name, "lm", Family.LM, emb, stages, readout, grc, 0)


def _sequential_chain(model: nn.Module, name: str, family: Family | None) -> Chain:
    check_sequential(model)
    stages = [
        Stage(name=where or type(layer).__name__, kind="layer", block=-1, norm=None, inner=layer,
              ls_module=nn.Identity(), ls=1.0, lam=0.0, lam_t=None, is_causal=False)
        for where, layer in flatten_sequential(model)
    ]  # fmt: skip
    emb = Embedding(fn=lambda x: x, lipschitz=1.0, token_gain=None, patch_map=None, num_prefix=0)
    readout = Readout(pool="flatten", index=0, start=0, norm=None, fc_norm=None, head=None)
    return Chain(name, "sequential", family, emb, stages, readout, False, 0)


def _check_hooks(model: nn.Module) -> None:
    """Forward hooks change what a module computes behind the bound's back; only the input normaliser is known."""
    for name, module in model.named_modules():
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            if getattr(hook, "__name__", "") != "_normalize_hook":
                raise uncovered(f"forward hook {getattr(hook, '__name__', type(hook).__name__)}", name or "model")


def build_chain(target: Target, x: torch.Tensor) -> Chain:
    """The chain of ``target`` for inputs shaped like ``x``; raises :class:`RobfiltError` when not covered."""
    model = target.model
    _check_hooks(model)
    if isinstance(model, CausalLM):
        return _lm_chain(model, target.name, next(model.parameters()).dtype, x.shape[1])
    if isinstance(model, VisionTransformer):
        return _vit_chain(model, target.name, next(model.parameters()).dtype)
    return _sequential_chain(model, target.name, target.family)
