"""B9 default strength: the default attack against AutoAttack's reference settings and ``pgd``, on robust models.

Question: does the default reach the strength of ``autoattack-standard`` (AutoAttack's standard version at the
reference settings: APGD-CE 100 steps, APGD-T and FAB-T 9 targets x 100 steps, Square 5000 queries) on models
trained to be robust as well as on normally trained ones, at a fraction of its cost?

Models: the adversarially trained zoo DeiTs ``deit-at`` and ``deit-grc-at``, the robust CNN of
``benchmarks/robust_cnn.py`` (where the gap of a cheap default showed first) and the normally trained zoo ``deit``
and ``deit-grc``; two Linf eps each, where robust accuracy lies between 20% and 60%; 256 test examples (seed 0).
Every cell (model, eps) runs each attack as one end-to-end ``evaluate`` at that eps alone (models and data loaded,
the sanity checks, the default's convergence check, the run folder), once, in one batch of 256 (the reference's
attacks call the model thousands of times on the few examples left; one batch makes them half as many calls).

Per cell it prints robust examples, model passes (forward + backward rows, the compute ledger; the default's
include its convergence check) and wall time of each attack. Targets, in every cell: the default leaves at most
``autoattack-standard`` + max(1 example, 0.5% of n) robust, at no more than 1/5 of its passes. The ratio of the
default's passes and time to ``pgd``'s is printed without a target.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.catalogue import DEFAULT_IMAGE_ATTACK
from robustbench_filters.configs import ImageAttackConfig
from robustbench_filters.summaries.record import present

NAME = "b9_default_strength"
CNN = f"{Path(__file__).resolve().parent / 'robust_cnn.py'}:robust_cnn"
REFERENCE = "autoattack-standard"
#: (model, its two eps): robust accuracy between 20% and 60% under the default at each
CELLS: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("deit-at", (0.1, 0.125)),
    ("deit-grc-at", (0.1, 0.125)),
    (f"cnn-at={CNN}", (0.125, 0.15)),
    ("deit", (0.02, 0.025)),
    ("deit-grc", (0.02, 0.025)),
)
FULL = {"cells": CELLS, "n_examples": 256, "batch_size": 256, "steps": None}
SMOKE = {"cells": (("deit", (0.05,)),), "n_examples": 8, "batch_size": 8, "steps": 1}
PASS_SHARE = 0.2  # the default's passes, at most this share of the reference's


def _cell(model: str, eps: float, attack: str, cfg: dict[str, Any], seed: int, device: str) -> dict[str, Any]:
    """One attack on one model at one eps, end to end: robust count, passes (the default's with its convergence
    check), time, and the convergence check's verdict."""
    config = ImageAttackConfig(
        models=(model,), attacks=(attack,), eps=(eps,), n_examples=cfg["n_examples"], seed=seed, steps=cfg["steps"],
        batch_size=cfg["batch_size"], device=device,
    )  # fmt: skip
    seconds, result = B.timed(lambda: evaluate(config=config), B.resolve_device(device))
    summary = result.summary
    (label, results), *_ = summary.models.items()
    (entry,) = results.robust
    conv, cost = present(entry.convergence, {}), present(entry.cost, {})
    passes = cost["fwd"] + cost["bwd"] + conv.get("fwd", 0.0) + conv.get("bwd", 0.0)
    checks = [c for c in summary.checks if c.name == f"attack converged ({attack})"]
    return {"label": label, "n": entry.n, "robust": entry.correct, "passes": passes, "seconds": seconds,
            "conv": f"{conv.get('broken', 0)}/{conv.get('checked', 0)}" if conv else "-",
            "conv_status": checks[0].status if checks else "-",
            "failed": [c.name for c in summary.checks if c.status == "fail"]}  # fmt: skip


def _row(eps: float, got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One cell's line of the table: robust counts, passes, times and the ratios."""
    d, p, r = got[DEFAULT_IMAGE_ATTACK], got["pgd"], got[REFERENCE]
    return {
        "model": d["label"], "eps": eps, "n": d["n"],
        "default_robust": d["robust"], "standard_robust": r["robust"], "pgd_robust": p["robust"],
        "excess": d["robust"] - r["robust"], "allowed": max(1, int(0.005 * d["n"])),
        "default_passes": round(d["passes"]), "standard_passes": round(r["passes"]), "pgd_passes": round(p["passes"]),
        "pass_share": round(d["passes"] / max(r["passes"], 1), 3),
        "default_s": round(d["seconds"], 1), "standard_s": round(r["seconds"], 1), "pgd_s": round(p["seconds"], 1),
        "passes_vs_pgd": round(d["passes"] / max(p["passes"], 1), 2),
        "time_vs_pgd": round(d["seconds"] / max(p["seconds"], 1e-9), 2),
        "convergence": f"{d['conv']} {d['conv_status']}",
    }  # fmt: skip


def _attacks(model: str, eps: float, cfg: dict[str, Any], seed: int, device: str) -> dict[str, dict[str, Any]]:
    """The three attacks on one cell, in one process."""
    return {a: _cell(model, eps, a, cfg, seed, device) for a in (DEFAULT_IMAGE_ATTACK, "pgd", REFERENCE)}


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    """Every cell; ``B9_WORKERS`` (environment, default 1) cells at once, each in its own process with the
    thread count the benchmark runs under (the passes do not depend on it; the times are then measured side by
    side with the other cells)."""
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)
    load_before = os.getloadavg()[0]
    workers = max(1, int(os.environ.get("B9_WORKERS", "1")))
    todo = [(model, eps) for model, grid in cfg["cells"] for eps in grid]
    every = len(todo)
    # B9_CELLS (environment): only the cells of these model labels, e.g. "cnn-at" (autoattack-standard alone takes
    # 25-60 CPU minutes per cell): the report then says it is partial, in its title and in every target
    chosen = [m for m in os.environ.get("B9_CELLS", "").split(",") if m]
    todo = [(m, e) for m, e in todo if not chosen or m.split("=", 1)[0] in chosen]
    if not todo:
        raise SystemExit(f"B9_CELLS={','.join(chosen)} names no cell; the models are " + ", ".join(
            m.split("=", 1)[0] for m, _ in cfg["cells"]))  # fmt: skip
    part = f" ({len(todo)} of {every} cells)" if len(todo) < every else ""
    if workers == 1:
        results = [_attacks(m, e, cfg, seed, device) for m, e in todo]
    else:
        models, grid = [m for m, _ in todo], [e for _, e in todo]
        rest = ([cfg] * len(todo), [seed] * len(todo), [device] * len(todo))
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_attacks, models, grid, *rest))
    cells = [_row(eps, got) for (_, eps), got in zip(todo, results, strict=True)]
    failed = {
        f"{got[DEFAULT_IMAGE_ATTACK]['label']}@{eps:g} {a}": g["failed"]
        for (_, eps), got in zip(todo, results, strict=True)
        for a, g in got.items()
        if g["failed"]
    }
    table = pd.DataFrame(cells)
    over = table["excess"] - table["allowed"]
    result = {
        "benchmark": NAME,
        "title": f"B9 default strength: {DEFAULT_IMAGE_ATTACK} vs {REFERENCE} vs pgd, robust and normal models",
        "question": "Robust examples, model passes and time of the default next to AutoAttack's reference settings "
        "and PGD-20, per model and eps.",
        "mode": "smoke" if smoke else "partial" if part else "full",
        "settings": {**cfg, "cells": [[m, list(g)] for m, g in cfg["cells"]]},
        "machine": {**B.machine(), "load_avg_1min_before": round(load_before, 2)},
        "targets": {
            f"max robust examples over autoattack-standard beyond the allowance, per cell{part}": B.target(
                over.max(), 0
            ),
            f"max pass share default/autoattack-standard per cell{part}": B.target(
                table["pass_share"].max(), PASS_SHARE
            ),
        },
        "notes": [
            f"{cfg['n_examples']} examples, seed {seed}; one thread per process, {workers} cell(s) at a time; each "
            "attack once per cell, end to end. "
            "Passes are forward + backward rows through the model (the compute ledger), the default's with its "
            "convergence check (the 'convergence' column: broken/checked survivors and the check's verdict).",
            "allowed = max(1, 0.5% of n) robust examples above autoattack-standard; pass_share = default passes / "
            "autoattack-standard passes (target <= 0.2); passes_vs_pgd and time_vs_pgd have no target.",
            f"failed sanity checks: {failed or 'none'}",
            f"1-min load average {load_before:.1f} before, {B.machine()['load_avg_1min']:.1f} after.",
        ],
    }
    return B.finish(NAME, result, {"robust examples, passes and time per cell": table}, out)


if __name__ == "__main__":
    B.cli(run)
