"""B9 default strength: the default attack (autoattack-fast) against ``pgd`` and against today's ``autoattack``.

Question: does the default attack reach the strength of robfilt's ``autoattack`` (APGD-CE, APGD-T, FAB-T, Square;
run as before this release, i.e. with ``early_stop=False``: torchattacks' own loops) at a small multiple of PGD-20's
cost? Every side is one end-to-end ``evaluate`` (what ``robfilt attack`` runs: models and data loaded, the cascade,
the sanity checks, the default's convergence check, the run folder) on ``--model deit,deit-grc --eps 0.02,0.05
--n-examples 128``. The default and ``pgd`` alternate (median of the repetitions); ``autoattack`` runs once.
Targets: time default / pgd <= 3.0; in every (model, eps) cell the default leaves at most one robust example more
than ``autoattack``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.catalogue import DEFAULT_IMAGE_ATTACK
from robustbench_filters.configs import ImageAttackConfig

NAME = "b9_default_strength"
FULL = {"models": ("deit", "deit-grc"), "eps": (0.02, 0.05), "n_examples": 128, "reps": 3, "steps": None}
SMOKE = {"models": ("deit",), "eps": (0.05,), "n_examples": 12, "reps": 1, "steps": 2}


def _robust(result: Any) -> dict[tuple[str, float], dict[str, Any]]:
    return {(label, r.eps): r for label, m in result.summary.models.items() for r in m.robust}


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)
    checkpoint = "zoo" if all(B.pick_checkpoint(m) == "zoo" for m in cfg["models"]) else "none"
    common = {
        "models": cfg["models"], "eps": cfg["eps"], "n_examples": cfg["n_examples"], "seed": seed,
        "checkpoint": checkpoint, "device": str(device), "steps": cfg["steps"],
    }  # fmt: skip
    load_before = os.getloadavg()[0]
    sides = {
        "default": lambda: evaluate(config=ImageAttackConfig(**common)),
        "pgd": lambda: evaluate(config=ImageAttackConfig(attacks=("pgd",), **common)),
    }
    times, values = B.interleaved(sides, cfg["reps"], B.resolve_device(device), warmup=0)
    aa_s, aa = B.timed(
        lambda: evaluate(config=ImageAttackConfig(attacks=("autoattack",), early_stop=False, **common)),
        B.resolve_device(device),
    )
    t_default, t_pgd = B.median(times["default"]), B.median(times["pgd"])
    strong, pgd, ref = _robust(values["default"]), _robust(values["pgd"]), _robust(aa)
    cells = []
    for key in sorted(strong):
        s, p, a = strong[key], pgd[key], ref[key]
        cells.append(
            {
                "model": key[0], "eps": key[1], "n": s.n,
                "pgd_robust": p.correct, "default_robust": s.correct, "autoattack_robust": a.correct,
                "default_minus_autoattack": s.correct - a.correct,
                "default_passes_per_ex": round(s.cost["fwd_per_example"] + s.cost["bwd_per_example"], 1),
                "pgd_passes_per_ex": round(p.cost["fwd_per_example"] + p.cost["bwd_per_example"], 1),
                "broken_by": ", ".join(f"{k} {v}" for k, v in s.broken_by.items()),
                "convergence": f"{s.convergence['broken']}/{s.convergence['checked']}" if s.convergence else "-",
            }
        )  # fmt: skip
    table = pd.DataFrame(cells)
    timing = pd.DataFrame(
        {
            "side": [f"default ({DEFAULT_IMAGE_ATTACK})", "pgd (PGD-20)", "autoattack (early_stop=False)"],
            "median_s": [round(t_default, 2), round(t_pgd, 2), round(aa_s, 2)],
            "ratio_to_pgd": [round(t_default / t_pgd, 2), 1.0, round(aa_s / t_pgd, 2)],
            "reps_s": [", ".join(f"{t:.1f}" for t in times["default"]), ", ".join(f"{t:.1f}" for t in times["pgd"]),
                       f"{aa_s:.1f}"],
        }
    )  # fmt: skip
    excess = int(table["default_minus_autoattack"].max())
    checks = {
        label: [c.name for c in r.summary.checks if c.status == "fail"]
        for label, r in (("default", values["default"]), ("pgd", values["pgd"]), ("autoattack", aa))
    }
    result = {
        "benchmark": NAME,
        "title": "B9 default strength: autoattack-fast vs pgd vs autoattack, end to end",
        "question": "Robust accuracy and end-to-end time of the default attack next to PGD-20 and today's autoattack.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "checkpoint": checkpoint},
        "machine": {**B.machine(), "load_avg_1min_before": round(load_before, 2)},
        "targets": {
            "time ratio default/pgd": B.target(t_default / t_pgd, 3.0),
            "max robust examples over autoattack per cell": B.target(excess, 1),
        },
        "notes": [
            f"models {', '.join(cfg['models'])} (checkpoint={checkpoint}), eps {list(cfg['eps'])}, "
            f"{cfg['n_examples']} examples, seed {seed}; one thread. Every side is evaluate() end to end; "
            f"default and pgd interleaved ({cfg['reps']} each, median), autoattack once.",
            f"failed sanity checks: {checks}",
            f"1-min load average {load_before:.1f} before, {B.machine()['load_avg_1min']:.1f} after.",
        ],
    }
    tables = {"robust examples per cell (of n) and the default's ledger": table, "wall time": timing}
    return B.finish(NAME, result, tables, out)


if __name__ == "__main__":
    B.cli(run)
