"""B6's measuring process: ``python -m benchmarks._b6_child FOLDER CONFIG_JSON`` prints one JSON line.

A separate, lean module (no pandas, no plotting) started with exec, so its peak memory counts only what a run
needs: torch, timm, robfilt's data and model code, the model, the file index and the batches.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

T0 = time.perf_counter()


def memory_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc (ru_maxrss would include the parent's)."""
    status = Path("/proc/self/status").read_text()

    def field(name: str) -> float:
        return int(status.split(f"{name}:")[1].split()[0]) / 1024

    return field("VmRSS"), field("VmHWM")


def main(folder: str, cfg: dict) -> dict:
    import torch
    import torchattacks

    from robustbench_filters.data import open_image_source
    from robustbench_filters.models.loading import load_model

    seed = cfg.get("seed", 0)
    out: dict = {"import_s": time.perf_counter() - T0, "stages": []}

    def mark(stage: str, start: float) -> float:
        now = time.perf_counter()
        rss, peak = memory_mb()
        out["stages"].append({"stage": stage, "seconds": now - start, "rss_mb": rss, "peak_mb": peak})
        return now

    mark("imports", T0)
    start = t = time.perf_counter()
    model = load_model(cfg["model"], checkpoint="none", seed=seed)
    t = mark("build model", t)
    source = open_image_source(f"imagefolder:{folder}", preprocess=model, num_workers=cfg.get("workers"))
    t = mark("open (index files)", t)
    ids = torch.randperm(len(source), generator=torch.Generator().manual_seed(seed))[: cfg["n_examples"]].sort().values
    first = ids[: cfg["batch_size"]]
    x, y = source.take(first)
    t = mark("take first batch", t)
    attack = torchattacks.PGD(model.module, eps=4 / 255, alpha=1 / 255, steps=1, random_start=True)
    x_adv = attack(x, y)
    t = mark("one PGD step", t)
    out["first_batch_s"] = t - start
    rest = 0
    for _, xb, _ in source.batches(ids[cfg["batch_size"] :], cfg["batch_size"]):
        rest += len(xb)
    mark("take the other batches", t)
    out.update(
        decoded=len(first) + rest,
        batch_shape=list(x.shape),
        moved=float((x_adv - x).abs().max()),
        peak_mb=memory_mb()[1],
        workers=source.num_workers,
        n_files=len(source),
        torch_threads=torch.get_num_threads(),
    )
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
