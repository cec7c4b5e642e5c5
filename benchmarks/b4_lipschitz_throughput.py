"""B4 Lipschitz throughput: the empirical estimators vs the dense-Jacobian reference, and certified-bound time.

Question: how many examples per second do the per-example lower-bound estimators process, compared with the
exact dense Jacobian + SVD they are checked against, and what does the certified upper bound cost per model?
``power`` (jvp/vjp power iteration) costs two passes per iteration whatever the output width; ``exact`` costs one
vjp per output, so the answer depends on the output width: 10 logits for DeiT, the vocabulary for the LM.
No target: this benchmark reports. Settings follow ``robfilt lipschitz`` defaults (float64 on CPU, float32 on GPU,
50 power iterations, tol 1e-5, 13 radii for the local bound).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch

from benchmarks import _common as B
from robustbench_filters.configs import LipschitzConfig
from robustbench_filters.lipschitz.certify import trace_bounds
from robustbench_filters.lipschitz.data import load_inputs
from robustbench_filters.lipschitz.jacobian import jacobian_norm_exact, jacobian_norm_power
from robustbench_filters.lipschitz.ratio import pair_ratio_ascent
from robustbench_filters.lipschitz.run import RHO_GRID_DECADES, _load_model
from robustbench_filters.lipschitz.target import make_target
from robustbench_filters.runs.units import select_examples

NAME = "b4_lipschitz_throughput"
FULL = {"n": 16, "reps": 3, "warmup": 1, "estimator_models": ["deit", "lm"],
        "bound_models": ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc", "lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]}  # fmt: skip
SMOKE = {"n": 2, "reps": 2, "warmup": 0, "estimator_models": ["deit"], "bound_models": ["deit", "deit-bsa-grc"]}
RHO, ITERS, TOL, RATIO_STEPS, SEQ_LEN = 0.1, 50, 1e-5, 20, 64


def _target(name: str, n: int, seed: int, device: torch.device):
    checkpoint = B.pick_checkpoint(name)
    dtype = torch.float64 if device.type == "cpu" else torch.float32  # robfilt lipschitz's defaults
    data = None if checkpoint == "zoo" or name.startswith("deit") else "synthetic"
    config = LipschitzConfig(
        models=(name,), size="micro", checkpoint=checkpoint, seed=seed, data=data, n_examples=n, seq_len=SEQ_LEN
    )
    target = make_target(_load_model(config.refs[0], config), dtype=dtype, device=device)
    inputs = load_inputs(target, config, lambda total, k: select_examples(total, k, seed, ordered=False))
    return target, target.inputs(inputs.x), checkpoint, data or "default"


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    device = B.resolve_device(device)
    n = cfg["n"]
    est_rows, bound_rows = [], []
    for name in cfg["estimator_models"]:
        target, x, checkpoint, data = _target(name, n, seed, device)
        gen = torch.Generator()

        def power(target=target, x=x, gen=gen):
            return jacobian_norm_power(target, x, iters=ITERS, tol=TOL, generator=gen.manual_seed(seed))

        def ratio(target=target, x=x, gen=gen):
            p = jacobian_norm_power(target, x, iters=10, tol=TOL, generator=gen.manual_seed(seed))
            return pair_ratio_ascent(target, x, RHO, steps=RATIO_STEPS, direction=p.v, box=target.box, generator=gen)

        fns = {"exact": lambda target=target, x=x: jacobian_norm_exact(target, x), "power": power, "ratio": ratio}
        times, values = B.interleaved(fns, cfg["reps"], device, cfg["warmup"])
        exact = values["exact"]
        for method in fns:
            t = B.median(times[method])
            lower = values[method].sigma if method == "power" else values[method]
            est_rows.append(
                {
                    "model": name,
                    "checkpoint": checkpoint,
                    "outputs": int(target(x[:1]).shape[1]),
                    "method": method,
                    "examples_per_s": round(n / t, 2),
                    "speedup_vs_exact": round(B.median(times["exact"]) / t, 3),
                    "median_lower/exact": round(float((lower / exact).median()), 4),
                    "power_iterations": values["power"].iterations if method == "power" else "",
                }
            )
    rhos = [RHO * 10 ** (-k / 2) for k in range(2 * RHO_GRID_DECADES + 1)]
    for name in cfg["bound_models"]:
        target, x, checkpoint, _ = _target(name, n, seed, device)
        times, values = B.interleaved({"bounds": lambda t=target, x=x: trace_bounds(t, x, rhos)}, cfg["reps"], device,
                                      cfg["warmup"])  # fmt: skip
        t = B.median(times["bounds"])
        bound_rows.append(
            {
                "model": name,
                "checkpoint": checkpoint,
                "batch": n,
                "bound_s_per_batch": round(t, 4),
                "bound_ms_per_example": round(1000 * t / n, 2),
                "global_upper": f"{float(values['bounds'].global_upper):.3g}",
            }
        )
    est, bounds = pd.DataFrame(est_rows), pd.DataFrame(bound_rows)
    result = {
        "benchmark": NAME,
        "title": "B4 Lipschitz throughput: empirical estimators vs dense Jacobian, and certified-bound time",
        "question": "Examples/s of power iteration and pair-ratio ascent vs exact dense Jacobian + SVD; bound time.",
        "mode": "smoke" if smoke else "full",
        "settings": {
            **cfg,
            "rho": RHO,
            "power_iters": ITERS,
            "tol": TOL,
            "ratio_steps": RATIO_STEPS,
            "seq_len": SEQ_LEN,
            "dtype": str(x.dtype).removeprefix("torch."),
            "device": str(device),
        },  # fmt: skip
        "machine": B.machine(),
        "targets": {},
        "notes": [
            f"batch of {n} examples per model, {str(x.dtype).removeprefix('torch.')} on {device}, interleaved, median of {cfg['reps']} repetitions.",
            "median_lower/exact: power bounds the Jacobian norm at x0 from below (<= 1, ~1 when converged); ratio "
            "bounds the local constant on B(x0, rho), which may exceed the Jacobian norm at x0 (> 1 is allowed).",
            "LM inputs are the token embeddings of synthetic token ids when no trained checkpoint is present.",
        ],
    }
    tables = {"lower-bound estimators": est, "certified bounds (trace_bounds, 13 radii)": bounds}
    return B.finish(NAME, result, tables, out)


if __name__ == "__main__":
    B.cli(run)
