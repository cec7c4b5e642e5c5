"""A small adversarially trained CNN for Fashion-MNIST: the benchmarks' robust convolutional model.

The gap between a cheap default attack and AutoAttack's reference showed on a robust *convolutional* network, not on
the zoo's DeiTs (issue 32), so B9 measures the default on one. Two 3x3 convolutions (16 and 32 channels, each
followed by ReLU and 2x2 max pooling), a 128-unit hidden layer and 10 logits; [0, 1] images in, normalisation
inside. Trained from scratch with PGD adversarial training at Linf 0.1 by ``benchmarks/train_robust_cnn.py`` (the
settings and test metrics are in ``robust_cnn.json`` beside the weights).

``--model benchmarks/robust_cnn.py:robust_cnn`` loads it (the factory's own weights: ``--checkpoint`` stays at its
default); ``robust_cnn(pretrained=False)`` returns the seeded untrained network the training script starts from.
"""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch
from torch import nn

WEIGHTS = Path(__file__).resolve().with_suffix(".safetensors")
CARD = Path(__file__).resolve().with_suffix(".json")
MEAN, STD = 0.286, 0.353  # the bundled Fashion-MNIST training split's pixel statistics (as the zoo DeiTs use)


class RobustCNN(nn.Module):
    """conv(16) - pool - conv(32) - pool - fc(128) - fc(10), normalising its [0, 1] input itself."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((x - MEAN) / STD))


def robust_cnn(pretrained: bool = True) -> nn.Module:
    """The committed adversarially trained weights (``pretrained=False``: random weights, seeded by the caller)."""
    model = RobustCNN()
    if pretrained:
        safetensors.torch.load_model(model, str(WEIGHTS))
    return model.eval()
