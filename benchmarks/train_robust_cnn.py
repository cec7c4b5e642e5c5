"""Train the benchmarks' robust CNN (``benchmarks/robust_cnn.py``) with PGD adversarial training, deterministically.

    OMP_NUM_THREADS=1 python -m benchmarks.train_robust_cnn            # writes robust_cnn.safetensors and .json
    OMP_NUM_THREADS=1 python -m benchmarks.train_robust_cnn --arch bn  # the second model, robust_bn (its recipe)
    OMP_NUM_THREADS=1 python -m benchmarks.train_robust_cnn --arch res # the third, robust_res

PGD adversarial training (Madry et al. 2018) at Linf ``EPS`` on the bundled Fashion-MNIST training split: every
batch is replaced by its PGD points (``STEPS`` steps of 2.5 eps / steps, random start: robfilt's
:class:`~robustbench_filters.train.adversarial.PGDTraining`, what ``robfilt train --adversarial pgd`` runs), AdamW
with robfilt's warmup-then-cosine schedule. The data order and every random start are pure functions of (seed,
step), so the same seed and thread count give the same weights. It writes the weights and a JSON card (settings,
test accuracy, PGD-20 accuracy at the training eps, wall time); committed beside the factory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import safetensors.torch
import torch
import torch.nn.functional as F

from benchmarks import robust_bn, robust_cnn, robust_res
from robustbench_filters.core.io import atomic_write_json
from robustbench_filters.data import load_images
from robustbench_filters.train.adversarial import EVAL_STEPS, PGDTraining
from robustbench_filters.train.recipe import Recipe, lr_at

EPS, STEPS = 0.1, 7
RECIPE = Recipe(epochs=8, batch_size=128, lr=2e-3, weight_decay=5e-4, augment=False)
#: each architecture: (module, factory, training eps, PGD steps, recipe); ``bn`` is trained unlike ``cnn`` on purpose
ARCHS = {
    "cnn": (robust_cnn, robust_cnn.robust_cnn, EPS, STEPS, RECIPE),
    "bn": (robust_bn, robust_bn.robust_bn, 0.15, 5,
           Recipe(epochs=4, batch_size=128, lr=3e-3, weight_decay=5e-4, label_smoothing=0.1, augment=False)),
    "res": (robust_res, robust_res.robust_res, 0.125, 7,
            Recipe(epochs=3, batch_size=128, lr=2e-3, weight_decay=5e-4, augment=False)),
}  # fmt: skip


def train(seed: int = 0, epochs: int | None = None, out: Path | None = None, arch: str = "cnn") -> dict:
    """Train from the seeded random network and write the weights and the card; returns the card."""
    module, factory, eps, steps, base = ARCHS[arch]
    out = module.WEIGHTS if out is None else out
    torch.manual_seed(seed)
    model = factory(pretrained=False).train()
    data, test = load_images("fashion-mnist", split="train"), load_images("fashion-mnist", split="test")
    adversarial = PGDTraining(eps, steps)
    recipe = dataclasses.replace(base, epochs=epochs or base.epochs)
    epochs = int(recipe.epochs or 1)
    per_epoch = len(data.y) // recipe.batch_size
    total = epochs * per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    start = time.perf_counter()
    for step in range(total):
        epoch, i = divmod(step, per_epoch)
        perm = torch.randperm(len(data.y), generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        idx = perm[i * recipe.batch_size : (i + 1) * recipe.batch_size]
        x = adversarial.points(model, data.x[idx], data.y[idx], seed * 1_000_003 + step)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, recipe)
        loss = F.cross_entropy(model(x), data.y[idx], label_smoothing=recipe.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        if (step + 1) % per_epoch == 0:
            print(f"epoch {epoch + 1}/{epochs}: adversarial loss {loss.item():.3f}", flush=True)
    wall = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        clean = (model(test.x).argmax(-1) == test.y).float().mean().item()
    robust = adversarial.robust_accuracy(model, test.x, test.y, seed)
    safetensors.torch.save_model(model, str(out))
    card = {
        "model": f"benchmarks/robust_{arch}.py:robust_{arch}",
        "training": {
            "adversarial": "pgd",
            "train_eps": eps,
            "train_steps": steps,
            "train_norm": "linf",
            "step_size": adversarial.step_size,
            "seed": seed,
            "data": "fashion-mnist (bundled train split)",
            "recipe": dataclasses.asdict(recipe),
            "total_steps": total,
            "wall_time_s": round(wall, 1),
            "torch_threads": torch.get_num_threads(),
            "command": "python -m benchmarks.train_robust_cnn" + ("" if arch == "cnn" else f" --arch {arch}"),
        },  # fmt: skip
        "metrics": {"test_acc": clean, f"test_acc_pgd{EVAL_STEPS}": robust, "test_n": len(test.y)},
    }
    atomic_write_json(out.with_suffix(".json") if out != module.WEIGHTS else module.CARD, card)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="default: the architecture's recipe")
    parser.add_argument("--out", type=Path, default=None, help="weights file (the card is written beside it)")
    parser.add_argument("--arch", choices=sorted(ARCHS), default="cnn")
    args = parser.parse_args()
    card = train(args.seed, args.epochs, args.out, args.arch)
    print(json.dumps(card["metrics"]))


if __name__ == "__main__":
    main()
