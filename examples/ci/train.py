"""Train the example CNN on robfilt's bundled Fashion-MNIST subset and write weights.safetensors.

    python train.py            # about a minute on one CPU thread; deterministic (seed 0, one thread)

The committed weights came from exactly this command; rerunning it on CPU reproduces them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from model import WEIGHTS, SmallCNN
from safetensors.torch import save_file
from torch import nn

from robustbench_filters.data import load_images


def train(out: Path = WEIGHTS, epochs: int = 3, seed: int = 0) -> float:
    """Train, save the weights to ``out`` and return the test accuracy on the bundled test split."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    train_set, test_set = load_images("fashion-mnist", split="train"), load_images("fashion-mnist", split="test")
    model = SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train_set.y), generator=gen)
        for i in range(0, len(order), 128):
            idx = order[i : i + 128]
            opt.zero_grad()
            loss_fn(model(train_set.x[idx]), train_set.y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(test_set.x).argmax(1) == test_set.y).float().mean().item()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out))
    return acc


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    print(f"test accuracy {train(args.out, args.epochs):.4f}; weights in {args.out}")
