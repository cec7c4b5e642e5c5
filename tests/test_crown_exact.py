"""Against exact answers: on 2-layer ReLU nets the margin's exact minimum over the box comes from a MILP
(scipy.optimize.milp, big-M with the exact first-layer bounds).

- soundness: every method's lower bound is at most the exact minimum;
- exactness where it must be: with no unstable ReLU the relaxation is exact, so CROWN equals the minimum;
- completeness: branch and bound on the input (:mod:`robustbench_filters.crown.complete`) brackets the exact
  minimum within 1e-6, so the verified set it gives equals the MILP's exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import Bounds, LinearConstraint, milp
from torch import nn

from robustbench_filters.crown import Verifier, build_graph
from robustbench_filters.crown.complete import min_margin

DT = torch.float64


def relu_net(d_in: int, width: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, 3)).double().eval()


def exact_min(net: nn.Sequential, lo: np.ndarray, hi: np.ndarray, y: int, t: int) -> float:
    """min over x in [lo, hi] of z_y - z_t, by a MILP on (x, a, z): a = relu(W1 x + b1) with binaries z."""
    w1, b1 = net[0].weight.detach().numpy(), net[0].bias.detach().numpy()
    w2, b2 = net[2].weight.detach().numpy(), net[2].bias.detach().numpy()
    d, h = w1.shape[1], w1.shape[0]
    c = w2[y] - w2[t]
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    l1 = w1 @ mid + b1 - np.abs(w1) @ rad  # exact bounds of the pre-activations (affine in x)
    u1 = w1 @ mid + b1 + np.abs(w1) @ rad
    n = d + 2 * h  # x, a, z
    rows, lbs, ubs = [], [], []

    def row(x=None, a=None, z=None):
        r = np.zeros(n)
        if x is not None:
            r[:d] = x
        if a is not None:
            r[d : d + h] = a
        if z is not None:
            r[d + h :] = z
        return r

    for i in range(h):
        e = np.eye(h)[i]
        rows.append(row(x=-w1[i], a=e))  # a >= W1 x + b1
        lbs.append(b1[i])
        ubs.append(np.inf)
        rows.append(row(a=e, z=-max(u1[i], 0.0) * e))  # a <= u z
        lbs.append(-np.inf)
        ubs.append(0.0)
        rows.append(row(x=-w1[i], a=e, z=-min(l1[i], 0.0) * e))  # a <= W1 x + b1 - l (1 - z)
        lbs.append(-np.inf)
        ubs.append(b1[i] - min(l1[i], 0.0))
    obj = row(a=c)
    lower = np.concatenate([lo, np.zeros(h), np.zeros(h)])
    upper = np.concatenate([hi, np.maximum(u1, 0.0), np.ones(h)])
    res = milp(obj, constraints=LinearConstraint(np.array(rows), lbs, ubs), bounds=Bounds(lower, upper),
               integrality=np.concatenate([np.zeros(d + h), np.ones(h)]), options={"mip_rel_gap": 0, "presolve": True})  # fmt: skip
    assert res.success, res.message
    return float(res.fun + b2[y] - b2[t])


CASES = [(3, 8, seed, eps) for seed in range(4) for eps in (0.02, 0.1, 0.3)]


@pytest.mark.parametrize(("d_in", "width", "seed", "eps"), CASES)
def test_bounds_are_below_the_exact_minimum_and_bab_reaches_it(d_in: int, width: int, seed: int, eps: float) -> None:
    net = relu_net(d_in, width, seed)
    g = torch.Generator().manual_seed(100 + seed)
    x0 = torch.rand(1, d_in, generator=g, dtype=DT)
    y = int(net(x0).argmax())
    lo, hi = (x0 - eps).clamp(0, 1)[0], (x0 + eps).clamp(0, 1)[0]
    v = Verifier(net, (d_in,))
    verdicts = {m: v.verify(x0, torch.tensor([y]), eps, method=m)[0] for m in ("ibp", "crown-ibp", "crown")}
    graph = build_graph(net, (d_in,))
    robust = True
    for t in range(3):
        if t == y:
            continue
        exact = exact_min(net, lo.numpy(), hi.numpy(), y, t)
        for m, verdict in verdicts.items():
            assert verdict.margins[t] <= exact + 1e-9, (m, t, verdict.margins[t], exact)
        low, up = min_margin(graph, lo, hi, y, t, tol=1e-6)
        assert low - 1e-9 <= exact <= up + 1e-9 and up - low <= 1e-6, (low, exact, up)
        robust &= exact > 0
    # verification is sound: verified implies robust (the MILP's answer)
    for verdict in verdicts.values():
        assert not verdict.verified or robust


@pytest.mark.parametrize("seed", range(3))
def test_with_no_unstable_relu_crown_is_exact(seed: int) -> None:
    net = relu_net(3, 8, seed)
    x0 = torch.rand(1, 3, dtype=DT)
    eps = 1e-4  # small enough that no pre-activation changes sign
    pre = net[0](x0)
    assert pre.abs().min() > 3 * eps * net[0].weight.abs().sum(1).max()
    y = int(net(x0).argmax())
    lo, hi = (x0 - eps).clamp(0, 1)[0].numpy(), (x0 + eps).clamp(0, 1)[0].numpy()
    verdict = Verifier(net, (3,)).verify(x0, torch.tensor([y]), eps, min_margin=-1e9)[0]
    for t in range(3):
        if t != y:
            assert verdict.margins[t] == pytest.approx(exact_min(net, lo, hi, y, t), abs=1e-9)


def test_verified_set_equals_the_exact_one_with_branch_and_bound() -> None:
    """28 (net, point, eps) queries around the decision threshold: BaB's verdicts equal the MILP's."""
    agree, decided = 0, 0
    for k in range(28):
        net = relu_net(2, 6, 1000 + k)
        g = torch.Generator().manual_seed(k)
        x0 = torch.rand(1, 2, generator=g, dtype=DT)
        y = int(net(x0).argmax())
        eps = float(0.02 + 0.2 * torch.rand(1, generator=g))
        lo, hi = (x0 - eps).clamp(0, 1)[0], (x0 + eps).clamp(0, 1)[0]
        graph = build_graph(net, (2,))
        exact = min(exact_min(net, lo.numpy(), hi.numpy(), y, t) for t in range(3) if t != y)
        if abs(exact) < 1e-5:
            continue  # on the threshold itself a verdict is a rounding question
        brackets = [min_margin(graph, lo, hi, y, t, tol=1e-7) for t in range(3) if t != y]
        bab_verified = all(low > 0 for low, _ in brackets)
        bab_falsified = any(up <= 0 for _, up in brackets)
        assert bab_verified != bab_falsified
        decided += 1
        agree += bab_verified == (exact > 0)
    assert decided >= 20 and agree == decided
