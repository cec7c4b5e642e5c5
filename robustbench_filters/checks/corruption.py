"""Checks on corruption runs: severity 0 is the identity, corrupted images stay in [0, 1], distance grows."""

from __future__ import annotations

import pandas as pd

from .base import FAIL, PASS, WARN, Check, model_rows


def check_severity0(label: str, max_move: float, pred_changed: int, n: int) -> Check:
    """Severity 0 of every corruption is the identity: no pixel moves, no prediction changes."""
    if max_move == 0.0 and pred_changed == 0:
        return Check("severity 0 equals clean", label, PASS, f"{n} images unchanged by every corruption")
    return Check("severity 0 equals clean", label, FAIL, f"max move {max_move:.2e}, {pred_changed} predictions changed")


def check_corruption_box(rows: pd.DataFrame, model: str) -> Check | None:
    """Corrupted images stay finite and inside [0, 1]."""
    sub = model_rows(rows, model, "contamination")
    if sub.empty:
        return None
    bad = int((~sub.in_box).sum())
    if bad:
        return Check("corrupted inputs in [0,1]", model, FAIL, f"{bad} corrupted images outside [0,1] or non-finite")
    return Check("corrupted inputs in [0,1]", model, PASS, f"{len(sub)} corrupted images checked")


def check_severity_distance(rows: pd.DataFrame, model: str) -> Check | None:
    """Mean L2 distance to the clean image grows with severity for every corruption (a harness check)."""
    sub = model_rows(rows, model, "contamination")
    if sub.empty:
        return None
    bad = []
    for attack, grp in sub.groupby("attack"):
        d = grp.groupby("eps").pert_norm.mean().sort_index()
        if (d.diff().dropna() <= 0).any():
            bad.append(attack)
    if bad:
        return Check("distance grows with severity", model, WARN, f"not increasing for {', '.join(bad)}")
    return Check("distance grows with severity", model, PASS, "increasing for every corruption")
