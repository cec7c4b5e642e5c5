"""Sequence-length study: how much one attention layer amplifies a fixed small input noise as N grows.

The paper's argument (docs/design.md) is that additive positions put content-position cross terms into every logit
and that this noise grows with the sequence length, while BSA keeps position in an input-independent kernel.
We measure it directly on one pre-norm attention sublayer x -> Attn(LN(x)):

- ``softmax+pos``: timm ``Attention`` on x = e + p with sinusoidal positions p (unit per-coordinate scale, like
  the content);
- ``bsa-gaussian``: ``BilateralAttention`` with the Gaussian position kernel on x = e (no additive positions);
- ``softmax``: timm ``Attention`` on x = e, the no-position control.

All kinds share the same q/k/v/out weights (seeded). Content e ~ N(0, 1) per coordinate; the noise delta has
per-token norm ``noise`` (the same delta for every kind). The perturbation is the per-token RMS output change
||f(x + delta) - f(x)||_F / sqrt(N). Next to it, ``upper`` is the certified constant of the attention layer on the
LayerNorm ball (notes §1.4(f), attention alone, without the LayerNorm factor), which is the same for all kinds because the position bias is input-independent.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from timm.layers import Attention
from torch import nn

from ..models.bsa import bsa_layer
from .attention_bound import attention_lipschitz
from .constants import layernorm_output_radius

KINDS: tuple[str, ...] = ("softmax+pos", "bsa-gaussian", "softmax")
DEFAULT_NS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)


def sinusoidal_positions(n: int, dim: int) -> torch.Tensor:
    """The Transformer's sin/cos table, scaled by sqrt(2) so each coordinate has unit mean square."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(n, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return math.sqrt(2.0) * table


def _layers(dim: int, heads: int, sigma_range: tuple[float, float], seed: int) -> dict[str, nn.Module]:
    torch.manual_seed(seed)
    softmax = Attention(dim, num_heads=heads, qkv_bias=True).double().eval()
    bsa = bsa_layer("gaussian", sigma_range)(dim, num_heads=heads, qkv_bias=True).double().eval()
    bsa.load_state_dict(softmax.state_dict(), strict=False)
    bsa.configure(grid=None, num_prefix_tokens=0)
    for layer in (softmax, bsa):
        layer.fused_attn = False
    return {"softmax+pos": softmax, "bsa-gaussian": bsa, "softmax": softmax}


def sequence_length_study(
    ns: tuple[int, ...] | list[int] = DEFAULT_NS,
    *,
    dim: int = 64,
    heads: int = 4,
    noise: float = 1e-3,
    trials: int = 8,
    sigma_range: tuple[float, float] = (2.0, 64.0),
    seed: int = 0,
) -> pd.DataFrame:
    """Columns: n, kind, mean_perturbation, std_perturbation, noise, trials, upper."""
    layers = _layers(dim, heads, sigma_range, seed)
    norm = nn.LayerNorm(dim, eps=1e-6).double()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for n in ns:
        e = torch.randn(trials, n, dim, generator=gen, dtype=torch.float64)
        delta = torch.randn(trials, n, dim, generator=gen, dtype=torch.float64)
        delta = noise * delta / delta.norm(dim=-1, keepdim=True)
        pos = sinusoidal_positions(n, dim)
        upper = attention_lipschitz(layers["softmax"], n, layernorm_output_radius(norm)).value
        for kind in KINDS:
            layer = layers[kind]
            x = e + pos if kind == "softmax+pos" else e
            with torch.no_grad():
                diff = layer(norm(x + delta)) - layer(norm(x))
            per_trial = diff.flatten(1).norm(dim=1) / math.sqrt(n)
            rows.append(
                {
                    "n": n,
                    "kind": kind,
                    "mean_perturbation": per_trial.mean().item(),
                    "std_perturbation": per_trial.std().item() if trials > 1 else 0.0,
                    "noise": noise,
                    "trials": trials,
                    "upper": upper,
                }
            )
    return pd.DataFrame(rows)
