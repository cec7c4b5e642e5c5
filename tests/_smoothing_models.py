"""Tiny models with known smoothed classifiers, shared by the randomized-smoothing tests."""

from __future__ import annotations

import math

import torch
from scipy import stats
from torch import nn

SHAPE = (1, 28, 28)
D = math.prod(SHAPE)


class Linear3(nn.Module):
    """f(x) = argmax(Wx + b) with 3 classes: class 0 iff u.x > 0, class 1 otherwise, class 2 never (bias -1e4).

    Under N(0, sigma^2 I) noise, P(class 0) = Phi(u.x / sigma) for a unit vector u, so the smoothed classifier is
    f itself and its exact certified radius is the distance to the boundary |u.x| (Cohen et al., Sec. 3.1).
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        u = torch.randn(D, generator=gen)
        self.register_buffer("u", u / u.norm())
        self.fc = nn.Linear(D, 3)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[0] = self.u
            self.fc.bias.copy_(torch.tensor([0.0, 0.0, -1e4]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def linear_examples(model: Linear3, distances: list[float], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Images at signed distance ``d`` from the boundary (d > 0: class 0), inside [0, 1], with labels."""
    gen = torch.Generator().manual_seed(seed)
    xs = []
    for d in distances:
        base = 0.5 + 0.1 * (torch.rand(D, generator=gen) - 0.5)
        base = base - (base @ model.u) * model.u  # on the boundary
        xs.append((base + d * model.u).view(SHAPE))
    x = torch.stack(xs)
    y = torch.tensor([0 if d > 0 else 1 for d in distances])
    return x, y


def exact_p_top(distance: float, sigma: float) -> float:
    return float(stats.norm.cdf(abs(distance) / sigma))


class TinyMLP(nn.Module):
    """A small random 10-class network: its smoothed classifier is not known in closed form."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
