"""Layer-level tests of BSA (bilateral attention) and GRC (boosting residual) against naive references.

Every reference here is written out independently of the code under test (explicit loops, explicit softmax,
float64), and most tests also check a deliberately wrong reference, so a test that cannot fail is caught.
"""

from __future__ import annotations

import math

import pytest
import torch
from timm.layers import Attention
from timm.models.vision_transformer import Block
from torch import nn

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models import BlockStack, create_model
from robustbench_filters.models.bsa import (
    BilateralAttention,
    attention,
    attention_probs,
    attention_weights,
    bsa_layer,
    initial_sigmas,
)

# ----------------------------------------------------------------------------------------------------------
# naive references


def naive_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Row softmax written out: exp(l - max) / sum (rows of -inf entries give 0 there)."""
    m = logits.max(dim=-1, keepdim=True).values
    e = torch.exp(logits - m)
    return e / e.sum(dim=-1, keepdim=True)


def naive_mhsa(module: nn.Module, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Multi-head self-attention of ``module``'s weights with an explicit per-head logit bias (H, N, N).

    float64, one example and one head at a time: softmax(q.k / sqrt(d) + bias) v, then the output projection.
    """
    x = x.double()
    wqkv, bqkv = module.qkv.weight.double(), module.qkv.bias.double()
    wproj, bproj = module.proj.weight.double(), module.proj.bias.double()
    n_heads, dim = module.num_heads, x.shape[-1]
    d = dim // n_heads
    outs = []
    for xb in x:
        qkv = xb @ wqkv.T + bqkv  # (N, 3C): [q | k | v], heads contiguous inside each
        q, k, v = qkv[:, :dim], qkv[:, dim : 2 * dim], qkv[:, 2 * dim :]
        heads = []
        for h in range(n_heads):
            sl = slice(h * d, (h + 1) * d)
            logits = q[:, sl] @ k[:, sl].T / math.sqrt(d) + bias[h].double()
            heads.append(naive_softmax(logits) @ v[:, sl])
        outs.append(torch.cat(heads, dim=-1) @ wproj.T + bproj)
    return torch.stack(outs)


def gaussian_bias_1d_causal(n: int, sigmas: list[float]) -> torch.Tensor:
    """b_h(i, j) = -(i - j)^2 / (2 sigma_h^2) for j <= i, -inf for j > i (future tokens)."""
    bias = torch.empty(len(sigmas), n, n, dtype=torch.float64)
    for h, s in enumerate(sigmas):
        for i in range(n):
            for j in range(n):
                bias[h, i, j] = -((i - j) ** 2) / (2 * s**2) if j <= i else float("-inf")
    return bias


def gaussian_bias_grid(rows: int, cols: int, n_prefix: int, sigmas: list[float]) -> torch.Tensor:
    """b_h(i, j) = -||p_i - p_j||^2 / (2 sigma_h^2) on a (row, col) grid; 0 to and from prefix tokens."""
    n = n_prefix + rows * cols
    bias = torch.zeros(len(sigmas), n, n, dtype=torch.float64)
    for h, s in enumerate(sigmas):
        for i in range(n_prefix, n):
            ri, ci = divmod(i - n_prefix, cols)
            for j in range(n_prefix, n):
                rj, cj = divmod(j - n_prefix, cols)
                bias[h, i, j] = -((ri - rj) ** 2 + (ci - cj) ** 2) / (2 * s**2)
    return bias


def untied_bias(module: nn.Module, pos: torch.Tensor) -> torch.Tensor:
    """b_h(i, j) = (p_i U_Q^h) . (p_j U_K^h) / sqrt(d_h), written per head."""
    p = pos.double()
    n_heads = module.num_heads
    d = module.pos_q.weight.shape[0] // n_heads
    uq, uk = module.pos_q.weight.double(), module.pos_k.weight.double()
    out = []
    for h in range(n_heads):
        sl = slice(h * d, (h + 1) * d)
        out.append((p @ uq[sl].T) @ (p @ uk[sl].T).T / math.sqrt(d))
    return torch.stack(out)


def set_sigmas(module: BilateralAttention, sigmas: list[float]) -> None:
    """Put known widths into the layer (sigma = softplus(theta), so theta = log(exp(sigma) - 1))."""
    with torch.no_grad():
        module.sigma_theta.copy_(torch.log(torch.expm1(torch.tensor(sigmas))))


def sharpen(module: nn.Module, std: float) -> None:
    """Larger q/k/v weights than the init, so attention is far from uniform and kernel errors show."""
    with torch.no_grad():
        module.qkv.weight.normal_(0.0, std)
        module.qkv.bias.normal_(0.0, 0.1)


# ----------------------------------------------------------------------------------------------------------
# the attention primitive


@pytest.mark.parametrize("fused", [True, False])
def test_one_head_worked_example(fused: bool) -> None:
    """q=[2], keys [2], [1], values [10], [4]: logits 4 and 2 -> weights (0.881, 0.119), output 9.29."""
    q = torch.tensor([[[[2.0]]]])  # (B=1, H=1, N_q=1, d=1)
    k = torch.tensor([[[[2.0], [1.0]]]])  # (1, 1, 2, 1)
    v = torch.tensor([[[[10.0], [4.0]]]])
    w = attention_weights(q, k)
    assert w.shape == (1, 1, 1, 2)
    assert torch.allclose(w.flatten(), torch.tensor([0.8808, 0.1192]), atol=1e-4)
    out = attention(q, k, v, fused=fused)
    assert out.item() == pytest.approx(9.2848, abs=1e-3)
    assert out.item() == pytest.approx(
        10 * math.e**4 / (math.e**4 + math.e**2) + 4 * math.e**2 / (math.e**4 + math.e**2)
    )
    # a bias enters the logits additively: +2 on the second key makes the two keys tie
    tie = attention(q, k, v, torch.tensor([[[[0.0, 2.0]]]]), fused=fused)
    assert tie.item() == pytest.approx(7.0, abs=1e-5)


def test_fused_and_manual_attention_agree_with_bias_and_mask() -> None:
    q, k, v = torch.randn(3, 2, 4, 9, 8).unbind(0)
    bias = torch.randn(4, 9, 9)
    bias = bias + torch.full((9, 9), float("-inf")).triu(1)
    fused = attention(q, k, v, bias, fused=True)
    manual = attention(q, k, v, bias, fused=False)
    assert torch.allclose(fused, manual, atol=1e-6)
    ref = naive_softmax(q.double() @ k.double().transpose(-2, -1) / math.sqrt(8) + bias.double()) @ v.double()
    assert torch.allclose(manual.double(), ref, atol=1e-5)
    assert not torch.allclose(attention(q, k, v, None, fused=False).double(), ref, atol=1e-3)


# ----------------------------------------------------------------------------------------------------------
# BSA


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fused", [True, False])
def test_bsa_with_zero_bias_is_softmax_attention_without_positions(
    monkeypatch: pytest.MonkeyPatch, fused: bool, causal: bool
) -> None:
    """Degenerate case from DESIGN §1: b = 0 gives timm's plain attention with the same weights."""
    bsa = bsa_layer("gaussian", (1.0, 4.0))(32, num_heads=4, qkv_bias=True)
    bsa.configure(grid=(4, 4), num_prefix_tokens=1)
    ref = Attention(32, num_heads=4, qkv_bias=True)
    result = ref.load_state_dict(bsa.state_dict(), strict=False)
    assert result.unexpected_keys == ["sigma_theta"] and not result.missing_keys
    sharpen(bsa, 0.3)
    ref.load_state_dict(bsa.state_dict(), strict=False)
    bsa.fused_attn = ref.fused_attn = fused
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        expected = ref(x, is_causal=causal)
        with_positions = bsa(x, is_causal=causal)
        monkeypatch.setattr(
            bsa, "position_bias", lambda n, device, dtype: torch.zeros(bsa.num_heads, n, n, device=device, dtype=dtype)
        )
        without_positions = bsa(x, is_causal=causal)
    assert torch.allclose(without_positions, expected, atol=1e-6)
    assert not torch.allclose(with_positions, expected, atol=1e-3)  # the real bias does change the output


@pytest.mark.parametrize("fused", [True, False])
def test_gaussian_bsa_matches_naive_reference_1d_causal(fused: bool) -> None:
    """The LM's attention: token-index positions, causal mask, per-head widths."""
    attn = create_model("lm-bsa", checkpoint="none").blocks[0].attn
    assert isinstance(attn, BilateralAttention) and attn.grid is None
    sigmas = [0.7, 1.5, 3.0, 6.0]
    set_sigmas(attn, sigmas)
    sharpen(attn, 0.15)
    attn.fused_attn = fused
    x = torch.randn(2, 12, 128)
    with torch.no_grad():
        out = attn(x, is_causal=True)
    ref = naive_mhsa(attn, x, gaussian_bias_1d_causal(12, sigmas))
    assert torch.allclose(out.double(), ref, atol=1e-5)
    # deliberately wrong references must fail: other widths, or no causal mask
    wrong_sigma = naive_mhsa(attn, x, gaussian_bias_1d_causal(12, [2 * s for s in sigmas]))
    assert not torch.allclose(out.double(), wrong_sigma, atol=1e-3)
    no_mask = gaussian_bias_1d_causal(12, sigmas)
    no_mask = torch.where(torch.isinf(no_mask), no_mask.transpose(-2, -1), no_mask)
    assert not torch.allclose(out.double(), naive_mhsa(attn, x, no_mask), atol=1e-3)


@pytest.mark.parametrize("fused", [True, False])
def test_gaussian_bsa_matches_naive_reference_2d_grid_with_cls(fused: bool) -> None:
    """DeiT micro: a 7x7 patch grid plus CLS; the CLS token gets bias 0 to and from every token."""
    attn = create_model("deit-bsa", checkpoint="none").blocks[1].attn
    assert attn.grid == (7, 7) and attn.num_prefix_tokens == 1
    sigmas = [0.8, 1.6, 3.2, 6.4]
    set_sigmas(attn, sigmas)
    sharpen(attn, 0.2)
    attn.fused_attn = fused
    x = torch.randn(2, 50, 64)
    with torch.no_grad():
        out = attn(x)
        probs = attention_probs(attn, x)
    bias = gaussian_bias_grid(7, 7, 1, sigmas)
    assert torch.allclose(out.double(), naive_mhsa(attn, x, bias), atol=1e-5)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 4, 50), atol=1e-5)
    # wrong references: CLS given the first patch's position; patches as a flat 1D sequence
    cls_at_origin = gaussian_bias_grid(7, 7, 0, sigmas)
    cls_at_origin = torch.nn.functional.pad(cls_at_origin, (1, 0, 1, 0))
    cls_at_origin[:, 0, 1:] = cls_at_origin[:, 1, 1:]
    assert not torch.allclose(out.double(), naive_mhsa(attn, x, cls_at_origin), atol=1e-3)
    idx = torch.arange(49, dtype=torch.float64)
    flat = -((idx[:, None] - idx[None, :]) ** 2) / (2 * torch.tensor(sigmas, dtype=torch.float64) ** 2)[:, None, None]
    flat = torch.nn.functional.pad(flat, (1, 0, 1, 0))  # patches as a 1D sequence: the grid is ignored
    assert not torch.allclose(out.double(), naive_mhsa(attn, x, flat), atol=1e-3)


@pytest.mark.parametrize("model_name", ["lm-bsa", "deit-bsa"])
def test_fused_and_manual_bsa_paths_agree(model_name: str) -> None:
    attn = create_model(model_name, checkpoint="none").blocks[0].attn
    sharpen(attn, 0.2)
    x = torch.randn(2, 50, attn.qkv.in_features)
    causal = model_name.startswith("lm")
    with torch.no_grad():
        attn.fused_attn = True
        fused = attn(x, is_causal=causal)
        attn.fused_attn = False
        manual = attn(x, is_causal=causal)
    # the fused CPU kernel accumulates in another order (flash-style online softmax): float32 rounding only
    assert torch.allclose(fused, manual, atol=1e-5)


@pytest.mark.parametrize("model_name", ["lm-bsa", "deit-bsa"])
@pytest.mark.parametrize("fused", [True, False])
def test_untied_bsa_matches_its_naive_formula(model_name: str, fused: bool) -> None:
    """b_ij = (p_i U_Q^h).(p_j U_K^h)/sqrt(d_h) with p the learned absolute positions (CLS has its own)."""
    model = create_model(model_name, pos_kernel="untied", checkpoint="none")
    attn = model.blocks[0].attn
    assert not hasattr(attn, "sigma_theta") and hasattr(attn, "pos_q")
    with torch.no_grad():
        model.pos_embed.normal_(0.0, 1.0)
        attn.pos_q.weight.normal_(0.0, 0.2)
        attn.pos_k.weight.normal_(0.0, 0.2)
    sharpen(attn, 0.15)
    attn.fused_attn = fused
    causal = model_name.startswith("lm")
    n = 12 if causal else 50
    x = torch.randn(2, n, attn.qkv.in_features)
    with torch.no_grad():
        out = attn(x, is_causal=causal)
    bias = untied_bias(attn, model.pos_embed[0, :n])
    if causal:
        bias = bias + torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    ref = naive_mhsa(attn, x, bias)
    assert torch.allclose(out.double(), ref, atol=1e-5)
    assert not torch.allclose(out.double(), naive_mhsa(attn, x, bias * 0.5), atol=1e-3)


def test_initial_sigmas_spread_geometrically_and_are_learnable() -> None:
    assert torch.allclose(initial_sigmas((1.0, 8.0), 4), torch.tensor([1.0, 2.0, 4.0, 8.0]))
    attn = create_model("deit-bsa", bsa_sigma=(1.0, 8.0), checkpoint="none").blocks[0].attn
    assert torch.allclose(attn.sigma, torch.tensor([1.0, 2.0, 4.0, 8.0]), atol=1e-5)
    assert attn.sigma_theta.requires_grad
    with pytest.raises(RobfiltError, match="positive"):
        initial_sigmas((0.0, 4.0), 4)


def test_position_bias_is_cached_per_layout() -> None:
    attn = create_model("deit-bsa", checkpoint="none").blocks[0].attn
    attn.position_bias(50, torch.device("cpu"), torch.float32)
    attn.position_bias(50, torch.device("cpu"), torch.float32)
    assert len(attn._dist_cache) == 1
    attn.position_bias(50, torch.device("cpu"), torch.float64)
    assert len(attn._dist_cache) == 2
    with pytest.raises(RobfiltError, match="grid"):
        attn.position_bias(37, torch.device("cpu"), torch.float32)


# ----------------------------------------------------------------------------------------------------------
# GRC


def _blocks(depth: int = 3, dim: int = 32) -> list[Block]:
    return [Block(dim, num_heads=4, mlp_ratio=2.0, qkv_bias=True) for _ in range(depth)]


def reference_grc(blocks: list[Block], x: torch.Tensor, lam: float, boost_mlp: bool) -> torch.Tensor:
    """Hand-written boosting loop: Y <- Y + F(LN(Y)) + lambda (Y_0 - Y) per boosted sublayer."""
    y0, y = x, x
    for blk in blocks:
        y = y + blk.attn(blk.norm1(y)) + lam * (y0 - y)
        y = y + blk.mlp(blk.norm2(y)) + (lam * (y0 - y) if boost_mlp else 0.0)
    return y


@pytest.mark.parametrize("fused", [True, False])
def test_grc_lambda_zero_is_exactly_the_stock_timm_blocks(fused: bool) -> None:
    blocks = _blocks()
    for blk in blocks:
        blk.attn.fused_attn = fused
    stock = nn.Sequential(*blocks)
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        expected = stock(x)
        assert torch.equal(BlockStack(blocks, grc=True, grc_lambda=0.0)(x), expected)
        assert torch.equal(BlockStack(blocks, grc=False)(x), expected)
        assert not torch.allclose(BlockStack(blocks, grc=True, grc_lambda=0.2)(x), expected, atol=1e-4)


@pytest.mark.parametrize("sublayers", ["all", "attn"])
def test_grc_matches_hand_written_reference_loop(sublayers: str) -> None:
    blocks = _blocks()
    stack = BlockStack(blocks, grc=True, grc_lambda=0.3, grc_sublayers=sublayers)
    assert stack.lambdas().shape == (3, 2 if sublayers == "all" else 1)
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        out = stack(x)
        right = reference_grc(blocks, x, 0.3, boost_mlp=sublayers == "all")
        wrong = reference_grc(blocks, x, 0.3, boost_mlp=sublayers != "all")
    assert torch.allclose(out, right, atol=1e-6)
    assert not torch.allclose(out, wrong, atol=1e-4)


def test_grc_learnable_lambda_starts_at_the_given_value_and_gets_gradients() -> None:
    stack = BlockStack(_blocks(), grc=True, grc_lambda=0.25, grc_learnable=True)
    assert isinstance(stack.grc_logit, nn.Parameter)
    assert torch.allclose(stack.lambdas(), torch.full((3, 2), 0.25))
    stack(torch.randn(2, 10, 32)).square().sum().backward()
    grad = stack.grc_logit.grad
    assert grad is not None and torch.isfinite(grad).all()
    # Y_0 is the input of the first block, so the first attention step has Y - Y_0 = 0 and its lambda is inert;
    # every other lambda must get a gradient.
    assert grad[0, 0] == 0
    assert (grad.flatten()[1:] != 0).all()


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), 1.5, float("inf")])
def test_grc_lambda_outside_unit_interval_is_refused(bad: float) -> None:
    with pytest.raises(RobfiltError, match=r"grc_lambda must be in \[0, 1\)"):
        BlockStack(_blocks(1), grc=True, grc_lambda=bad)
