"""B12 CROWN: what verification costs next to IBP and the default attack, and what it verifies on the zoo DeiTs.

Question: per example, how many seconds and model-equivalent passes do IBP, CROWN (``refresh="inner"``, the
default ``"deep"`` and ``"full"``, :mod:`robustbench_filters.crown`) and the default attack (``apgd-adaptive``)
spend, and at which Linf eps do the zoo DeiTs verify (``verified <= robust <= clean``)?

Two tables, per model (``deit``, ``deit-grc``, ``deit-at``; the micro zoo; Fashion-MNIST test images in the
loader's order):

1. cost: the first ``n_cost`` test images at ``cost_eps``, each bounded by every method in turn (interleaved, so
   a load spike hits all), and the default attack on the same images (one ``evaluate`` run). Passes: a bound's
   multiply-adds over one forward pass's; an attack's forward + 2 x backward rows (a backward pass costs about two
   forward passes), its convergence check included;
2. verified fraction per eps: the first ``n_verify`` clean-correct test images, a binary search per image over the
   eps grid with CROWN (``refresh="full"``, the tightest). A certificate at eps holds at every smaller eps (the box
   shrinks), so an image counts as verified at every grid eps up to the largest it was verified at; one not
   verified at an eps is not tried above it (counted not verified there: the search is conservative). The
   default attack runs on the same images at every grid eps; a verified image it breaks would be a bug (target 0).

``B12_WORKERS`` (environment, default 1) models at once, each in its own process.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from benchmarks import _common as B
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.catalogue import DEFAULT_IMAGE_ATTACK
from robustbench_filters.crown import Verifier
from robustbench_filters.data.images import load_images

NAME = "b12_crown"
GRID = (1e-4, 3e-4, 5e-4, 7e-4, 1e-3)
FULL = {
    "models": ("deit", "deit-grc", "deit-at"),
    "n_cost": 1,
    "cost_eps": 3e-4,
    "n_verify": 5,
    "grid": GRID,
    "methods": ("ibp", "crown-inner", "crown-deep", "crown-full"),
    "search": ("full",),
}
SMOKE = {
    "models": ("deit",),
    "n_cost": 1,
    "cost_eps": 1e-4,
    "n_verify": 1,
    "grid": (1e-4,),
    "methods": ("ibp", "crown-inner"),
    "search": ("inner",),
}
METHODS = {
    "ibp": ("ibp", "none"),
    "crown-inner": ("crown", "inner"),
    "crown-deep": ("crown", "deep"),
    "crown-full": ("crown", "full"),
}


def _attack(name: str, x: torch.Tensor, y: torch.Tensor, grid: tuple[float, ...], seed: int, device: str):
    """Per image and eps: robust under the default attack; and the attack's passes and seconds per image."""
    t0 = time.perf_counter()
    res = evaluate(models=[name], attacks=[DEFAULT_IMAGE_ATTACK], eps=list(grid), data=(x, y), n_examples=len(x),
                   seed=seed, device=device)  # fmt: skip
    seconds = time.perf_counter() - t0
    rows = res.rows[res.rows["attack"] == DEFAULT_IMAGE_ATTACK]
    robust = {(int(r.example_id), float(r.eps)): bool(r.correct) for r in rows.itertuples()}
    cols = [c for c in ("fwd", "conv_fwd") if c in rows]
    fwd = float(rows[cols].to_numpy().sum())
    bwd = float(rows[[c for c in ("bwd", "conv_bwd") if c in rows]].to_numpy().sum())
    return robust, (fwd + 2 * bwd) / len(x), seconds / len(x)


def _cost(name: str, cfg: dict[str, Any], seed: int, device: str) -> list[dict[str, Any]]:
    model = B.eval_model(name, B.pick_checkpoint(name), B.resolve_device(device))
    x, y = load_images("fashion-mnist", split="test").take(torch.arange(cfg["n_cost"]))
    v = Verifier(model, tuple(x.shape[1:]), device=device)
    eps = cfg["cost_eps"]
    got: dict[str, list] = {m: [] for m in cfg["methods"]}
    for i in range(len(x)):  # interleaved: every method on image i before image i + 1
        for m in cfg["methods"]:
            method, refresh = METHODS[m]
            got[m] += v.verify(x[i : i + 1], y[i : i + 1], eps, method=method, refresh=refresh, offset=i)
    _, attack_passes, attack_s = _attack(name, x, y, (eps,), seed, device)
    row: dict[str, Any] = {"model": name, "eps": eps, "n": len(x)}
    for m, verdicts in got.items():
        row[f"{m}_s"] = round(B.median([d.seconds for d in verdicts]), 2)
        row[f"{m}_passes"] = round(B.median([d.passes for d in verdicts]))
        row[f"{m}_verified"] = sum(d.verified for d in verdicts)
    row["attack_s"], row["attack_passes"] = round(attack_s, 2), round(attack_passes)
    return [row]


def _search(v: Verifier, x: torch.Tensor, y: torch.Tensor, grid: tuple[float, ...], i: int,
            search: tuple[str, ...]) -> tuple[int, float, int, list[str]]:  # fmt: skip
    """(index of the largest grid eps verified, -1 for none; seconds; bounds computed; every bound as
    ``eps/refresh: worst margin``) for image i."""
    lo, hi, spent, tries = -1, len(grid), 0.0, 0  # grid[lo] verified (or none), grid[hi] not (or beyond the grid)
    probes: list[str] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = False
        for refresh in search:
            d = v.verify(x[i : i + 1], y[i : i + 1], grid[mid], refresh=refresh, offset=i)[0]
            spent, tries = spent + d.seconds, tries + 1
            probes.append(f"{grid[mid]:g}/{refresh}: {d.worst:.3g} ({d.passes:.0f} passes, {d.seconds:.0f} s)")
            if d.verified:
                ok = True
                break
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo, spent, tries, probes


def _verified(name: str, cfg: dict[str, Any], seed: int, device: str) -> tuple[list[dict[str, Any]], int, list]:
    model = B.eval_model(name, B.pick_checkpoint(name), B.resolve_device(device))
    data = load_images("fashion-mnist", split="test")
    with torch.no_grad():
        pred = model(data.x[:200].to(device)).argmax(1).cpu()
    ids = torch.nonzero(pred == data.y[:200]).flatten()[: cfg["n_verify"]]
    x, y = data.take(ids)
    v = Verifier(model, tuple(x.shape[1:]), device=device)
    grid = tuple(cfg["grid"])
    found = [_search(v, x, y, grid, i, tuple(cfg["search"])) for i in range(len(x))]
    robust, _, _ = _attack(name, x, y, grid, seed, device)
    rows, breaches = [], 0
    for k, eps in enumerate(grid):
        verified = [lo >= k for lo, *_ in found]
        rob = [robust[(int(ids[i]), float(eps))] if (int(ids[i]), float(eps)) in robust else robust[(i, float(eps))]
               for i in range(len(x))]  # fmt: skip
        breaches += sum(a and not b for a, b in zip(verified, rob, strict=True))
        rows.append({"model": name, "eps": eps, "clean_correct": len(x), "verified": sum(verified),
                     "robust": sum(rob), "verified_frac": round(sum(verified) / len(x), 3),
                     "robust_frac": round(sum(rob) / len(x), 3),
                     "s_per_image": round(sum(f[1] for f in found) / len(x), 1),
                     "bounds_per_image": round(sum(f[2] for f in found) / len(x), 1)})  # fmt: skip
    images = [
        {
            "model": name,
            "example_id": int(ids[i]),
            "largest verified eps": grid[f[0]] if f[0] >= 0 else 0.0,
            "bounds (eps/refresh: worst margin lower bound)": "; ".join(f[3]),
        }
        for i, f in enumerate(found)
    ]
    return rows, breaches, images


def _model(name: str, cfg: dict[str, Any], seed: int, device: str):
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cost = _cost(name, cfg, seed, device)
    rows, breaches, images = _verified(name, cfg, seed, device)
    return cost, rows, breaches, images


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)
    load_before = os.getloadavg()[0]
    workers = max(1, int(os.environ.get("B12_WORKERS", "1")))
    models = list(cfg["models"])
    if workers == 1:
        results = [_model(m, cfg, seed, device) for m in models]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_model, models, [cfg] * len(models), [seed] * len(models),
                                    [device] * len(models)))  # fmt: skip
    cost = pd.DataFrame([r for c, *_ in results for r in c])
    verified = pd.DataFrame([r for _, v, *_ in results for r in v])
    breaches = sum(r[2] for r in results)
    images = pd.DataFrame([r for *_, im in results for r in im])
    largest = []
    for m in models:
        part = verified[(verified["model"] == m) & (verified["verified_frac"] >= 0.1)]
        largest.append({"model": m, "largest eps with >= 10% of clean-correct verified":
                        float(part["eps"].max()) if len(part) else float("nan")})  # fmt: skip
    result = {
        "benchmark": NAME,
        "title": "B12 CROWN: verification cost next to IBP and the default attack, verified fraction per eps",
        "question": "Seconds and model-equivalent passes per image of IBP, CROWN (inner, deep, full) and the default "
        "attack; the verified and robust fractions per Linf eps on the micro zoo DeiTs.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, **{k: list(cfg[k]) for k in ("models", "grid", "methods", "search")}},
        "machine": {**B.machine(), "load_avg_1min_before": round(load_before, 2)},
        "targets": {"verified images the default attack broke (a bug if > 0)": B.target(breaches, 0)},
        "notes": [
            f"cost: the first {cfg['n_cost']} test images at eps {cfg['cost_eps']:g}, methods interleaved per "
            "image, float64 on one thread; a bound's passes are its multiply-adds over one forward pass's, the "
            "attack's forward + 2 x backward rows (its convergence check included).",
            f"verified: the first {cfg['n_verify']} clean-correct test images (of the first 200), binary search per "
            f"image over the grid with crown (refresh {' then '.join(cfg['search'])} where it fails); an image "
            "verified at eps is verified "
            "at every smaller eps (its box is inside), one not verified is not tried above (conservative).",
            f"1-min load average {load_before:.1f} before, {B.machine()['load_avg_1min']:.1f} after: seconds are "
            "noisy on a shared machine, passes are not.",
        ],
    }
    tables = {"cost per image": cost, "verified and robust per eps": verified,
              "largest eps with >= 10% verified": pd.DataFrame(largest), "bounds per image": images}  # fmt: skip
    return B.finish(NAME, result, tables, out)


if __name__ == "__main__":
    B.cli(run)
