"""B8 certify throughput: robfilt's batched Monte-Carlo sampler vs bare forward loops over the same noisy samples.

Question: what does randomized smoothing's sampler cost beyond the forward passes it cannot avoid, and what does
batching several examples together buy? Three sides count the predicted classes of the same number of noisy
samples (k examples x m draws) at the same batch size:

- robfilt: ``smoothing.sample_counts`` (forward batches mix examples; noise in fixed 100-draw blocks, each
  from a generator seeded by (seed, sigma, example id, phase); counts by one bincount per batch);
- bare: full batches of repeated inputs plus ``randn_like`` noise, argmax, nothing else (the ceiling);
- per-example loop: Cohen et al.'s reference ``_sample_noise``, whose batches hold one example's draws only, so
  m = n0 = 100 fills only 100 of a 500-sample batch.

Targets: time ratio robfilt / bare <= 1.15 at each m (the seeded noise and the counting are cheap).
On one CPU thread smaller batches are faster per sample, so the per-example loop can beat both at m = 100;
cross-example batching pays where a 100-sample batch leaves the device idle (GPUs). See the notes of a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch

from benchmarks import _common as B
from robustbench_filters.data import load_images
from robustbench_filters.smoothing import Sampling, sample_counts

NAME = "b8_certify_throughput"
FULL = {"n_examples": 10, "draws": [100, 1000], "batch_size": 500, "sigma": 0.25, "reps": 3, "warmup": 1}
SMOKE = {"n_examples": 3, "draws": [20, 50], "batch_size": 32, "sigma": 0.25, "reps": 1, "warmup": 0}


def _sides(model: torch.nn.Module, x: torch.Tensor, m: int, bs: int, sigma: float, seed: int, device: torch.device):
    """The timed functions for one draw count ``m``; each returns the total number of samples it classified."""
    k = x.shape[0]
    ids = list(range(k))
    reps = x.repeat_interleave(m, dim=0)  # what the bare loop classifies: k*m rows, example-major

    def robfilt(noise_device: str | None = "cpu") -> int:
        counts = sample_counts(
            model, x, ids, sigma, m, "bench", Sampling.defaults(seed=seed, batch=bs, noise_device=noise_device)
        )
        return int(counts.sum())

    @torch.no_grad()
    def bare() -> int:
        total = 0
        for lo in range(0, reps.shape[0], bs):
            batch = reps[lo : lo + bs]
            total += int(model(batch + sigma * torch.randn_like(batch)).argmax(-1).numel())
        return total

    @torch.no_grad()
    def per_example() -> int:
        total = 0
        for i in range(k):
            counts = None
            remaining = m
            while remaining:
                this = min(bs, remaining)
                batch = x[i : i + 1].repeat(this, 1, 1, 1)
                logits = model(batch + sigma * torch.randn_like(batch))
                found = torch.bincount(logits.argmax(-1), minlength=logits.shape[-1])
                counts = found if counts is None else counts + found
                remaining -= this
            total += int(counts.sum().item())
        return total

    sides = {"robfilt": robfilt, "bare": bare, "per-example loop": per_example}
    if device.type == "cuda":
        sides["robfilt, noise on device"] = lambda: robfilt(None)
    return sides


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    device = B.resolve_device(device)
    checkpoint = B.pick_checkpoint("deit")
    model = B.eval_model("deit", checkpoint, device, seed)
    x, _ = load_images("fashion-mnist", split="test").take(torch.arange(cfg["n_examples"]))
    x = x.to(device)
    bs, sigma, k = cfg["batch_size"], cfg["sigma"], cfg["n_examples"]
    rows, targets = [], {}
    for m in cfg["draws"]:
        sides = _sides(model, x, m, bs, sigma, seed, device)
        times, values = B.interleaved(sides, cfg["reps"], device, cfg["warmup"])
        assert all(v == k * m for v in values.values()), values  # every side classified the same number of samples
        bare_s = B.median(times["bare"])
        for side in sides:
            med = B.median(times[side])
            rows.append(
                {
                    "draws_per_example": m,
                    "side": side,
                    "median_s": round(med, 3),
                    "samples_per_s": round(k * m / med, 1),
                    "time_ratio_vs_bare": round(med / bare_s, 3),
                    "reps_s": ", ".join(f"{t:.2f}" for t in times[side]),
                }
            )
        targets[f"time ratio robfilt/bare at m={m}"] = B.target(B.median(times["robfilt"]) / bare_s, 1.15)
    table = pd.DataFrame(rows)
    notes = [
        f"model deit-micro (checkpoint={checkpoint}), {k} test images x m draws, sigma {sigma}, batch {bs}, "
        f"{torch.get_num_threads()} torch threads; all sides interleaved, median of {cfg['reps']} timed repetitions.",
        "robfilt draws noise on the CPU by default (the same noise on every machine); on CUDA the extra side "
        "draws it on the device (faster, device-dependent noise).",
        "On a CPU the micro DeiT classifies more samples per second in batches of 50-200 than of 500-1000 "
        "(activations stay in cache), so at m=100 the per-example loop's 100-sample batches can win; batching "
        "several examples together pays on accelerators. The library's default batch is 128 for this reason.",
    ]
    result = {
        "benchmark": NAME,
        "title": "B8 certify throughput: batched Monte-Carlo sampler vs bare forward loops",
        "question": "Samples per second of robfilt's smoothing sampler vs a bare loop and a per-example loop.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "checkpoint": checkpoint},
        "machine": B.machine(),
        "targets": targets,
        "notes": notes,
    }
    return B.finish(NAME, result, {"throughput": table}, out)


if __name__ == "__main__":
    B.cli(run)
