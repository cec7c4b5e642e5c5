"""B9 default strength: the default attack against AutoAttack's reference settings and ``pgd``, on robust models.

Question: does the default reach the strength of ``autoattack-standard`` (AutoAttack's standard version at the
reference settings: APGD-CE 100 steps, APGD-T and FAB-T 9 targets x 100 steps, Square 5000 queries) on models
trained to be robust as well as on normally trained ones, at a fraction of its cost?

Models: the adversarially trained zoo DeiTs ``deit-at`` and ``deit-grc-at``, the robust CNN of
``benchmarks/robust_cnn.py`` (where the gap of a cheap default showed first) and the normally trained zoo ``deit``
and ``deit-grc``; two Linf eps each, where robust accuracy lies between 20% and 60%; 256 test examples (seed 0).
The default was tuned on these; ``B9_SET=unseen`` runs the same cells on a model it was not tuned on (another
architecture and training recipe, ``benchmarks/robust_bn.py``) and writes ``b9_default_strength_unseen``.
Every cell (model, eps) runs each attack as one end-to-end ``evaluate`` at that eps alone (models and data loaded,
the sanity checks, the default's convergence check, the run folder), once, in one batch of 256 (the reference's
attacks call the model thousands of times on the few examples left; one batch makes them half as many calls).

Per cell it prints robust examples, model passes (forward + backward rows, the compute ledger; the default's
include its convergence check, and how many rounds its escalation ran) and wall time of each attack. Targets, in
every cell: the default leaves at most ``autoattack-standard`` + max(1 example, 0.5% of n) robust, at no more than
1/10 of its passes. The ratio of the default's passes and time to ``pgd``'s is printed without a target.

The reference's passes and robust count are deterministic, and it costs 5-60 CPU minutes per cell, so a full run
keeps each cell's result in ``b9_reference.json`` keyed by the reference's code identity (:func:`reference_key`:
the source of the modules that compute it, its components as built, torch and torchattacks versions, the model's
weights and the cell's settings); a later run takes it from there unless something in the key changed
(``B9_RECOMPUTE=1`` recomputes anyway). Its wall time is then the one measured when it was stored.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torchattacks

from benchmarks import _common as B
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks import apgd, standard
from robustbench_filters.attacks.catalogue import ATTACKS, DEFAULT_IMAGE_ATTACK, AttackParams
from robustbench_filters.configs import ImageAttackConfig
from robustbench_filters.core.io import atomic_write_json
from robustbench_filters.models.loading import load_model
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
BN = f"{Path(__file__).resolve().parent / 'robust_bn.py'}:robust_bn"
#: the models the default was not tuned on (B9_SET=unseen): another architecture and training recipe
#: (benchmarks/robust_bn.py), at two eps where robust accuracy lies between 20% and 60%
UNSEEN: tuple[tuple[str, tuple[float, ...]], ...] = ((f"bn-at={BN}", (0.1, 0.15)),)
FULL = {"cells": CELLS, "n_examples": 256, "batch_size": 256, "steps": None}
SMOKE = {"cells": (("deit", (0.05,)),), "n_examples": 8, "batch_size": 8, "steps": None}
PASS_SHARE = 0.1  # the default's passes, at most this share of the reference's
#: the reference's stored results per cell, keyed by :func:`reference_key` (full runs only)
CACHE = Path(__file__).resolve().with_name("b9_reference.json")


class _Rounds(logging.Handler):
    """Counts the default's escalation rounds: the cascade logs one debug line per rerun round."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.rounds = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().split(": rerun round ")[1:]:
            self.rounds = max(self.rounds, int(record.args[2]))  # type: ignore[index]


def _cell(model: str, eps: float, attack: str, cfg: dict[str, Any], seed: int, device: str) -> dict[str, Any]:
    """One attack on one model at one eps, end to end: robust count, passes (the default's with its convergence
    check), time, and the convergence check's verdict."""
    config = ImageAttackConfig(
        models=(model,), attacks=(attack,), eps=(eps,), n_examples=cfg["n_examples"], seed=seed, steps=cfg["steps"],
        batch_size=cfg["batch_size"], device=device,
    )  # fmt: skip
    counter, cascade_log = _Rounds(), logging.getLogger("robustbench_filters.attacks.cascade")
    level = cascade_log.level
    cascade_log.addHandler(counter)
    cascade_log.setLevel(logging.DEBUG)
    try:
        seconds, result = B.timed(lambda: evaluate(config=config), B.resolve_device(device))
    finally:
        cascade_log.removeHandler(counter)
        cascade_log.setLevel(level)
    summary = result.summary
    (label, results), *_ = summary.models.items()
    (entry,) = results.robust
    conv, cost = present(entry.convergence, {}), present(entry.cost, {})
    passes = cost["fwd"] + cost["bwd"] + conv.get("fwd", 0.0) + conv.get("bwd", 0.0)
    checks = [c for c in summary.checks if c.name == f"attack converged ({attack})"]
    return {"label": label, "n": entry.n, "robust": entry.correct, "passes": passes, "seconds": seconds,
            "conv": f"{conv.get('broken', 0)}/{conv.get('checked', 0)}" if conv else "-",
            "conv_status": checks[0].status if checks else "-", "rounds": counter.rounds,
            "failed": [c.name for c in summary.checks if c.status == "fail"]}  # fmt: skip


def _settings(fn: Any) -> list[Any]:
    """A built component's class and scalar settings (steps, restarts, targets, queries, eps, seed, ...)."""
    atk = fn if isinstance(fn, torchattacks.attack.Attack) else fn.attack  # within_ball wraps FAB
    scalars = sorted((k, repr(v)) for k, v in vars(atk).items() if isinstance(v, int | float | str | bool))
    return [type(atk).__name__, scalars]


def reference_key(model: str, eps: float, cfg: dict[str, Any], seed: int) -> str:
    """The reference's code identity for one cell: the source of the modules that compute it (its builder and the
    APGD loop; the cascade and ledger around it are checked to give byte-identical rows by the tests), its
    components as built at this cell (class and settings), torch and torchattacks versions, the model's weights
    and the cell's settings. Anything else may change without changing its result."""
    loaded = load_model(model)
    weights = hashlib.sha256()
    for name, tensor in sorted(loaded.module.state_dict().items()):
        weights.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    params = AttackParams(eps=eps, norm=ATTACKS[REFERENCE].default_norm, steps=cfg["steps"], step_size=None,
                          seed=seed, n_classes=10)  # fmt: skip
    components = [[name, *_settings(fn)] for name, fn in ATTACKS[REFERENCE].build(loaded.module, params)]
    identity = {
        "sources": [hashlib.sha256(inspect.getsource(m).encode()).hexdigest() for m in (standard, apgd)],
        "components": components, "torch": torch.__version__, "torchattacks": torchattacks.__version__,
        "weights": weights.hexdigest(), "eps": eps, "seed": seed,
        **{k: cfg[k] for k in ("n_examples", "batch_size", "steps")},
    }  # fmt: skip
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _row(eps: float, got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One cell's line of the table: robust counts, passes, times and the ratios."""
    d, p, r = got[DEFAULT_IMAGE_ATTACK], got["pgd"], got[REFERENCE]
    return {
        "model": d["label"], "eps": eps, "n": d["n"],
        "default_robust": d["robust"], "standard_robust": r["robust"], "pgd_robust": p["robust"],
        "excess": d["robust"] - r["robust"], "allowed": max(1, int(0.005 * d["n"])),
        "default_passes": round(d["passes"]), "standard_passes": round(r["passes"]), "pgd_passes": round(p["passes"]),
        "pass_share": round(d["passes"] / max(r["passes"], 1), 3),
        "default_s": round(d["seconds"], 1), "pgd_s": round(p["seconds"], 1),
        "standard_s": None if r["seconds"] is None else round(r["seconds"], 1),
        "passes_vs_pgd": round(d["passes"] / max(p["passes"], 1), 2),
        "time_vs_pgd": round(d["seconds"] / max(p["seconds"], 1e-9), 2),
        "rounds": d["rounds"], "convergence": f"{d['conv']} {d['conv_status']}",
        "reference": r.get("stored", "measured now"),
    }  # fmt: skip


def _attacks(
    model: str, eps: float, cfg: dict[str, Any], seed: int, device: str, stored: dict[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """The three attacks on one cell, in one process (the reference's ``stored`` result when given)."""
    got = {a: _cell(model, eps, a, cfg, seed, device) for a in (DEFAULT_IMAGE_ATTACK, "pgd")}
    got[REFERENCE] = stored if stored is not None else _cell(model, eps, REFERENCE, cfg, seed, device)
    return got


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    """Every cell; ``B9_WORKERS`` (environment, default 1) cells at once, each in its own process with the
    thread count the benchmark runs under (the passes do not depend on it; the times are then measured side by
    side with the other cells)."""
    unseen = os.environ.get("B9_SET") == "unseen"
    cfg = B.settings({**FULL, "cells": UNSEEN} if unseen else FULL, SMOKE, smoke, reps)
    name = f"{NAME}_unseen" if unseen and not smoke else NAME
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
    cache = json.loads(CACHE.read_text()) if CACHE.exists() and not smoke else {}
    keys = [reference_key(m, e, cfg, seed) for m, e in todo]
    fresh = os.environ.get("B9_RECOMPUTE") == "1" or smoke
    stored = [None if fresh else cache.get(k) for k in keys]
    if workers == 1:
        results = [_attacks(m, e, cfg, seed, device, st) for (m, e), st in zip(todo, stored, strict=True)]
    else:
        models, grid = [m for m, _ in todo], [e for _, e in todo]
        rest = ([cfg] * len(todo), [seed] * len(todo), [device] * len(todo), stored)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_attacks, models, grid, *rest))
    if not smoke:
        for (m, e), key, got in zip(todo, keys, results, strict=True):
            if key not in cache or fresh:
                when = B.machine()["when"]
                cache[key] = {**got[REFERENCE], "model": m.split("=", 1)[0], "eps": e,
                              "stored": f"measured {when[:10]}"}  # fmt: skip
        atomic_write_json(CACHE, cache)
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
        "benchmark": name,
        "title": f"B9 default strength: {DEFAULT_IMAGE_ATTACK} vs {REFERENCE} vs pgd, "
        + ("on a model it was not tuned on" if unseen else "robust and normal models"),
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
            f"autoattack-standard passes (target <= {PASS_SHARE}); rounds: the default's escalation rounds (its "
            "last is the convergence check); passes_vs_pgd and time_vs_pgd have no target.",
            "reference: the cell's autoattack-standard result measured now, or stored by an earlier run with the "
            "same code identity (benchmarks/b9_reference.json; its passes and robust count are deterministic, its "
            "time is that run's).",
            f"failed sanity checks: {failed or 'none'}",
            f"1-min load average {load_before:.1f} before, {B.machine()['load_avg_1min']:.1f} after.",
        ],
    }
    return B.finish(name, result, {"robust examples, passes and time per cell": table}, out)


if __name__ == "__main__":
    B.cli(run)
