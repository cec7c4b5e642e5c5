"""The rows of one attacked batch: per example and eps, what the point does to the model and what it cost.

The eps cascade (:mod:`.cascade`) keeps its measurements on the model's device and copies them to the host once
per unit (:func:`to_host`); :func:`frame_rows` lays them out as the run's rows, and :func:`batch_rows` gives the
rows of a batch evaluated once (the clean pass).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..checks.logits import margin, predictions
from .catalogue import Norm


def perturbation_norm(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)


def row_stats(
    x: torch.Tensor, x_cur: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, norm: Norm
) -> dict[str, torch.Tensor]:
    """The per-example measurements, still on the model's device (copied to the host once per unit)."""
    finite = torch.isfinite(x_cur).flatten(1).all(1)
    in_box = finite & (x_cur.flatten(1).amin(1) >= 0) & (x_cur.flatten(1).amax(1) <= 1)
    return {
        "correct": predictions(logits) == y,  # a NaN row (guarded bad output) is no prediction, never class 0
        "pert_norm": perturbation_norm(x_cur - x, norm).detach(),
        "margin": margin(logits, y).detach(),
        "loss": F.cross_entropy(logits, y, reduction="none").detach(),
        "in_box": in_box,
    }


def to_host(
    per_eps: list[dict[str, torch.Tensor]], clean_correct: torch.Tensor
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """All of a unit's per-eps measurements in one device-to-host copy (float64 holds every value exactly)."""
    keys = list(per_eps[0])
    packed = torch.stack([torch.stack([stats[k].double() for k in keys]) for stats in per_eps])  # (eps, key, n)
    flat = torch.cat([packed.flatten(), clean_correct.double()]).cpu().numpy()
    host = flat[: packed.numel()].reshape(packed.shape)
    kinds = {"correct": bool, "in_box": bool, "cost_exact": bool, "fooled_code": np.int64, "conv_code": np.int64}
    out = {k: host[:, i].astype(kinds.get(k, np.float64)) for i, k in enumerate(keys)}
    return out, flat[packed.numel() :].astype(bool)


#: The convergence column: not in the checked subset, survived the stronger rerun, broken by it, or covered (it
#: survived the attack and its rerun at a larger eps of the grid, whose ball contains this one: :meth:`.cascade._Run.finish`).
CONVERGENCE = ("", "held", "broken", "covered")
HELD, COVERED = 1, 3


def frame_rows(
    label: str,
    ids: torch.Tensor,
    attack: str,
    eps: float,
    norm: Norm,
    stats: dict[str, np.ndarray],
    clean_correct: np.ndarray,
    fooled_by: list[str],
) -> pd.DataFrame:
    n = len(fooled_by)
    zeros = np.zeros(n)
    return pd.DataFrame(
        {
            "model": label,
            "example_id": ids.cpu().numpy().astype(np.int64),
            "kind": "adversarial",
            "attack": attack,
            "eps": float(eps),
            "norm": norm.value,
            "correct": stats["correct"],
            "clean_correct": clean_correct,
            "pert_norm": stats["pert_norm"].astype(np.float64),
            "margin": stats["margin"].astype(np.float64),
            "loss": stats["loss"].astype(np.float64),
            "in_box": stats["in_box"],
            "fooled_by": fooled_by,
            # the compute ledger: passes the model ran on this example at this eps (see attacks.ledger)
            "fwd": stats.get("fwd", zeros).astype(np.float64),
            "bwd": stats.get("bwd", zeros).astype(np.float64),
            "cost_exact": stats.get("cost_exact", np.ones(n, dtype=bool)).astype(bool),
            "convergence": [CONVERGENCE[c] for c in stats.get("conv_code", np.zeros(n, dtype=np.int64)).tolist()],
            "conv_fwd": stats.get("conv_fwd", zeros).astype(np.float64),
            "conv_bwd": stats.get("conv_bwd", zeros).astype(np.float64),
        }
    )


def batch_rows(
    label: str,
    ids: torch.Tensor,
    attack: str,
    eps: float,
    norm: Norm,
    x: torch.Tensor,
    x_cur: torch.Tensor,
    y: torch.Tensor,
    logits: torch.Tensor,
    clean_correct: torch.Tensor,
    fooled_by: list[str],
    fwd: int = 0,
) -> pd.DataFrame:
    """Rows of one batch evaluated once (``fwd``: the forward passes that took, per example)."""
    stats = {k: v.cpu().numpy() for k, v in row_stats(x, x_cur, y, logits, norm).items()}
    stats["fwd"] = np.full(len(y), float(fwd))
    return frame_rows(label, ids, attack, eps, norm, stats, clean_correct.cpu().numpy(), fooled_by)


__all__ = ["CONVERGENCE", "COVERED", "HELD", "batch_rows", "frame_rows", "perturbation_norm", "row_stats", "to_host"]
