"""A second small adversarially trained network for Fashion-MNIST, built and trained unlike the robust CNN, to judge
the default attack off the models it was tuned on (B9's: ``benchmarks/robust_cnn.py`` and the zoo DeiTs). One rule
of the default came from it (at Linf 0.15 the long runs that ended closest took a second rerun round, so they get
one more run in the attack); ``benchmarks/robust_res.py`` is the model that was never used in the design.

Architecture: three 3x3 convolutions with BatchNorm (16, 32 and 64 channels; the second and third with stride 2,
no max pooling), GELU activations, global average pooling and one linear layer to 10 logits; [0, 1] images in,
normalisation inside. Recipe (``benchmarks/train_robust_cnn.py --arch bn``): PGD adversarial training at Linf 0.15
(the robust CNN: 0.1) with 5 steps (7), label smoothing 0.1 (none), 4 epochs at a peak learning rate of 3e-3 (8 at
2e-3). The settings and test metrics are in ``robust_bn.json`` beside the weights.

``--model benchmarks/robust_bn.py:robust_bn`` loads it; ``robust_bn(pretrained=False)`` returns the seeded
untrained network the training script starts from.
"""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch
from torch import nn

WEIGHTS = Path(__file__).resolve().with_suffix(".safetensors")
CARD = Path(__file__).resolve().with_suffix(".json")
MEAN, STD = 0.286, 0.353  # the bundled Fashion-MNIST training split's pixel statistics


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU())


class RobustBN(nn.Module):
    """conv(16) - conv(32, /2) - conv(64, /2) - global average - fc(10), with BatchNorm and GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(_block(1, 16, 1), _block(16, 32, 2), _block(32, 64, 2))
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((x - MEAN) / STD).mean((2, 3)))


def robust_bn(pretrained: bool = True) -> nn.Module:
    """The committed adversarially trained weights (``pretrained=False``: random weights, seeded by the caller)."""
    model = RobustBN()
    if pretrained:
        safetensors.torch.load_model(model, str(WEIGHTS))
    return model.eval()
