"""Whole models, tested like a verifier: no sampled point of the input box (corners, random points, PGD points
that minimise the margin) may give a margin below its bound or an intermediate value outside its node's bounds.

Tiny networks (a ReLU/GELU MLP, tiny DeiTs: plain, BSA Gaussian and untied, GRC, LayerScale) for every method,
and the micro zoo DeiTs at a small eps. Also: CROWN is never looser than IBP on the margins, refused models are
refused in one line.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.crown import Verifier, build_graph, verify
from robustbench_filters.crown.domain import linf_domain
from robustbench_filters.crown.propagate import Cost, ibp_pass, linear_pass, relax_on
from robustbench_filters.crown.verify import Settings, margin_bounds
from robustbench_filters.models.config import DeiTConfig
from robustbench_filters.models.deit import build_deit

DT = torch.float64


def tiny_deit(**kw) -> nn.Module:
    torch.manual_seed(0)
    cfg = DeiTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=8, depth=2, num_heads=2,
                     mean=(0.5,), std=(0.25,), **kw)  # fmt: skip
    cfg.validate()
    model = build_deit(cfg).eval()
    with torch.no_grad():  # a larger class token and positions than timm's init, so every token has some spread
        model.cls_token.normal_(0, 1)
        if model.pos_embed is not None:
            model.pos_embed.normal_(0, 0.5)
    return model


def tiny_mlp() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 8), nn.GELU(), nn.Linear(8, 3)).eval()


def _pgd_points(graph, x0, eps, y, steps=20, starts=4, seed=0) -> torch.Tensor:
    """Points of the box found by signed-gradient descent on each wrong-class margin (the attacker's best)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = (x0 - eps).clamp(0, 1), (x0 + eps).clamp(0, 1)
    found = []
    classes = graph.shape(graph.output)[-1]
    for t in range(classes):
        for _ in range(starts):
            x = (lo + torch.rand(x0.shape, generator=g, dtype=DT) * (hi - lo)).requires_grad_(True)
            for _ in range(steps):
                out = graph(x).reshape(x.shape[0], -1)
                margin = out.gather(1, y[:, None]).squeeze(1) - out[:, t]
                (grad,) = torch.autograd.grad(margin.sum(), x)
                with torch.no_grad():
                    x -= eps / 4 * grad.sign()
                    x.copy_(torch.minimum(torch.maximum(x, lo), hi))
            found.append(x.detach())
    return torch.stack(found)


def _box_points(x0, eps, n, seed) -> torch.Tensor:
    """Random points and random corners of the box, (n, B, *shape)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = (x0 - eps).clamp(0, 1), (x0 + eps).clamp(0, 1)
    u = torch.rand((n, *x0.shape), generator=g, dtype=DT)
    u[: n // 2] = u[: n // 2].round()
    return torch.minimum(torch.maximum(lo + u * (hi - lo), lo), hi)


def check_model(model, x0, y, eps, settings: Settings, n_points=160, pgd=True) -> torch.Tensor:
    graph = build_graph(model, tuple(x0.shape[1:]))
    x0 = x0.to(DT)
    dom = linf_domain(x0, eps)
    gm = graph.with_margin(y)
    cost = Cost(graph.macs())
    lower = margin_bounds(graph, dom, y, settings, cost)
    ibp = ibp_pass(gm, dom)
    if settings.method == "crown":
        prop = linear_pass(gm, dom, ibp, refresh=settings.refresh, window=settings.window)
    elif settings.method == "crown-ibp":
        prop = relax_on(gm, dom, ibp)
    else:
        prop = None
    points = [_box_points(x0, eps, n_points, 0)]
    if pgd:
        points.append(_pgd_points(graph, x0, eps, y))
    pts = torch.cat(points)
    own = torch.arange(lower.shape[1])[None, :] == y[:, None]
    for x in pts:
        vals = gm.evaluate(x)
        margin = vals[gm.output]
        assert torch.all((margin >= lower) | own), (settings, float((lower - margin).max()))
        for i, v in enumerate(vals):  # every intermediate bound the relaxations used (and IBP's)
            for bounds in ([prop.bounds[i]] if prop is not None and i < len(prop.bounds) else []) + [ibp[i]]:
                if bounds is None:
                    continue
                assert torch.all(v >= bounds.lo) and torch.all(v <= bounds.hi), (settings, gm.ops[i].name)
    return lower


SETTINGS = [
    Settings("ibp"),
    Settings("crown-ibp"),
    Settings("crown", refresh="none"),
    Settings("crown", refresh="inner", window=0),
    Settings("crown", refresh="inner", window=100),
    Settings("crown", refresh="deep"),
    Settings("crown", refresh="full"),
    Settings("crown", refresh="all"),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.method}-{s.refresh}-{s.window}")
def test_mlp_bounds_hold_on_corners_random_and_pgd_points(settings: Settings) -> None:
    model = tiny_mlp()
    g = torch.Generator().manual_seed(3)
    x0 = torch.rand(4, 6, generator=g, dtype=DT)
    y = torch.tensor([0, 1, 2, 0])
    # every corner of the 6-dim box too (64 per example)
    corners = torch.tensor([[(c >> i) & 1 for i in range(6)] for c in range(64)], dtype=DT)
    eps = 0.15
    lower = check_model(model, x0, y, eps, settings)
    graph = build_graph(model, (6,)).with_margin(y)
    lo, hi = (x0 - eps).clamp(0, 1), (x0 + eps).clamp(0, 1)
    for c in corners:
        m = graph(lo + c * (hi - lo))
        assert torch.all((m >= lower) | (torch.arange(3)[None] == y[:, None]))


DEITS = {
    "plain": {},
    "bsa": {"bsa": True},
    "bsa-untied": {"bsa": True, "pos_kernel": "untied"},
    "grc": {"grc": True, "grc_lambda": 0.3},
    "bsa-grc-attn": {"bsa": True, "grc": True, "grc_sublayers": "attn"},
}


@pytest.mark.parametrize("variant", list(DEITS))
@pytest.mark.parametrize("settings", SETTINGS[1:], ids=lambda s: f"{s.method}-{s.refresh}-{s.window}")
def test_tiny_deit_bounds_hold_on_sampled_and_pgd_points(variant: str, settings: Settings) -> None:
    model = tiny_deit(**DEITS[variant])
    g = torch.Generator().manual_seed(5)
    x0 = torch.rand(2, 1, 8, 8, generator=g, dtype=DT)
    with torch.no_grad():
        y = model(x0.float()).argmax(1)
    lower = check_model(model, x0, y, 0.02, settings, n_points=60)
    assert torch.isfinite(lower[torch.arange(3)[None] != y[:, None]]).any(), "a vacuous bound tests nothing"


def test_layerscale_and_mean_pooling_are_covered() -> None:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=8, patch_size=4, in_chans=1, num_classes=3,
                              embed_dim=8, depth=1, num_heads=2, init_values=0.5, global_pool="avg").eval()  # fmt: skip
    x0 = torch.rand(2, 1, 8, 8, dtype=DT)
    with torch.no_grad():
        y = model(x0.float()).argmax(1)
    check_model(model, x0, y, 0.02, Settings("crown", refresh="inner"), n_points=40)


def test_crown_is_never_looser_than_ibp_on_the_margins() -> None:
    model = tiny_deit(grc=True)
    x0 = torch.rand(3, 1, 8, 8, dtype=DT)
    y = torch.tensor([0, 1, 2])
    v = Verifier(model, (1, 8, 8))
    for eps in (1e-3, 1e-2, 0.1):
        ibp = v.verify(x0, y, eps, method="ibp")
        for method in ("crown-ibp", "crown"):
            tight = v.verify(x0, y, eps, method=method)
            for a, b in zip(ibp, tight, strict=True):
                assert all(bm >= am for am, bm in zip(a.margins, b.margins, strict=True) if am == am), (eps, method)


@pytest.mark.slow  # ~10 s of CPU; test_crown_run covers both ends (IBP verifies none, CROWN verifies) by default
def test_crown_is_much_tighter_than_ibp_at_small_eps() -> None:
    """The reason for the engine: at eps 1e-3 IBP's margins are vacuous on a trained DeiT, CROWN's are not."""
    from robustbench_filters.data.images import load_images
    from robustbench_filters.models.loading import load_model

    model = load_model("deit").module
    x, y = load_images("fashion-mnist", split="test").take(torch.arange(1))
    v = Verifier(model, (1, 28, 28))
    ibp = v.verify(x, y, 1e-4, method="ibp")[0]
    crown = v.verify(x, y, 1e-4, refresh="inner")[0]
    assert ibp.worst < -1e3 and crown.worst > 0 and crown.verified and not ibp.verified


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) for n in ("deit", "deit-bsa-grc", "deit-grc-at")],  # ~25 s each
)
def test_zoo_models_bounds_hold_on_sampled_and_pgd_points(name: str) -> None:
    """The micro zoo DeiTs, one test image each, at eps 1e-4 (where the bound is tight enough to mean something)."""
    from robustbench_filters.data.images import load_images
    from robustbench_filters.models.loading import load_model

    model = load_model(name).module
    x, y = load_images("fashion-mnist", split="test").take(torch.arange(1))
    lower = check_model(model, x.to(DT), y, 1e-4, Settings("crown", refresh="inner"), n_points=16)
    assert torch.isfinite(lower).all()


def test_a_model_it_does_not_know_is_refused_in_one_line() -> None:
    import timm

    resnet = timm.create_model("resnet10t", num_classes=3, in_chans=1).eval()
    with pytest.raises(RobfiltError, match="crown bounds do not cover ResNet") as err:
        verify(resnet, torch.rand(1, 1, 16, 16), torch.tensor([0]), 0.01)
    assert "\n" not in str(err.value) and "VisionTransformer" in str(err.value)

    class Mine(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(RobfiltError, match="do not cover Mine"):
        build_graph(Mine(), (3,))
    with pytest.raises(RobfiltError, match="do not cover Sigmoid at 1"):
        build_graph(nn.Sequential(nn.Linear(3, 3), nn.Sigmoid()), (3,))


def test_a_patched_forward_is_refused() -> None:
    import types

    model = tiny_deit()
    model.forward_head = types.MethodType(lambda self, x, pre_logits=False: self.head(x[:, 1]), model)  # token 1
    with pytest.raises(RobfiltError, match="does not reproduce the model's output"):
        build_graph(model, (1, 8, 8))
