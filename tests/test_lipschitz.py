"""Lipschitz estimator: exact values on known cases (notes/lipschitz.md §5.3), sandwich invariants, CLI."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timm.layers import Attention
from torch import nn

from robustbench_filters.api.evaluate import estimate_lipschitz
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.lipschitz import (
    certified_radius,
    jacobian_norm_exact,
    jacobian_norm_power,
    make_target,
    pair_ratio_ascent,
    sequence_length_study,
    trace_bounds,
)
from robustbench_filters.lipschitz.attention_bound import attention_lipschitz, castin_bound, dp_head_bound
from robustbench_filters.lipschitz.certify import margins
from robustbench_filters.lipschitz.compose import residual_step
from robustbench_filters.lipschitz.constants import (
    GELU_LIPSCHITZ,
    layernorm_lipschitz,
    layernorm_output_radius,
    normalizer_lipschitz,
)
from robustbench_filters.lipschitz.profile import layer_profile
from robustbench_filters.lipschitz.spectral import conv_lipschitz
from robustbench_filters.lipschitz.summary import COLUMNS
from robustbench_filters.models import MODEL_NAMES, create_model
from robustbench_filters.models.bsa import bsa_layer
from robustbench_filters.runs.folder import load_run

TINY_DEIT = dict(img_size=8, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=5)
TINY_LM = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Two shared cores: one thread per process avoids oversubscription (10x slower jvp otherwise)."""
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


def tiny(name: str, **extra) -> nn.Module:
    kw = TINY_DEIT if name.startswith("deit") else TINY_LM
    return create_model(name, **{**kw, **extra}, checkpoint="none")


def tiny_inputs(target, seed: int, n: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if target.family.value == "image":
        return target.inputs(torch.rand(n, 1, 8, 8, generator=gen))
    return target.inputs(torch.randint(0, 11, (n, 6), generator=gen))


_TARGETS: dict[str, object] = {}


def tiny_target(name: str):
    if name not in _TARGETS:
        torch.manual_seed(sum(map(ord, name)))
        _TARGETS[name] = make_target(tiny(name, fused_attn=False), dtype=torch.float64)
    return _TARGETS[name]


def linear_map(m: int = 12, n: int = 20, seed: int = 0) -> tuple[nn.Linear, float]:
    """A random linear map with singular values 3, 2, 1.5, ... (a clear gap: power iteration converges)."""
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    s = torch.tensor([3.0, 2.0] + [1.5 / (k + 1) for k in range(m - 2)], dtype=torch.float64)
    lin = nn.Linear(n, m).double()
    with torch.no_grad():
        lin.weight.copy_(u @ torch.diag(s) @ v[:m])
        lin.bias.normal_(generator=gen)
    return lin, 3.0


# ---------------------------------------------------------------- 1. linear map: every estimator is sigma_max


def test_linear_map_all_estimators_equal_sigma_max():
    lin, sigma = linear_map()
    target = make_target(lin)
    x = torch.randn(4, 20, dtype=torch.float64)
    trace = trace_bounds(target, x, [0.5, 0.1])
    assert trace.global_upper == pytest.approx(sigma, abs=1e-10)
    assert torch.allclose(trace.local_upper, torch.full_like(trace.local_upper, sigma), atol=1e-10)
    assert torch.allclose(jacobian_norm_exact(target, x), torch.full((4,), sigma, dtype=torch.float64), atol=1e-10)
    power = jacobian_norm_power(target, x, iters=200, tol=1e-14, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(power.sigma, torch.full((4,), sigma, dtype=torch.float64), rtol=1e-6)
    assert bool((power.history[1:] >= power.history[:-1] - 1e-12).all()), "power iteration must be nondecreasing"
    ratio = pair_ratio_ascent(target, x, radius=0.5, steps=5, direction=power.v)
    assert bool((ratio <= sigma * (1 + 1e-12)).all()) and bool((ratio >= sigma - 1e-3).all())
    random_start = pair_ratio_ascent(target, x, radius=0.5, steps=10, generator=torch.Generator().manual_seed(1))
    assert bool((random_start <= sigma * (1 + 1e-12)).all())


def test_linear_map_through_the_api():
    lin, sigma = linear_map(seed=3)
    x = torch.randn(3, 20, dtype=torch.float64)
    result = estimate_lipschitz([lin], n_examples=3, method="power", inputs=x, power_iters=200, tol=1e-14)
    assert list(result.examples.columns) == list(COLUMNS)
    assert np.allclose(result.examples["lower"], sigma, rtol=1e-6)
    assert np.allclose(result.examples["global_upper"], sigma, atol=1e-10)
    entry = result.summary.models["Linear"]
    assert entry.sandwich_ok and entry.ratio_upper_lower == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------- 2. dense cross-check on tiny float64 models


@pytest.mark.parametrize("name", ["deit-bsa-grc", "lm-grc", "deit", "lm-bsa"])
def test_jacobian_estimates_match_dense_jacobian(name):
    target = tiny_target(name)
    x = tiny_inputs(target, seed=5)
    dense = [opnorm(jacobian_dense(target, x[i : i + 1])) for i in range(len(x))]
    exact = jacobian_norm_exact(target, x)
    power = jacobian_norm_power(target, x, iters=300, tol=1e-13, generator=torch.Generator().manual_seed(0))
    for i, d in enumerate(dense):
        assert exact[i].item() == pytest.approx(d, rel=1e-10)
        assert power.sigma[i].item() == pytest.approx(d, rel=1e-6)


def test_samples_do_not_interact():
    """The block-diagonal trick needs batch independence: perturbing sample 1 leaves output 0 unchanged."""
    target = tiny_target("lm-bsa-grc")
    x = tiny_inputs(target, seed=1, n=3)
    y = x.clone()
    y[1] += 0.5
    with torch.no_grad():
        a, b = target(x), target(y)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2]) and not torch.equal(a[1], b[1])


# ---------------------------------------------------------------- 3. sandwich, all 8 variants, property-based


@pytest.mark.parametrize("name", MODEL_NAMES)
@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**16), log_rho=st.integers(-6, 0))
def test_lower_le_local_le_global(name, seed, log_rho):
    target = tiny_target(name)
    x = tiny_inputs(target, seed)
    rho = 10.0**log_rho
    trace = trace_bounds(target, x, [rho])
    local, glob = trace.local_upper[:, 0], trace.global_upper
    gen = torch.Generator().manual_seed(seed)
    exact = jacobian_norm_exact(target, x)
    power = jacobian_norm_power(target, x, iters=10, generator=gen)
    ratio = pair_ratio_ascent(target, x, rho, steps=3, direction=power.v, box=target.box)
    for lower in (exact, power.sigma, ratio):
        assert bool((lower <= local * (1 + 1e-9)).all())
    assert bool((power.sigma <= exact * (1 + 1e-9)).all())
    assert bool((local <= glob * (1 + 1e-12)).all()) and math.isfinite(glob)
    prof = layer_profile(trace, iters=5, generator=gen)
    assert len(prof) == 2 * len(trace.blocks)
    assert (prof["lower"] <= prof["local_upper"] * (1 + 1e-9)).all()
    assert (prof["local_upper"] <= prof["global_upper"] * (1 + 1e-12)).all()


def test_local_bound_holds_on_the_ball_and_beats_global():
    """Generic Linear-LN-GELU-Linear: the Jacobian anywhere in B(x0, rho) stays below the local bound."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        net[1].weight.uniform_(0.5, 2.0)
    target = make_target(net)
    x0 = 3 * torch.randn(1, 6, dtype=torch.float64)
    rho = 0.3
    trace = trace_bounds(target, x0, [rho])
    local = trace.local_upper[0, 0].item()
    assert local < trace.global_upper / 10
    pts = torch.randn(300, 6, dtype=torch.float64)
    pts = x0 + rho * pts / pts.norm(dim=1, keepdim=True) * torch.rand(300, 1, dtype=torch.float64)
    assert jacobian_norm_exact(target, pts).max().item() <= local
    assert pair_ratio_ascent(target, x0, rho, steps=20).item() <= local


def test_grc_with_lambda_zero_equals_residual_bound():
    torch.manual_seed(0)
    plain = tiny("deit", fused_attn=False)
    boosted = tiny("deit-grc", fused_attn=False, grc_lambda=0.0)
    boosted.load_state_dict(plain.state_dict(), strict=False)
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    a = trace_bounds(make_target(plain, dtype=torch.float64), x, [0.01])
    b = trace_bounds(make_target(boosted, dtype=torch.float64), x, [0.01])
    assert b.global_upper == pytest.approx(a.global_upper, rel=1e-12)
    assert torch.allclose(a.local_upper, b.local_upper, rtol=1e-12)


# ---------------------------------------------------------------- 4. closed forms


def test_gelu_constant():
    assert pytest.approx(0.5 * (1 + math.erf(1)) + math.exp(-1) / math.sqrt(math.pi), abs=1e-15) == GELU_LIPSCHITZ
    assert pytest.approx(1.128904145, abs=1e-9) == GELU_LIPSCHITZ
    x = torch.linspace(-8, 8, 400_001, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(nn.functional.gelu(x).sum(), x)
    assert grad.abs().max().item() <= GELU_LIPSCHITZ + 1e-12
    assert grad.abs().max().item() >= GELU_LIPSCHITZ - 1e-9


def test_softmax_jacobian_at_most_half():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        z = 3 * torch.randn(n, generator=gen, dtype=torch.float64)
        assert opnorm(torch.func.jacrev(lambda t: t.softmax(-1))(z)) <= 0.5 + 1e-12
    assert opnorm(torch.func.jacrev(lambda t: t.softmax(-1))(torch.zeros(2, dtype=torch.float64))) == pytest.approx(
        0.5, abs=1e-15
    )


def test_layernorm_constant_at_zero_variance():
    norm = nn.LayerNorm(8, eps=1e-6).double()
    jac = torch.func.jacrev(norm)(torch.full((8,), 0.7, dtype=torch.float64))
    assert opnorm(jac) == pytest.approx(1 / math.sqrt(1e-6), rel=1e-9)
    assert layernorm_lipschitz(norm) == pytest.approx(1 / math.sqrt(1e-6), rel=1e-15)
    with torch.no_grad():
        norm.weight.uniform_(-2, 2)
        norm.bias.normal_()
    gen = torch.Generator().manual_seed(0)
    radius = layernorm_output_radius(norm)
    for _ in range(50):
        x = torch.randn(8, generator=gen, dtype=torch.float64) * 10 ** torch.randint(-3, 3, (1,), generator=gen)
        sigma = x.var(unbiased=False).sqrt()
        assert opnorm(torch.func.jacrev(norm)(x)) <= layernorm_lipschitz(norm, sigma) * (1 + 1e-12)
        assert norm(x).norm().item() <= radius


def test_normalizer_and_conv_constants():
    assert normalizer_lipschitz(torch.tensor([0.5, 0.25, 2.0])) == pytest.approx(4.0)
    torch.manual_seed(0)
    patch = nn.Conv2d(2, 5, 4, stride=4).double()
    dense = torch.func.jacrev(lambda t: patch(t).flatten())(torch.zeros(1, 2, 8, 8, dtype=torch.float64))
    assert conv_lipschitz(patch) == pytest.approx(opnorm(dense.reshape(dense.shape[0], -1)), rel=1e-10)
    overlap = nn.Conv2d(1, 2, 3, stride=1, padding=1).double()
    dense = torch.func.jacrev(lambda t: overlap(t).flatten())(torch.zeros(1, 1, 6, 6, dtype=torch.float64))
    assert conv_lipschitz(overlap) >= opnorm(dense.reshape(dense.shape[0], -1))


def test_boosting_recursion_exact_for_scalar_maps():
    e, lams, cs = 1.7, [0.1, 0.3, 0.0, 0.25, 0.1, 0.05], [0.4, 1.2, 0.3, 0.9, 0.2, 0.6]
    y0 = e * 1.0  # u = 1; every map is a positive multiple of the identity, so derivatives are values
    x, bound = y0, e
    for lam, c in zip(lams, cs, strict=True):
        x = (1 - lam) * x + c * x + lam * y0
        bound = residual_step(bound, c, lam, e)
    assert bound == pytest.approx(x, rel=1e-15)
    x, bound = y0, e
    for _ in range(7):
        x = (1 - 0.2) * x + 0.5 * x + 0.2 * y0
        bound = residual_step(bound, 0.5, 0.2, e)
    a = 1.3**7  # the closed form L_E (alpha^L + lambda (alpha^L - 1) / (alpha - 1)), alpha = 1 - lambda + L_F
    assert e * (a + 0.2 * (a - 1.0) / (1.3 - 1.0)) == pytest.approx(x, rel=1e-14)
    assert bound == pytest.approx(x, rel=1e-14)
    assert residual_step(1.0, 0.5) == 1.5  # lambda = 0: the plain rule 1 + L_F


@pytest.mark.parametrize("kind", ["softmax", "softmax-causal", "bsa-causal"])
def test_attention_bound_holds_on_the_ball(kind):
    torch.manual_seed(0)
    if kind.startswith("bsa"):
        attn = bsa_layer("gaussian", (0.5, 2.0))(6, num_heads=2, qkv_bias=True).double().eval()
        attn.configure(grid=None, num_prefix_tokens=0)
    else:
        attn = Attention(6, num_heads=2, qkv_bias=True).double().eval()
    attn.fused_attn = False
    with torch.no_grad():
        attn.qkv.weight.mul_(3)
    causal = kind.endswith("causal")
    n, radius = 5, 2.5
    bound = attention_lipschitz(attn, n, radius).value
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(40):
        z = torch.randn(1, n, 6, generator=gen, dtype=torch.float64)
        z = radius * z / z.norm(dim=-1, keepdim=True) * torch.rand(1, n, 1, generator=gen, dtype=torch.float64)
        worst = max(worst, opnorm(jacobian_dense(lambda t: attn(t, is_causal=causal).reshape(1, -1), z)))
    assert 0 < worst <= bound


def test_dot_product_attention_is_not_globally_lipschitz():
    torch.manual_seed(0)
    attn = Attention(6, num_heads=2).double().eval()
    attn.fused_attn = False
    z = torch.randn(1, 5, 6, dtype=torch.float64)
    z[0, 0] = 0
    gains = [opnorm(jacobian_dense(lambda t: attn(t).reshape(1, -1), s * z)) for s in (1, 10, 100)]
    assert gains[1] > 5 * gains[0] and gains[2] > 5 * gains[1]


def test_castin_bound_dominates_the_lemma():
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):
        n = int(torch.randint(1, 300, (1,), generator=gen))
        a, r, v = (float(t) for t in 5 * torch.rand(3, generator=gen, dtype=torch.float64))
        assert dp_head_bound(n, r, a, 0.0, v) <= castin_bound(n, r, a, v) * (1 + 1e-12)


def test_certified_radius_below_distance_to_boundary():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4).double()
    target = make_target(lin)
    x = torch.randn(20, 6, dtype=torch.float64)
    rhos = torch.tensor([10.0, 1.0, 0.1], dtype=torch.float64)
    trace = trace_bounds(target, x, rhos)
    pred, margin = margins(trace.output)
    radius = certified_radius(margin, trace.local_upper, rhos)
    w = lin.weight.detach()
    for i in range(len(x)):
        y = int(pred[i])
        dist = min(
            (trace.output[i, y] - trace.output[i, j]).item() / (w[y] - w[j]).norm().item() for j in range(4) if j != y
        )
        assert 0 < radius[i].item() <= dist + 1e-12


# ---------------------------------------------------------------- fused attention, uncovered layers


def test_fused_attention_switches_on_a_copy(caplog):
    torch.manual_seed(0)
    fused = tiny("deit-bsa")
    assert fused.blocks[0].attn.fused_attn
    with caplog.at_level(logging.INFO, logger="robustbench_filters"):
        target = make_target(fused, dtype=torch.float64)
    assert "fused attention" in caplog.text
    assert fused.blocks[0].attn.fused_attn and not target.model.blocks[0].attn.fused_attn
    manual = make_target(tiny("deit-bsa", fused_attn=False), dtype=torch.float64)
    manual.model.load_state_dict(target.model.state_dict())
    x = tiny_inputs(target, seed=0)
    a = jacobian_norm_power(target, x, iters=20, generator=torch.Generator().manual_seed(0)).sigma
    b = jacobian_norm_power(manual, x, iters=20, generator=torch.Generator().manual_seed(0)).sigma
    assert torch.allclose(a, b, rtol=1e-10)
    with pytest.raises(RobfiltError, match="fused attention"):
        make_target(fused, on_fused="refuse")


def test_uncovered_layer_type_is_named():
    model = tiny("deit", fused_attn=False)
    model.blocks[1].mlp.act = nn.Hardswish()
    target = make_target(model, dtype=torch.float64)
    with pytest.raises(RobfiltError, match="Hardswish.*blocks.1.mlp.act"):
        trace_bounds(target, tiny_inputs(target, 0), [0.1])
    # lower bounds alone still work
    assert (
        estimate_lipschitz([model], n_examples=1, bounds=False, inputs=torch.rand(1, 1, 8, 8)).examples["lower"][0] > 0
    )


def test_hooks_and_patched_forwards_are_refused():
    """What the bound cannot see would make it silently wrong: forward hooks and patched forwards are refused."""
    model = tiny("deit", fused_attn=False)
    handle = model.blocks[0].mlp.register_forward_hook(lambda mod, args, out: 3 * out)
    target = make_target(model, dtype=torch.float64)
    with pytest.raises(RobfiltError, match="forward hook"):
        trace_bounds(target, tiny_inputs(target, 0), [0.1])
    handle.remove()
    target = make_target(model, dtype=torch.float64)
    head = target.model.forward_head
    target.model.forward_head = lambda t, pre_logits=False: 2 * head(t, pre_logits)
    with pytest.raises(RobfiltError, match="does not reproduce"):
        trace_bounds(target, tiny_inputs(target, 0), [0.1])
    # (removed duplicate)
    assert (
        estimate_lipschitz([model], n_examples=1, bounds=False, inputs=torch.rand(1, 1, 8, 8)).examples["lower"][0] > 0
    )


# ---------------------------------------------------------------- sequence-length study


def test_sequence_length_study_frame():
    frame = sequence_length_study((8, 32), dim=16, heads=2, trials=2)
    assert list(frame.columns) == ["n", "kind", "mean_perturbation", "std_perturbation", "noise", "trials", "upper"]
    assert set(frame["kind"]) == {"softmax+pos", "bsa-gaussian", "softmax"} and len(frame) == 6
    assert (frame["mean_perturbation"] > 0).all() and frame["upper"].is_monotonic_increasing


# ---------------------------------------------------------------- CLI


def test_cli_rejects_bad_input_before_creating_the_folder(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert run(["lipschitz", "--model", "deit", "--n-examples", "0", "--out", str(out)]) == 2
    assert run(["lipschitz", "--model", "deit", "--method", "powr", "--out", str(out)]) == 2
    assert "did you mean 'power'" in capsys.readouterr().err.lower()
    assert run(["lipschitz", "--model", "deit,deit", "--out", str(out)]) == 2

    def with_hardswish(name, size="micro", checkpoint=None, **overrides):
        model = create_model(name, size, **overrides, checkpoint="none")
        model.blocks[0].mlp.act = nn.Hardswish()
        return model

    monkeypatch.setattr("robustbench_filters.lipschitz.run.create_model", with_hardswish)
    args = ["lipschitz", "--model", "deit", "--checkpoint", "none", "--data", "synthetic", "-n", "1"]
    assert run([*args, "--out", str(out)]) == 2
    assert "Hardswish" in capsys.readouterr().err
    assert not out.exists()


def test_cli_end_to_end_writes_a_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "lipschitz", "--model", "deit,lm-bsa-grc", "--checkpoint", "none", "--data", "synthetic",
        "-n", "2", "--seq-len", "8", "--method", "power", "--power-iters", "5", "--per-layer", "--quiet", "--out", str(out),
    ]  # fmt: skip
    assert run(args) == 0
    assert "certified upper" in capsys.readouterr().out
    saved = load_run(out)
    assert saved.kind == "lipschitz" and list(saved.rows.columns) == list(COLUMNS)
    examples = saved.rows[saved.rows["layer"] == "model"]
    assert len(examples) == 4 and set(saved.rows["layer"]) >= {"model", "blocks.0", "blocks.2"}
    assert (examples["lower"] <= examples["local_upper"]).all()
    for entry in saved.summary.models.values():
        assert entry.sandwich_ok and entry.ratio_upper_lower > 1 and entry.factors
    assert run([*args, "--resume", "--json"]) == 0
    assert load_run(out).rows.equals(saved.rows)
