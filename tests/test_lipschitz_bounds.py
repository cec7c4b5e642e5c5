"""Soundness of the refined certified bounds: every bound >= what the model really does, on random float64 models.

Property-based (hypothesis) over random tiny DeiT/LM configurations and weights: the certified local bound on
B(x0, rho) (each candidate: stage-wise first order, second-order Taylor, with and without dense centre norms) is
>= the largest exact Jacobian norm found at random points of the ball, the global bound >= the local one, and the
intermediate certificates hold too (per-token radii of the reachable set, LayerNorm variance lower bounds). Plus
the closed-form pieces (LayerNorm curvature, box minimum variance, local attention) against brute force.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timm.layers import Attention
from torch import nn

from robustbench_filters.lipschitz import jacobian_norm_exact, make_target, trace_bounds
from robustbench_filters.lipschitz.attention_local import local_attention
from robustbench_filters.lipschitz.chain import build_chain
from robustbench_filters.lipschitz.layernorm_bound import (
    box_min_variance,
    layernorm_curvature,
    layernorm_jacobians,
    std_lower,
    token_std,
)
from robustbench_filters.lipschitz.local_bound import first_norm_floor
from robustbench_filters.lipschitz.research import LocalOptions, local_bounds
from robustbench_filters.models import create_model
from robustbench_filters.models.bsa import bsa_layer

SLACK = 1 + 1e-9  # float rounding where a bound is tight
PROPERTY = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def opnorm(m: torch.Tensor) -> float:
    return torch.linalg.matrix_norm(m.double(), 2).item()


def jacobian_dense(fn, x: torch.Tensor) -> torch.Tensor:
    """The dense Jacobian (m, n) of a single example (batch of one), via ``torch.func.jacrev``."""
    jac = torch.func.jacrev(fn)(x)
    return jac.reshape(jac.shape[1], -1)


def random_model(name: str, dim: int, heads: int, depth: int, scale: float, seed: int):
    """A tiny float64 model with random weights scaled by ``scale`` (trained models are far from init)."""
    torch.manual_seed(seed)
    if name.startswith("deit"):
        model = create_model(name, img_size=8, patch_size=4, embed_dim=dim, depth=depth, num_heads=heads,
                             num_classes=5, fused_attn=False, checkpoint="none")  # fmt: skip
    else:
        model = create_model(name, vocab_size=11, block_size=8, n_layer=depth, n_head=heads, n_embd=dim,
                             fused_attn=False, checkpoint="none")  # fmt: skip
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.mul_(scale)
            elif p.ndim == 1 and p.numel() > 1:
                p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    target = make_target(model, dtype=torch.float64)
    if name.startswith("deit"):
        x = torch.rand(1, 1, 8, 8, generator=gen, dtype=torch.float64)
    else:
        x = target.inputs(torch.randint(0, 11, (1, 6), generator=gen))
    return target, x


def ball_points(x: torch.Tensor, rho: float, n: int, box, seed: int) -> torch.Tensor:
    """n points of B(x, rho) (half of them on the sphere), projected onto the box (which contains x)."""
    gen = torch.Generator().manual_seed(seed)
    d = torch.randn(n, *x.shape[1:], generator=gen, dtype=x.dtype)
    d = d / d.flatten(1).norm(dim=1).reshape(-1, *[1] * (x.ndim - 1))
    radius = torch.rand(n, generator=gen, dtype=x.dtype)
    radius[: n // 2] = 1.0
    pts = x + rho * d * radius.reshape(-1, *[1] * (x.ndim - 1))
    return pts.clamp(*box) if box is not None else pts


NAMES = ["deit", "deit-grc", "deit-bsa", "deit-bsa-grc", "lm", "lm-grc", "lm-bsa"]


@PROPERTY
@given(
    name=st.sampled_from(NAMES),
    dim_heads=st.sampled_from([(8, 1), (8, 2), (12, 2)]),
    depth=st.integers(1, 2),
    scale=st.floats(0.5, 3.0),
    log_rho=st.floats(-4.0, -0.5),
    seed=st.integers(0, 2**16),
)
def test_local_bounds_dominate_jacobians_in_the_ball(name, dim_heads, depth, scale, log_rho, seed):
    check_local_dominates(name, dim_heads, depth, scale, log_rho, seed)


def check_local_dominates(name, dim_heads, depth, scale, log_rho, seed):
    target, x = random_model(name, dim_heads[0], dim_heads[1], depth, scale, seed)
    rho = 10.0**log_rho
    lb = local_bounds(target, x, [rho], options=LocalOptions(taylor=True))
    trace = trace_bounds(target, x, [rho])
    pts = ball_points(x, rho, 24, target.box, seed)
    worst = jacobian_norm_exact(target, torch.cat([x, pts])).max().item()
    for bound in (lb.first_order, lb.taylor, lb.local, trace.local_upper):
        assert worst <= bound[0, 0].item() * SLACK
    assert trace.local_upper[0, 0].item() <= trace.global_upper * SLACK
    assert lb.centre[0].item() == pytest.approx(jacobian_norm_exact(target, x)[0].item(), rel=1e-9)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["deit-grc", "lm-bsa-grc"]), seed=st.integers(0, 2**16))
def test_dense_centre_norms_stay_sound(name, seed):
    target, x = random_model(name, 8, 2, 1, 2.0, seed)
    rhos = [1e-3, 3e-2]
    lb = local_bounds(target, x, rhos, options=LocalOptions(taylor=True, dense=True))
    for k, rho in enumerate(rhos):
        worst = jacobian_norm_exact(target, ball_points(x, rho, 16, target.box, seed)).max().item()
        assert worst <= lb.local[0, k].item() * SLACK


@PROPERTY
@given(name=st.sampled_from(NAMES), log_rho=st.floats(-3.0, -0.3), seed=st.integers(0, 2**16))
def test_reachable_radii_and_variance_lower_bounds_hold(name, log_rho, seed):
    """Each stage input stays within its per-token and total radii, and every LayerNorm input's token std stays
    above the certified lower bound, at random points of the ball."""
    target, x = random_model(name, 8, 2, 2, 2.0, seed)
    rho = 10.0**log_rho
    lb = local_bounds(target, x, [rho], options=LocalOptions(taylor=False))
    chain = build_chain(target, x)
    pts = ball_points(x, rho, 32, target.box, seed)
    with torch.no_grad():
        hs, _, _ = chain.states(pts)
    for k, rec in enumerate(lb.stages):
        moved = (hs[k] - lb.hidden[k]).double()
        assert bool((moved.norm(dim=-1) <= rec.token_r[0, 0][None, :] * SLACK + 1e-12).all()), rec.name
        assert bool((moved.flatten(1).norm(dim=1) <= rec.total_r[0, 0] * SLACK + 1e-12).all()), rec.name
        assert bool((token_std(hs[k]) >= rec.local.std_lo[0, 0][None, :] - 1e-12).all()), rec.name


def test_taylor_bound_tends_to_the_exact_local_constant():
    target, x = random_model("deit-bsa-grc", 8, 2, 2, 2.0, 3)
    lb = local_bounds(target, x, [1e-12, 1e-6], options=LocalOptions(taylor=True))
    exact = jacobian_norm_exact(target, x)[0].item()
    assert lb.taylor[0, 0].item() == pytest.approx(exact, rel=1e-6)
    assert exact <= lb.taylor[0, 1].item() <= lb.first_order[0, 1].item() * 10


def test_refined_local_never_exceeds_the_baseline_or_global():
    target, x = random_model("deit", 8, 2, 2, 2.0, 5)
    rhos = [1e-3, 1e-1]
    better = trace_bounds(target, x, rhos)
    baseline = trace_bounds(target, x, rhos, improved=False)
    assert bool((better.local_upper <= baseline.local_upper * SLACK).all())
    assert better.global_upper <= baseline.global_upper * SLACK
    assert bool((better.local_upper <= better.global_upper * SLACK).all())


# ---------------------------------------------------------------- LayerNorm pieces


def test_layernorm_curvature_bounds_jacobian_differences():
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        d = int(torch.randint(2, 9, (1,), generator=gen))
        norm = nn.LayerNorm(d, eps=1e-3).double()
        with torch.no_grad():
            norm.weight.uniform_(-2, 2, generator=gen)
        c = 2 * torch.rand(1, generator=gen).item() * torch.randn(d, generator=gen, dtype=torch.float64)
        r = torch.rand(1, generator=gen).item()
        lo = std_lower(token_std(c[None, None])[:, 0][None], torch.full((1, 1, 1), r, dtype=torch.float64), d)
        kappa = layernorm_curvature(norm, lo).item()
        u, v = (c + r * torch.rand(1, generator=gen).item() * torch.nn.functional.normalize(
            torch.randn(d, generator=gen, dtype=torch.float64), dim=0) for _ in range(2))  # fmt: skip
        ju, jv = layernorm_jacobians(norm, u), layernorm_jacobians(norm, v)
        assert torch.allclose(ju, torch.func.jacrev(norm)(u), atol=1e-10)
        assert opnorm(ju - jv) <= kappa * (u - v).norm().item() * SLACK + 1e-12
        assert token_std(u[None])[0].item() >= lo.item() - 1e-12


def test_box_min_variance_matches_brute_force():
    gen = torch.Generator().manual_seed(1)
    m = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    c = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    bound = box_min_variance(m, c)
    grid = torch.linspace(0, 1, 21, dtype=torch.float64)
    pts = torch.cartesian_prod(grid, grid, grid, grid)
    vertices = torch.tensor(list(itertools.product([0.0, 1.0], repeat=4)), dtype=torch.float64)
    rand = torch.rand(20000, 4, generator=gen, dtype=torch.float64)
    for t in range(3):
        brute = min(((p @ m.T + c[t]).var(dim=-1, unbiased=False)).min().item() for p in (pts, vertices, rand))
        assert bound[t].item() <= brute + 1e-12  # certified lower bound
        assert bound[t].item() >= brute - 2e-3  # and tight: the grid has spacing 0.05


def test_first_layernorm_floor_on_a_tiny_patch_embedding():
    """4x4 images, 2x2 patches: each token's std over [0, 1]^4 is never below the floor, and the floor is tight."""
    torch.manual_seed(0)
    model = create_model("deit", img_size=4, patch_size=2, embed_dim=6, depth=1, num_heads=1, num_classes=3,
                         fused_attn=False, checkpoint="none")  # fmt: skip
    target = make_target(model, dtype=torch.float64)
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64)
    chain = build_chain(target, x)
    floor = first_norm_floor(chain, x, target.box)
    grid = torch.linspace(0, 1, 9, dtype=torch.float64)
    patches = torch.cartesian_prod(grid, grid, grid, grid)  # every 2x2 patch value on a grid
    images = patches.reshape(-1, 1, 2, 2).repeat(1, 1, 2, 2)  # the same patch in all 4 positions
    with torch.no_grad():
        stds = token_std(chain.embedding.fn(images))  # (P, 5)
    assert bool((stds >= floor[None, :] - 1e-12).all())
    assert bool((stds.min(0).values - floor <= 0.05).all())
    trace = trace_bounds(target, x, [0.1])
    first = next(f for f in trace.factors if f["layer"] == "blocks.0.norm1")
    gamma = model.blocks[0].norm1.weight.abs().max().item()
    assert first["value"] == pytest.approx(gamma / math.sqrt(floor.min().item() ** 2 + 1e-6), rel=1e-9)


# ---------------------------------------------------------------- attention on the ball


@pytest.mark.parametrize("kind", ["softmax", "softmax-causal", "bsa", "bsa-causal"])
def test_local_attention_bounds_hold_on_the_token_ball(kind):
    gen = torch.Generator().manual_seed(2)
    torch.manual_seed(2)
    if kind.startswith("bsa"):
        attn = bsa_layer("gaussian", (0.5, 2.0))(6, num_heads=2, qkv_bias=True).double().eval()
        attn.configure(grid=None, num_prefix_tokens=0)
    else:
        attn = Attention(6, num_heads=2, qkv_bias=True).double().eval()
    attn.fused_attn = False
    with torch.no_grad():
        attn.qkv.weight.mul_(2.5)
    causal = kind.endswith("causal")
    n = 4
    z0 = 2 * torch.randn(1, n, 6, generator=gen, dtype=torch.float64)
    rho = 0.3 * torch.rand(1, 1, n, generator=gen, dtype=torch.float64)
    res = local_attention(attn, z0, rho, causal)

    def f(z: torch.Tensor) -> torch.Tensor:
        return attn(z, is_causal=causal).reshape(1, -1)

    pts = []
    for _ in range(16):
        e = torch.randn(1, n, 6, generator=gen, dtype=torch.float64)
        e = e / e.norm(dim=-1, keepdim=True) * rho[0, 0][None, :, None] * torch.rand(1, n, 1, generator=gen)
        pts.append(z0 + e)
    jacs = [jacobian_dense(f, p) for p in pts]
    with torch.no_grad():
        base = attn(z0, is_causal=causal)
    for p, j in zip(pts, jacs, strict=True):
        assert opnorm(j) <= res.lip_plain.item() * SLACK
        with torch.no_grad():
            moved = (attn(p, is_causal=causal) - base).norm(dim=-1)[0]
        assert bool((moved <= res.token_out[0, 0] * SLACK + 1e-12).all())
    for a, b in itertools.combinations(range(len(pts)), 2):
        assert opnorm(jacs[a] - jacs[b]) <= res.curvature.item() * (pts[a] - pts[b]).norm().item() * SLACK


def test_local_attention_is_exact_for_uniform_attention():
    """With W_Q = 0 and no query bias the attention is the plain average P = 11^T/n (||P|| = 1): the Jacobian is
    the constant P (x) W_V, so the bound must equal ||W_V|| ||W_O|| (one head), the curvature 0, and each output
    token moves by exactly ||W_O W_V|| times the mean input radius when the moves align."""
    torch.manual_seed(0)
    attn = Attention(5, num_heads=1, qkv_bias=False).double().eval()
    attn.fused_attn = False
    with torch.no_grad():
        attn.qkv.weight[:5].zero_()
    z0 = torch.randn(1, 4, 5, dtype=torch.float64)
    rho = torch.tensor([[[0.1, 0.2, 0.3, 0.4]]], dtype=torch.float64)
    res = local_attention(attn, z0, rho)
    w_v, w_o = attn.qkv.weight[10:].detach(), attn.proj.weight.detach()
    exact = opnorm(jacobian_dense(lambda z: attn(z).reshape(1, -1), z0))
    assert exact == pytest.approx(opnorm(w_o @ w_v), rel=1e-9)
    assert res.lip_plain.item() == pytest.approx(min(opnorm(w_o) * opnorm(w_v), opnorm(w_o @ w_v)), rel=1e-9)
    assert res.curvature.item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(res.token_out[0, 0], torch.full((4,), opnorm(w_o @ w_v) * 0.25, dtype=torch.float64))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    dim_heads=st.sampled_from([(8, 2), (16, 2), (16, 4)]),
    depth=st.integers(1, 3),
    scale=st.floats(0.5, 4.0),
    log_rho=st.floats(-5.0, 0.0),
    seed=st.integers(0, 2**16),
)
def test_local_bounds_dominate_jacobians_in_the_ball_many(name, dim_heads, depth, scale, log_rho, seed):
    check_local_dominates(name, dim_heads, depth, scale, log_rho, seed)
