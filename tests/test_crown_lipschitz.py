"""The certified local Lipschitz bound (l2, pixels -> logits, on B_2(x0, rho) ∩ [0, 1]^d) against what the
project measures from below: the exact Jacobian norm at x0 and at other points of the ball, pair ratios
``||f(x) - f(x')|| / ||x - x'||`` found by the project's ascent and by random sampling in the ball. Also exact
on a linear model, and the zoo DeiT at a small radius."""

from __future__ import annotations

import pytest
import torch
from test_crown_models import DEITS, tiny_deit, tiny_mlp
from torch import nn

from robustbench_filters.crown import local_lipschitz
from robustbench_filters.crown.domain import l2_domain
from robustbench_filters.lipschitz.jacobian import jacobian_norm_exact, jacobian_norm_power
from robustbench_filters.lipschitz.ratio import pair_ratio_ascent
from robustbench_filters.lipschitz.target import make_target

DT = torch.float64


def test_a_linear_model_gets_its_exact_spectral_norm() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4)).double()
    x = torch.rand(3, 5, dtype=DT)
    want = torch.linalg.matrix_norm(net[0].weight.detach(), 2).item()
    for rho in (1e-3, 0.5):
        for r in local_lipschitz(net, x, rho):
            assert r.upper == pytest.approx(want, rel=1e-8) and r.error == 0.0


def _lower_bounds(model: nn.Module, x: torch.Tensor, rho: float) -> torch.Tensor:
    """The largest of: ||J|| at x0 and at sampled ball points, sampled pair ratios, the project's pair ascent."""
    target = make_target(model, dtype=DT)
    best = jacobian_norm_exact(target, x)
    dom = l2_domain(x.reshape(x.shape[0], -1), rho)
    g = torch.Generator().manual_seed(0)
    pts = dom.sample(6, generator=g).reshape(6, *x.shape)
    for p in pts:
        best = torch.maximum(best, jacobian_norm_exact(target, p))
    for a, b in zip(pts[:3], pts[3:], strict=True):
        with torch.no_grad():
            ratio = (target(a) - target(b)).norm(dim=1) / (a - b).flatten(1).norm(dim=1)
        best = torch.maximum(best, ratio.double())
    power = jacobian_norm_power(target, x, iters=20, generator=g)
    ratio = pair_ratio_ascent(target, x, rho, steps=10, direction=power.v, box=target.box, generator=g)
    return torch.maximum(best, ratio)


@pytest.mark.parametrize("rho", [1e-3, 3e-2])
def test_mlp_bound_is_above_every_lower_bound(rho: float) -> None:
    model = tiny_mlp().double()
    x = torch.rand(4, 6, dtype=DT)
    got = torch.tensor([r.upper for r in local_lipschitz(model, x, rho)], dtype=DT)
    assert torch.all(got >= _lower_bounds(model, x, rho))


@pytest.mark.parametrize("variant", list(DEITS))
def test_tiny_deit_bound_is_above_every_lower_bound(variant: str) -> None:
    model = tiny_deit(**DEITS[variant])
    x = torch.rand(2, 1, 8, 8, dtype=DT)
    for rho in (1e-3, 1e-2):
        res = local_lipschitz(model, x, rho)
        got = torch.tensor([r.upper for r in res], dtype=DT)
        low = _lower_bounds(model, x, rho)
        assert torch.all(got >= low), (variant, rho, got, low)
        assert all(r.centre <= r.upper and r.first_order <= r.upper for r in res)


def test_exact_anchors_only_tighten() -> None:
    model = tiny_deit(grc=True)
    x = torch.rand(2, 1, 8, 8, dtype=DT)
    for rho in (1e-3, 3e-2):
        plain = local_lipschitz(model, x, rho, exact_anchors=False)
        exact = local_lipschitz(model, x, rho)
        assert all(e.upper <= p.upper * (1 + 1e-9) for e, p in zip(exact, plain, strict=True))


@pytest.mark.slow  # about 15,000 model passes
def test_zoo_deit_bound_is_tight_at_a_small_radius() -> None:
    """deit (micro zoo), one test image: at rho = 1e-5 the certified constant is above ||J(x0)|| and within a
    factor 1.5 of it (the stage-wise bound of robustbench_filters.lipschitz is 15 decades above at this radius)."""
    from robustbench_filters.data.images import load_images
    from robustbench_filters.models.loading import load_model

    model = load_model("deit").module
    x, _ = load_images("fashion-mnist", split="test").take(torch.arange(1))
    x = x.to(DT)
    res = local_lipschitz(model, x, 1e-5, refresh="inner")[0]
    emp = float(jacobian_norm_exact(make_target(model, dtype=DT), x)[0])
    assert emp <= res.upper <= 1.5 * emp, (emp, res)
