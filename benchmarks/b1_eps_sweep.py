"""B1 eps sweep: robfilt's eps cascade vs a plain loop calling torchattacks PGD once per eps.

Question: how much wall time does the cascade save over the obvious loop, and does it find at least as many
adversarial examples? The cascade attacks only the examples still robust at the previous eps (an adversarial
example at a smaller eps counts at every larger one), and inside PGD an example leaves the batch the step it is
fooled (early exit, keeping that point), so it should be much faster and never weaker.
Targets: wall-time ratio (robfilt / loop) <= 0.4; at every eps, robfilt's robust accuracy <= the loop's + 0.5 points.

Both sides attack with the weights frozen, as ``robfilt attack`` does (and as B10's bare side does): neither pays
for weight-gradient bookkeeping. The model passes each side spends are counted too (the cascade's from its rows'
compute ledger, the loop's from its fixed schedule), with the least any cascade running the same attack must spend:
every example still robust at an eps takes all the steps there and a forward pass to judge the last point, and
every example broken at an eps takes at least one forward pass to be seen fooled. Wall time follows passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torchattacks

from benchmarks import _common as B
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.cascade import Batch, CascadeSettings, cascade
from robustbench_filters.attacks.catalogue import AttackParams, Norm
from robustbench_filters.attacks.image_models import frozen
from robustbench_filters.configs import default_eps
from robustbench_filters.data import load_images
from robustbench_filters.runs.units import select_examples

NAME = "b1_eps_sweep"
FULL = {"n_examples": 500, "steps": 20, "batch_size": 128, "reps": 3, "warmup": 0}
SMOKE = {"n_examples": 24, "steps": 2, "batch_size": 12, "reps": 2, "warmup": 0}


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    device = B.resolve_device(device)
    checkpoint = B.pick_checkpoint("deit")
    model = B.eval_model("deit", checkpoint, device, seed)
    images = load_images("fashion-mnist", split="test")
    ids = select_examples(len(images.y), cfg["n_examples"], seed)
    x_all, y_all = images.x[ids].to(device), images.y[ids].to(device)
    grid = default_eps("fashion-mnist", Norm.LINF)
    bs, steps, n = cfg["batch_size"], cfg["steps"], len(ids)
    batches = [(x_all[i : i + bs], y_all[i : i + bs], ids[i : i + bs]) for i in range(0, n, bs)]

    def robfilt() -> pd.DataFrame:
        frames = []
        for x, y, bid in batches:
            with torch.no_grad():
                clean_logits = model(x)
            clean_correct = clean_logits.argmax(1) == y
            frames.append(
                cascade(model, "deit", Batch(x, y, bid, clean_correct, clean_logits),
                        CascadeSettings("pgd", tuple(grid), AttackParams(0.0, Norm.LINF, steps, None, seed, 10)))
            )  # fmt: skip
        return pd.concat(frames, ignore_index=True)

    def loop() -> dict[float, float]:
        torch.manual_seed(seed)
        acc = {}
        for eps in grid:
            attack = torchattacks.PGD(model, eps=eps, alpha=0.15 * eps, steps=steps, random_start=True)
            correct = 0
            for x, y, _ in batches:
                x_adv = attack(x, y)
                with torch.no_grad():
                    correct += int((model(x_adv).argmax(1) == y).sum())
            acc[eps] = correct / n
        return acc

    with frozen([model]):
        times, values = B.interleaved({"robfilt": robfilt, "loop": loop}, cfg["reps"], device, cfg["warmup"])
    rows = values["robfilt"]
    values["robfilt"] = rows.groupby("eps").correct.mean().to_dict()
    t_rob, t_loop = B.median(times["robfilt"]), B.median(times["loop"])
    with torch.no_grad():
        clean = float((model(x_all).argmax(1) == y_all).float().mean())
    acc = pd.DataFrame(
        {
            "eps": grid,
            "robfilt_acc_%": [100 * values["robfilt"][e] for e in grid],
            "loop_acc_%": [100 * values["loop"][e] for e in grid],
        }
    )
    acc["diff_points"] = acc["robfilt_acc_%"] - acc["loop_acc_%"]
    timing = pd.DataFrame(
        {
            "side": ["robfilt cascade", "torchattacks loop"],
            "median_s": [round(t_rob, 3), round(t_loop, 3)],
            "reps_s": [", ".join(f"{t:.2f}" for t in times[k]) for k in ("robfilt", "loop")],
        }
    )
    passes = _passes(rows, n, len(grid), steps)
    notes = [
        f"model deit-micro, checkpoint={checkpoint}, clean accuracy {100 * clean:.1f}% on these examples; "
        f"{n} examples, PGD {steps} steps, step 0.15*eps, random start, batch {bs}, grid {grid}.",
        "robfilt side = the engine's cascade() per batch (clean forward + cascade with early exit + rows); the loop "
        "attacks every example at every eps for every step. Both run in this process, interleaved, median of the "
        "timed repetitions.",
    ]
    if checkpoint == "none":
        notes.append("untrained model: most examples are misclassified before any attack, which flatters the "
                     "cascade; rerun when the zoo checkpoint exists.")  # fmt: skip
    ledger, floor = (float(passes["ratio to loop"].iloc[k]) for k in (0, 2))
    notes.append(
        f"passes: the cascade spends {ledger:.3f} of the loop's model passes and wall time follows them. The floor, "
        f"{floor:.3f}, is the least any cascade running this same attack can spend: every (example, eps) pair that "
        "stays robust takes all the steps and the judging forward pass on either side, and every example broken "
        "takes at least one forward pass. A wall-time ratio below the floor needs a weaker attack or cheaper passes."
    )
    if not smoke:
        seconds, _ = B.timed(
            lambda: evaluate(["deit"], ["pgd"], grid, n_examples=n, seed=seed, steps=steps, batch_size=bs,
                             checkpoint=checkpoint, device=str(device)),
            device,
        )  # fmt: skip
        notes.append(f"end-to-end `evaluate` (cascade + sanity checks + run folder), one run: {seconds:.1f} s.")
    result = {
        "benchmark": NAME,
        "title": "B1 eps sweep: cascade vs per-eps torchattacks loop",
        "question": "Wall time and robust accuracy of robfilt's eps cascade vs a plain PGD loop over eps.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "grid": grid, "checkpoint": checkpoint, "clean_acc": clean},
        "machine": B.machine(),
        "targets": {
            "wall-time ratio robfilt/loop": B.target(t_rob / t_loop, 0.4),
            "max robust-acc excess over loop (points)": B.target(float(acc["diff_points"].max()), 0.5),
        },
        "notes": notes,
    }
    tables = {
        "robust accuracy per eps": acc.round({"robfilt_acc_%": 2, "loop_acc_%": 2, "diff_points": 2}),
        "wall time": timing,
        "model passes (one example through the model once)": passes,
    }
    return B.finish(NAME, result, tables, out)


def _passes(rows: pd.DataFrame, n: int, n_eps: int, steps: int) -> pd.DataFrame:
    """Forward and backward passes: the cascade's (its ledger), the loop's, and the floor of any cascade that runs
    the same attack (each robust (example, eps) pair: every step and the judging forward; each example broken at
    some eps: one forward there)."""
    top = rows[rows.eps == rows.eps.max()]
    robust = int((rows.clean_correct & rows.correct).sum())
    broken = int((top.clean_correct & ~top.correct).sum())
    loop = (n * n_eps * (steps + 1), n * n_eps * steps)
    sides = {
        "robfilt cascade (ledger)": (float(rows.fwd.sum()), float(rows.bwd.sum())),
        "torchattacks loop": loop,
        "floor: any cascade with this attack": (robust * (steps + 1) + broken, robust * steps),
    }
    table = pd.DataFrame(
        [{"side": k, "forward": f, "backward": b, "ratio to loop": (f + b) / sum(loop)} for k, (f, b) in sides.items()]
    )
    return table.round({"ratio to loop": 4})


if __name__ == "__main__":
    B.cli(run)
