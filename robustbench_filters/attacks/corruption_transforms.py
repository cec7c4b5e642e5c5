"""Common image corruptions at five severities (ImageNet-C style), deterministic per example.

Images are (N, C, H, W) floats in [0, 1]; every corruption returns the same shape and range. Severity 0 is the
identity (the input is returned unchanged, bit for bit). Parameters follow Hendrycks & Dietterich's ImageNet-C
where they do not depend on image size; blur radii are scaled down for 28 x 28 Fashion-MNIST.

==============  ===========================  =====  =====  =====  =====  =====
corruption      parameter                    s=1    s=2    s=3    s=4    s=5
==============  ===========================  =====  =====  =====  =====  =====
gaussian_noise  noise std (on [0, 1])        0.08   0.12   0.18   0.26   0.38
impulse_noise   fraction of pixels hit       0.03   0.06   0.09   0.17   0.27
gaussian_blur   kernel std (pixels)          0.5    0.75   1.0    1.5    2.0
contrast        contrast factor              0.4    0.3    0.2    0.1    0.05
jpeg            JPEG quality                 25     18     15     10     7
==============  ===========================  =====  =====  =====  =====  =====

Blur, contrast and JPEG are ``torchvision.transforms.v2.functional`` calls (blur kernel size
``2 * ceil(3 * std) + 1``; JPEG on the 8-bit image). The two noise corruptions draw their noise from one
``torch.Generator`` per example, seeded from (seed, corruption, example id), and *pre-generate* it once for all
severities: torchvision's ``gaussian_noise`` draws from the global RNG, which cannot give per-example noise that
is independent of batch composition (AutoAttack issue 54, ImageNet-C's fixed data). Because the same draw is
scaled (Gaussian) or thresholded (impulse: pixel hit when u < fraction; salt or pepper with probability 1/2),
a higher severity perturbs the same image strictly more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torchvision.transforms.v2.functional as TF

from ..core.errors import RobfiltError, unknown
from ..core.names import SEVERITIES, check_severity  # noqa: F401 - SEVERITIES is part of this module's surface


@dataclass(frozen=True)
class Corruption:
    name: str
    parameter: str
    values: tuple[float, ...]  # one per severity 1..5
    apply: Callable[[torch.Tensor, float, torch.Tensor | None], torch.Tensor]
    noise: Callable[[tuple[int, ...], torch.Generator], torch.Tensor] | None = None  # per-example pre-generated draw


def _gaussian_noise(x: torch.Tensor, sigma: float, noise: torch.Tensor | None) -> torch.Tensor:
    assert noise is not None
    return (x + sigma * noise).clamp(0.0, 1.0)


def _impulse_noise(x: torch.Tensor, amount: float, noise: torch.Tensor | None) -> torch.Tensor:
    assert noise is not None
    hit, salt = noise[:, 0] < amount, noise[:, 1] < 0.5
    return torch.where(hit, salt.to(x.dtype), x)


def _gaussian_blur(x: torch.Tensor, sigma: float, _: torch.Tensor | None) -> torch.Tensor:
    k = 2 * math.ceil(3 * sigma) + 1
    return TF.gaussian_blur(x, kernel_size=[k, k], sigma=[sigma, sigma]).clamp(0.0, 1.0)


def _contrast(x: torch.Tensor, factor: float, _: torch.Tensor | None) -> torch.Tensor:
    return TF.adjust_contrast(x, factor).clamp(0.0, 1.0)


def _jpeg(x: torch.Tensor, quality: float, _: torch.Tensor | None) -> torch.Tensor:
    u8 = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    return TF.jpeg(u8.cpu(), int(quality)).to(x.device, x.dtype) / 255.0


def _randn(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _two_uniforms(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.rand((2, *shape), generator=g)


CORRUPTIONS: dict[str, Corruption] = {
    c.name: c
    for c in [
        Corruption("gaussian_noise", "noise std", (0.08, 0.12, 0.18, 0.26, 0.38), _gaussian_noise, _randn),
        Corruption(
            "impulse_noise", "fraction of pixels", (0.03, 0.06, 0.09, 0.17, 0.27), _impulse_noise, _two_uniforms
        ),
        Corruption("gaussian_blur", "kernel std (px)", (0.5, 0.75, 1.0, 1.5, 2.0), _gaussian_blur),
        Corruption("contrast", "contrast factor", (0.4, 0.3, 0.2, 0.1, 0.05), _contrast),
        Corruption("jpeg", "JPEG quality", (25, 18, 15, 10, 7), _jpeg),
    ]
}


def get_corruption(name: str) -> Corruption:
    if name not in CORRUPTIONS:
        raise unknown("corruption", name, CORRUPTIONS)
    return CORRUPTIONS[name]


def pregenerate(name: str, shape: tuple[int, ...], seeds: Sequence[int]) -> torch.Tensor | None:
    """Per-example noise for a noise corruption, one generator per example seed; None for the others.

    Shapes: (N, C, H, W) standard normals for Gaussian noise; (N, 2, C, H, W) uniforms for impulse noise (the
    hit draw and the salt-or-pepper draw). ``shape`` is one image's (C, H, W).
    """
    c = get_corruption(name)
    if c.noise is None:
        return None
    draws = [c.noise(shape, torch.Generator().manual_seed(int(s))) for s in seeds]
    return torch.stack(draws)


def corrupt(x: torch.Tensor, name: str, severity: int, noise: torch.Tensor | None = None) -> torch.Tensor:
    """Corrupt a batch of [0, 1] images at ``severity`` (0 = identity); noise from :func:`pregenerate`."""
    c = get_corruption(name)
    if check_severity(severity) == 0:
        return x
    if c.noise is not None and noise is None:
        raise RobfiltError(f"{name} needs pre-generated noise; call pregenerate() with per-example seeds.")
    if noise is not None:
        noise = noise.to(x.device, x.dtype)
    return c.apply(x, float(c.values[severity - 1]), noise)


def parameter_table() -> list[dict[str, object]]:
    """The documented parameter table, for summaries and ``--help`` text."""
    return [{"corruption": c.name, "parameter": c.parameter, "values": list(c.values)} for c in CORRUPTIONS.values()]
