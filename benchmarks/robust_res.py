"""A third small adversarially trained network for Fashion-MNIST, never used while the default attack was designed:
a residual network trained by yet another recipe (the robust CNN and ``benchmarks/robust_bn.py`` informed the
default's design; this one only judges it).

Architecture: a 3x3 stem convolution (24 channels), two residual blocks (two 3x3 convolutions with BatchNorm and
ReLU each, the second block at stride 2 with a 1x1 projection to 48 channels), a stride-2 convolution to 64
channels, global average pooling and one linear layer to 10 logits; [0, 1] images in, normalisation inside. Recipe
(``benchmarks/train_robust_cnn.py --arch res``): PGD adversarial training at Linf 0.125 with 7 steps, 3 epochs at a
peak learning rate of 2e-3, no label smoothing. The settings and test metrics are in ``robust_res.json``.
"""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch
from torch import nn

WEIGHTS = Path(__file__).resolve().with_suffix(".safetensors")
CARD = Path(__file__).resolve().with_suffix(".json")
MEAN, STD = 0.286, 0.353  # the bundled Fashion-MNIST training split's pixel statistics


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Conv2d(cin, cout, 1, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class RobustRes(nn.Module):
    """stem(24) - res(24) - res(48, /2) - conv(64, /2) - global average - fc(10)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 24, 3, padding=1), nn.ReLU(), _Block(24, 24, 1), _Block(24, 48, 2),
            nn.Conv2d(48, 64, 3, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((x - MEAN) / STD).mean((2, 3)))


def robust_res(pretrained: bool = True) -> nn.Module:
    """The committed adversarially trained weights (``pretrained=False``: random weights, seeded by the caller)."""
    model = RobustRes()
    if pretrained:
        safetensors.torch.load_model(model, str(WEIGHTS))
    return model.eval()
