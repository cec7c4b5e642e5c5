"""Lipschitz estimation for any image classifier (issue 16 item 7), the gap rows and their figure.

Lower bounds (exact / power / ratio) work for every image model; certified bounds for timm ViTs and plain
Sequential CNNs; any other wiring (a timm ResNet) gets the one-line error naming what is not covered, before any
work is done.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import timm
import torch
from matplotlib.figure import Figure
from torch import nn

from robustbench_filters.api.evaluate import estimate_lipschitz
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.family import Family
from robustbench_filters.lipschitz import certify as certify_module
from robustbench_filters.lipschitz import (
    jacobian_norm_exact,
    jacobian_norm_power,
    make_target,
    pair_ratio_ascent,
    trace_bounds,
)
from robustbench_filters.lipschitz.research import GAP_COLUMNS, LocalOptions, gap_rows, gap_summary, local_bounds
from robustbench_filters.lipschitz.target import input_family
from robustbench_filters.models import create_model
from robustbench_filters.report.lipschitz_gap import lipschitz_gap_figure

SLACK = 1 + 1e-9


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def resnet18() -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).eval()


def tiny_vit(**kw) -> nn.Module:
    torch.manual_seed(0)
    args = dict(pretrained=False, num_classes=10, in_chans=1, img_size=16, patch_size=8, depth=2, embed_dim=16,
                num_heads=2)  # fmt: skip
    return timm.create_model("vit_tiny_patch16_224", **{**args, **kw}).eval()


def small_cnn() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(3, stride=2),
        nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.GELU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(3),
        nn.Flatten(), nn.Linear(6 * 9, 10),
    )  # fmt: skip
    with torch.no_grad():
        net[1].running_mean.normal_()
        net[1].running_var.uniform_(0.2, 2.0)
        net[1].weight.uniform_(-2, 2)
    return net.eval()


def images(n: int = 2, side: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, side, side, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- family


def test_family_replaces_kind():
    lm = create_model("lm", vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8, checkpoint="none")
    assert input_family(resnet18()) is Family.IMAGE
    assert input_family(tiny_vit()) is Family.IMAGE
    assert input_family(small_cnn()) is Family.IMAGE
    assert input_family(lm) is Family.LM
    assert input_family(nn.Linear(3, 2)) is None
    target = make_target(resnet18())
    assert target.family is Family.IMAGE and target.box == (0.0, 1.0)
    assert make_target(nn.Linear(4, 2), family="image").family is Family.IMAGE
    with pytest.raises(RobfiltError, match="forward_embeddings"):
        make_target(nn.Linear(4, 2), family="lm")
    with pytest.raises(RobfiltError, match="unknown family 'video'"):
        make_target(nn.Linear(4, 2), family="video")


# ---------------------------------------------------------------- lower bounds for any image model


@pytest.mark.parametrize("build", [resnet18, tiny_vit, small_cnn])
def test_lower_bounds_for_any_image_model(build):
    target = make_target(build(), dtype=torch.float64)
    x = images(side=32 if build is resnet18 else 16)
    exact = jacobian_norm_exact(target, x)
    power = jacobian_norm_power(target, x, iters=300, tol=1e-12, generator=torch.Generator().manual_seed(0))
    ratio = pair_ratio_ascent(target, x, 0.05, steps=5, direction=power.v, box=target.box)
    assert bool((exact > 0).all()) and torch.allclose(power.sigma, exact, rtol=1e-5)
    assert bool((ratio > 0).all()) and bool(torch.isfinite(ratio).all())


def test_resnet_lower_bounds_through_the_api():
    result = estimate_lipschitz([resnet18()], n_examples=2, bounds=False, inputs=images(side=32).float())
    assert (result.examples["lower"] > 0).all()


# ---------------------------------------------------------------- certified bounds: covered or one clear line


def test_resnet_certified_bounds_refused_before_any_work(monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the coverage check must come before any bound is computed")

    monkeypatch.setattr(certify_module, "_Propagator", no_work)
    target = make_target(resnet18(), dtype=torch.float64)
    with pytest.raises(RobfiltError) as err:
        trace_bounds(target, images(side=32), [0.1])
    message = str(err.value)
    assert "'ResNet'" in message and "\n" not in message and "lower bounds" in message


def test_uncovered_leaf_in_a_sequential_is_named():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Hardswish(), nn.Flatten(), nn.Linear(2 * 14 * 14, 3)).eval()
    target = make_target(net, dtype=torch.float64)
    with pytest.raises(RobfiltError, match="'Hardswish' at 1"):
        trace_bounds(target, images(), [0.1])


def test_sequential_cnn_certified_bound_holds():
    target = make_target(small_cnn(), dtype=torch.float64)
    x = images(n=1)
    trace = trace_bounds(target, x, [0.1])
    pts = x + 0.1 * torch.randn(64, 1, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    worst = jacobian_norm_exact(target, pts.clamp(0, 1)).max().item()
    assert 0 < worst <= trace.local_upper[0, 0].item() * SLACK <= trace.global_upper * SLACK**2
    kinds = {f["kind"] for f in trace.factors}
    assert {"conv", "batchnorm", "pool", "linear", "activation"} <= kinds


def test_adaptive_pool_constant_is_exact():
    pool = nn.AdaptiveAvgPool2d((3, 2))
    x = torch.zeros(1, 1, 7, 5, dtype=torch.float64)
    dense = torch.func.jacrev(lambda t: pool(t).flatten())(x).reshape(6, -1)
    trace = trace_bounds(make_target(nn.Sequential(pool, nn.Flatten())), x, [0.1])
    assert trace.global_upper == pytest.approx(torch.linalg.matrix_norm(dense, 2).item(), rel=1e-12)


@pytest.mark.parametrize("pool", ["token", "avg", "max"])
def test_timm_vit_certified_bounds_hold(pool):
    target = make_target(tiny_vit(global_pool=pool, class_token=pool == "token"), dtype=torch.float64)
    x = images(n=1)
    rhos = [1e-4, 1e-2]
    trace = trace_bounds(target, x, rhos)
    lb = local_bounds(target, x, rhos, options=LocalOptions(taylor=pool != "max"))
    gen = torch.Generator().manual_seed(2)
    for k, rho in enumerate(rhos):
        d = torch.randn(32, 1, 16, 16, generator=gen, dtype=torch.float64)
        pts = (x + rho * d / d.flatten(1).norm(dim=1)[:, None, None, None]).clamp(0, 1)
        worst = jacobian_norm_exact(target, pts).max().item()
        assert worst <= trace.local_upper[0, k].item() * SLACK
        assert worst <= lb.local[0, k].item() * SLACK
        assert trace.local_upper[0, k].item() <= trace.global_upper * SLACK


# ---------------------------------------------------------------- gap rows and figure


def test_gap_rows_sandwich_and_columns():
    torch.manual_seed(0)
    model = create_model("deit-grc", img_size=8, patch_size=4, embed_dim=8, depth=2, num_heads=2, num_classes=5,
                         fused_attn=False, checkpoint="none")  # fmt: skip
    target = make_target(model, dtype=torch.float64)
    x = images(n=2, side=8)
    rows = gap_rows(target, x, [7, 9], [1e-4, 0.1], power_iters=300, tol=1e-12,
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert list(rows.columns) == list(GAP_COLUMNS)
    assert set(rows["layer"]) == {"model", "blocks.0", "blocks.1"} and set(rows["example_id"]) == {7, 9}
    assert len(rows) == 2 * 2 * 3
    assert (rows["empirical"] <= rows["local_upper"] * SLACK).all()
    assert (rows["local_upper"] <= rows["global_upper"] * SLACK).all()
    model_rows = rows[rows["layer"] == "model"]
    # composing exact per-stage norms can only overestimate the end-to-end norm (submultiplicativity)
    assert (model_rows["empirical"] <= model_rows["layerwise_estimate"] * (1 + 1e-6)).all()
    assert (model_rows["local_upper"] <= model_rows["baseline_local"] * SLACK).all()
    # linear bound propagation: a certified bound of the whole model (never below the exact ||J(x0)||), model rows only
    assert (model_rows["empirical"] <= model_rows["local_crown"] * SLACK).all()
    assert rows[rows["layer"] != "model"]["local_crown"].isna().all()
    without = gap_rows(
        target, x, [7, 9], [1e-4], power_iters=50, crown=None, generator=torch.Generator().manual_seed(0)
    )
    assert without["local_crown"].isna().all()
    summary = gap_summary(rows)
    assert set(summary["layer"]) == {"model", "blocks.0", "blocks.1"}
    fig = lipschitz_gap_figure(pd.concat([rows, rows.assign(model="copy")]), sources=["test"])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getbuffer().nbytes > 1000
    with pytest.raises(RobfiltError, match="needs columns"):
        lipschitz_gap_figure(rows.drop(columns=["global_upper"]))
    with pytest.raises(RobfiltError, match="no rows"):
        lipschitz_gap_figure(rows.iloc[:0])


def test_gap_rows_for_a_generic_stack():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3)).double()
    rows = gap_rows(make_target(net), torch.randn(3, 6, dtype=torch.float64), np.arange(3), [0.1])
    assert set(rows["layer"]) == {"model"} and rows["layerwise_estimate"].isna().all()
    assert rows["local_crown"].isna().all()  # not an image model: CROWN's ball is cut to [0, 1]^d, so no bound
    assert (rows["empirical"] <= rows["local_upper"] * SLACK).all()
