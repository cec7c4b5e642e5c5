"""Per-layer profile: each block's empirical gain at the actual hidden states next to its certified constant.

For block l the measured map is h -> block_l(h) with Y_0 held fixed (boosting blocks): the same block map whose
certified constants :mod:`.certify` records. The empirical gain is ||J_block(h_l(x0))||_2 by power iteration
(a lower bound on the block's constant near h_l(x0)); next to it stand the block's constant on the ball
B(h_l(x0), r_l) that the input ball B(x0, rho) maps into (``local_upper``) and on all inputs
(``global_upper``). So lower <= local_upper <= global_upper holds per row, and the profile shows where along
the depth the certified bound loses its tightness.
"""

from __future__ import annotations

import pandas as pd
import torch

from .certify import BoundTrace
from .jacobian import jacobian_norm_power


def layer_profile(
    trace: BoundTrace,
    *,
    iters: int = 30,
    tol: float = 1e-5,
    generator: torch.Generator | None = None,
) -> pd.DataFrame:
    """One row per (example, block): layer, lower (empirical gain), local_upper, global_upper, iterations.

    Rows are in batch order; the caller adds model and example ids.
    """
    frames = []
    for rec in trace.blocks:
        power = jacobian_norm_power(rec.forward, rec.hidden, iters=iters, tol=tol, generator=generator)
        frames.append(
            pd.DataFrame(
                {
                    "batch_index": range(rec.hidden.shape[0]),
                    "layer": rec.name,
                    "lower": power.sigma.cpu().numpy(),
                    "local_upper": rec.local_upper.cpu().numpy(),
                    "global_upper": rec.global_upper,
                    "iterations": power.iterations,
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
