"""Tiny image models that misbehave on purpose, and the constant-level images they classify perfectly.

``Level`` reads a grey image's mean brightness and returns logits for ``classes`` levels: class k is the level
(20 k + 10) / 255, so the images of :func:`level_data` are classified correctly, clean accuracy is 100% and an
attack has every example to work on. ``bad`` picks what goes wrong and ``when`` when it goes wrong:

- ``when="always"``: on every call, so at the start of a run (refused in one line);
- ``when="offgrid"``: on inputs with a pixel off the 1/255 grid, i.e. adversarial or corrupted inputs only;
- ``when="bright"``: on inputs whose first pixel is above 0.5, i.e. some Gaussian noise draws of dark images.

The same source is written to a ``models.py`` for the CLI (``--model <path>/models.py:build?bad=tuple``).
"""

from __future__ import annotations

from pathlib import Path

import torch

SOURCE = """
import numpy as np
import torch
from torch import nn


class Level(nn.Module):
    def __init__(self, classes=10, bad="", when="always"):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2000.0))
        self.register_buffer("centres", (20 * torch.arange(classes) + 10).float() / 255)
        self.bad, self.when = bad, when

    def _hit(self, x):
        if self.when == "always":
            return torch.ones(len(x), dtype=torch.bool, device=x.device)
        if self.when == "offgrid":
            return ((x * 255).round() - x * 255).abs().flatten(1).amax(1) > 1e-3
        return x.flatten(1)[:, 0] > 0.5

    def forward(self, x):
        m = x.flatten(1).mean(1, keepdim=True)
        z = -self.scale * (m - self.centres) ** 2
        hit = self._hit(x)
        if self.bad in ("nans", "infs"):
            return torch.where(hit[:, None], torch.full_like(z, float(self.bad[:3])), z)
        if not bool(hit.any()) or not self.bad:
            return z
        return {
            "tuple": lambda: (z, m),
            "dict": lambda: {"logits": z},
            "list": lambda: [z],
            "numpy": lambda: z.detach().numpy(),
            "float": lambda: 1.0,
            "rank1": lambda: z[:, 0],
            "rank3": lambda: z[:, None],
            "batch": lambda: z[:1],
            "one": lambda: z[:, :1],
        }[self.bad]()


def build(classes=10, bad="", when="always"):
    return Level(int(classes), str(bad), str(when)).eval()
"""

_namespace: dict = {}
exec(compile(SOURCE, "<untrusted models>", "exec"), _namespace)  # noqa: S102 - the test's own source text
Level = _namespace["Level"]
build = _namespace["build"]


def level_data(labels: list[int], side: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Constant grey images (N, 1, side, side) at the level of each label, and the labels (int64)."""
    y = torch.tensor(labels, dtype=torch.long)
    x = ((20 * y + 10).float() / 255).view(-1, 1, 1, 1).expand(-1, 1, side, side).contiguous()
    return x, y


def write_models(folder: Path) -> Path:
    """``folder/models.py`` holding :data:`SOURCE` (for ``--model <path>:build?...``)."""
    path = folder / "models.py"
    path.write_text(SOURCE)
    return path


def write_level_folder(root: Path, classes: list[str], per_class: int = 2, side: int = 8) -> Path:
    """An image folder: one sub-folder per name, each holding constant PNGs at the level of its position."""
    from PIL import Image

    for k, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("L", (side, side), color=20 * k + 10).save(root / name / f"img{i}.png")
    return root
