"""B2 engine overhead: one robfilt PGD-k unit vs a bare loop of k forward+backward passes on the same batch.

Question: what does the engine add around the attack's unavoidable work (k gradient computations)? An engine
unit also runs the clean forward, torchattacks' per-step bookkeeping (random start, sign step, projection), the
fooled check (whose logits the rows reuse), and builds the rows. The batch holds only examples the model gets right,
so the cascade attacks all of them, exactly like the bare loop; early exit is off (it would skip work the bare loop
does: B1 and B9 measure it). Target: ratio (robfilt / bare) <= 1.10.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F

from benchmarks import _common as B
from robustbench_filters.attacks.cascade import Batch, CascadeSettings, cascade
from robustbench_filters.attacks.catalogue import AttackParams, Norm
from robustbench_filters.data import load_images

NAME = "b2_engine_overhead"
FULL = {"batch_size": 128, "steps": 20, "eps": 0.03, "reps": 5, "warmup": 1}
SMOKE = {"batch_size": 8, "steps": 3, "eps": 0.03, "reps": 2, "warmup": 0}


def correct_batch(
    model: torch.nn.Module, n: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first ``n`` test examples the model classifies correctly (so every one of them gets attacked)."""
    images = load_images("fashion-mnist", split="test")
    x_all, y_all = images.x[:5000].to(device), images.y[:5000].to(device)
    with torch.no_grad():
        ok = torch.cat([model(x_all[i : i + 500]).argmax(1) == y_all[i : i + 500] for i in range(0, 5000, 500)])
    ids = ok.nonzero().squeeze(1)[:n]
    return x_all[ids], y_all[ids], ids.cpu()


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    device = B.resolve_device(device)
    checkpoint = B.pick_checkpoint("deit")
    model = B.eval_model("deit", checkpoint, device, seed)
    x, y, ids = correct_batch(model, cfg["batch_size"], device)
    k, eps = cfg["steps"], cfg["eps"]

    def robfilt() -> None:
        with torch.no_grad():
            clean_logits = model(x)
        clean_correct = clean_logits.argmax(1) == y
        cascade(
            model,
            "deit",
            Batch(x, y, ids, clean_correct, clean_logits),
            # every step on every example, like the bare loop: this measures the engine only
            CascadeSettings("pgd", (eps,), AttackParams(0.0, Norm.LINF, k, None, seed, 10, early_stop=False)),
        )

    def bare() -> None:
        for _ in range(k):
            xa = x.detach().requires_grad_(True)
            loss = F.cross_entropy(model(xa), y)
            torch.autograd.grad(loss, xa)

    times, _ = B.interleaved({"robfilt": robfilt, "bare": bare}, cfg["reps"], device, cfg["warmup"])
    t_rob, t_bare = B.median(times["robfilt"]), B.median(times["bare"])
    timing = pd.DataFrame(
        {
            "side": [f"robfilt PGD-{k} unit", f"bare {k} x forward+backward"],
            "median_s": [round(t_rob, 4), round(t_bare, 4)],
            "per_step_ms": [round(1000 * t_rob / k, 2), round(1000 * t_bare / k, 2)],
            "reps_s": [", ".join(f"{t:.3f}" for t in times[s]) for s in ("robfilt", "bare")],
        }
    )
    result = {
        "benchmark": NAME,
        "title": "B2 engine overhead: robfilt PGD-k vs bare forward+backward loop",
        "question": "Time of one engine unit (clean forward + cascade at one eps + rows) over k bare gradient passes.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "checkpoint": checkpoint, "n": len(ids)},
        "machine": B.machine(),
        "targets": {"time ratio robfilt/bare": B.target(t_rob / t_bare, 1.10)},
        "notes": [
            f"model deit-micro (checkpoint={checkpoint}), batch of {len(ids)} correctly classified test examples, "
            f"PGD-{k} Linf eps={eps}, step 0.15*eps. Interleaved, median of {cfg['reps']} repetitions.",
            "Expected overhead: 2 extra forward passes (clean, fooled check; the rows reuse those logits) plus torchattacks bookkeeping, i.e. under 1/k.",
            "early_stop=False: every example runs all k steps on both sides (early exit is measured by B1, B9, B10).",
        ],
    }
    tables = {"wall time": timing}
    return B.finish(NAME, result, tables, out)


if __name__ == "__main__":
    B.cli(run)
