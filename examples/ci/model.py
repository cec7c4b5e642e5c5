"""The model this example gate checks: a small CNN for 28x28 grey images in [0, 1], 10 classes.

robfilt loads it through the spec's ``models = ["model.py:build"]`` (a ``file:factory`` reference, the file
relative to the spec's folder; the spec says ``allow_code = true`` because naming a factory runs this file's
code). Replace ``build`` with your own factory: it must return an ``nn.Module`` in eval mode that
takes float images in [0, 1] of shape (N, 1, 28, 28) and returns (N, 10) logits, with any normalisation inside
the model, so that eps is on the [0, 1] pixel scale.

The weights are the committed ``weights.safetensors`` (80 KB), made by ``python train.py`` in this folder.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

WEIGHTS = Path(__file__).with_name("weights.safetensors")
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST pixel statistics: normalisation lives inside the model


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 14x14
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 7x7
        )
        self.head = nn.Linear(32 * 7 * 7, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - MEAN) / STD
        return self.head(self.features(x).flatten(1))


def build() -> nn.Module:
    """The factory robfilt calls: the trained CNN in eval mode."""
    model = SmallCNN()
    model.load_state_dict(load_file(str(WEIGHTS)))
    return model.eval()
