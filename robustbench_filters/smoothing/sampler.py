"""Batched Monte-Carlo sampling of a base classifier under Gaussian noise.

Randomized smoothing needs thousands of noisy copies of every example, so the sampler is a throughput problem:
Cohen et al.'s reference loop fills each forward batch with copies of ONE example, which wastes most of a large
batch whenever the draw count (n0 = 100) is smaller than it. Here a forward batch holds draws of several examples
at once (k examples x m draws, split wherever the batch boundary falls) and the predicted classes are counted per
example with one ``bincount``.

Determinism: the noise of example ``i`` comes in fixed blocks of :data:`BLOCK` draws, block ``b`` from a
generator seeded by ``(seed, sigma, example id, phase, b)``. The counts therefore depend on none of: the batch
size, which other examples share a batch, the order of examples, or which process computes them. Noise is drawn
on the CPU by default, so it is also the same noise on every machine; ``noise_device`` trades that for speed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..checks.logits import guard_logits, predictions, require_logits
from ..core.errors import RobfiltError
from .settings import Sampling

BLOCK = 100  # draws per noise block: one generator per (example, phase, block)
# Samples per forward pass: the certify run's noise_batch (Sampling.batch). Its default, 128, suits CPUs: the micro
# DeiT classifies ~1.5x more samples per second at batch 50-200 than at 1000 on one core (activations stay in
# cache; measured for B8). On a GPU pass thousands.


def noise_seed(seed: int, sigma: float, example_id: int, phase: str, block: int) -> int:
    """A 63-bit generator seed from the identity of a noise block (stable across processes and Python runs)."""
    key = f"{int(seed)}|{float(sigma).hex()}|{int(example_id)}|{phase}|{int(block)}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def noise_block(
    shape: Sequence[int],
    sigma: float,
    *,
    seed: int,
    example_id: int,
    phase: str,
    block: int,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The ``BLOCK`` noise draws N(0, sigma^2 I) of one block, shape ``(BLOCK, *shape)``, float32."""
    gen = torch.Generator(device=device).manual_seed(noise_seed(seed, sigma, example_id, phase, block))
    return sigma * torch.randn((BLOCK, *shape), generator=gen, device=device)


def example_noise(
    shape: Sequence[int], sigma: float, num: int, *, seed: int, example_id: int, phase: str, start: int = 0
) -> torch.Tensor:
    """Draws ``start .. start+num-1`` of one example's noise stream (for tests and the reference loop)."""
    first, last = start // BLOCK, (start + num - 1) // BLOCK
    blocks = [
        noise_block(shape, sigma, seed=seed, example_id=example_id, phase=phase, block=b)
        for b in range(first, last + 1)
    ]
    return torch.cat(blocks)[start - first * BLOCK : start - first * BLOCK + num]


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a parameter-free model)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _segments(
    x: torch.Tensor, ids: Sequence[int], sigma: float, num: int, seed: int, phase: str, noise_device: torch.device
) -> Iterator[tuple[int, torch.Tensor]]:
    """(slot, noisy samples) pieces of at most BLOCK draws, example by example, block by block."""
    shape = tuple(x.shape[1:])
    for slot, example_id in enumerate(ids):
        for b in range((num + BLOCK - 1) // BLOCK):
            count = min(BLOCK, num - b * BLOCK)
            noise = noise_block(
                shape, sigma, seed=seed, example_id=example_id, phase=phase, block=b, device=noise_device
            )
            yield slot, x[slot].unsqueeze(0) + noise[:count].to(x.device, x.dtype)


def validate_sampling(x: torch.Tensor, ids: Sequence[int], sigma: float, num: int, batch: int) -> None:
    """One-line errors for inputs the sampler cannot use."""
    if not len(ids):
        raise RobfiltError("no examples to sample; pass at least one example.")
    if x.ndim < 2 or x.shape[0] != len(ids):
        raise RobfiltError(f"got {x.shape[0] if x.ndim else 0} examples but {len(ids)} example ids; pass one id each.")
    if len(set(int(i) for i in ids)) != len(ids):
        raise RobfiltError("example ids must be distinct: each id seeds its own noise.")
    if not (np.isfinite(sigma) and sigma > 0):
        raise RobfiltError(f"sigma must be a positive number, got {sigma}.")
    if num < 1:
        raise RobfiltError(f"the number of noise draws must be at least 1, got {num}.")
    if batch < 1:
        raise RobfiltError(f"noise_batch must be positive, got {batch}.")


@torch.no_grad()
def sample_counts(
    model: nn.Module, x: torch.Tensor, example_ids: Sequence[int], sigma: float, num: int, phase: str, s: Sampling
) -> np.ndarray:
    """Class counts of ``model(x_i + noise)`` over ``num`` draws per example: int64 array ``(k, num_classes)``.

    ``phase`` names the purpose of the draws ("select", "estimate", "predict", ...), so CERTIFY's two sample
    sets are independent as the paper requires. ``s`` gives the seed, the samples per forward pass, where noise is
    drawn and the model's class count (see :class:`.settings.Sampling`).

    A draw whose output is not finite logits (NaN, inf, a tuple, another shape; see :mod:`..checks.logits`) is
    nobody's vote: it is counted in no class, so ``num - counts.sum(1)`` is the number of such draws and a caller
    must abstain on them. Without ``s.num_classes`` the first batch's outputs give the class count (and must then be
    a (batch, classes) tensor).
    """
    ids = [int(i) for i in example_ids]
    validate_sampling(x, ids, sigma, num, s.batch)
    device = model_device(model)
    x = x.to(device)
    gen_device = device if s.noise_device is None else torch.device(s.noise_device)
    k = len(ids)
    batch_size = s.batch
    classes = s.num_classes
    counts: torch.Tensor | None = None
    pieces: list[torch.Tensor] = []
    slots: list[torch.Tensor] = []
    filled = 0

    def flush() -> None:
        nonlocal counts, pieces, slots, filled, classes
        if not pieces:
            return
        batch = torch.cat(pieces)
        out = model(batch)
        if classes is None:
            classes = require_logits(out, len(batch), model=type(model).__name__, finite=False)
        pred = predictions(guard_logits(out, len(batch), classes, batch.device))
        if counts is None:  # one extra bucket per example for the draws that are no prediction
            counts = torch.zeros(k * (classes + 1), dtype=torch.int64, device=pred.device)
        pred = torch.where(pred < 0, classes, pred)
        flat = torch.cat(slots).to(pred.device) * (classes + 1) + pred
        counts += torch.bincount(flat, minlength=k * (classes + 1))
        pieces, slots, filled = [], [], 0

    for slot, samples in _segments(x, ids, sigma, num, s.seed, phase, gen_device):
        while samples.shape[0]:
            take = min(batch_size - filled, samples.shape[0])
            pieces.append(samples[:take])
            slots.append(torch.full((take,), slot, dtype=torch.int64))
            filled += take
            samples = samples[take:]
            if filled == batch_size:
                flush()
    flush()
    assert counts is not None and classes is not None  # num >= 1 and k >= 1, so at least one batch ran
    return counts.view(k, classes + 1)[:, :classes].cpu().numpy()


__all__ = ["BLOCK", "example_noise", "model_device", "noise_block", "noise_seed", "sample_counts"]
