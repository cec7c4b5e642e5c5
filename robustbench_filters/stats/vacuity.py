"""When a certified Lipschitz number is vacuous: one rule for the summary, the terminal, the report, the gate and
the study (no torch; everything here reads the rows of a ``lipschitz`` run).

A certified upper bound U and the rigorous lower bound L measured next to it (L <= true constant <= U) bracket the
model's constant. When U is more than :data:`FACTOR` (1e6) times L, the bracket spans more than six decades: the
bound then says nothing about the model that the lower bound does not, and the radius it certifies is more than a
million times smaller than the one the measured sensitivity supports. Such a number is **vacuous**:

- an **upper bound** is vacuous when it exceeds 1e6 times the largest rigorous lower bound it must dominate: the
  certified global constant against the largest per-example lower bound of the run, a local constant on
  B(x0, rho) against that example's own lower bound, a block's constants against that block's empirical gains;
- a **certified radius** r is vacuous when it is below 1e-6 times the radius the lower bound would give,
  ``min(rho, margin / (sqrt(2) lower))``. A small radius that is not vacuous is a finding (the example sits close
  to its decision boundary), not a failure of the bound, so radii are never judged against the data range alone;
- an **aggregate** over examples (the median local constant, the mean radius) is vacuous when at least half of
  its examples are, so a median drawn from vacuous values never reads like a result;
- where no positive lower bound was measured (lower <= 0 or missing), nothing is judged (None).

Why 1e6: the lower bounds are tight (exact Jacobian norms, or power iteration and pair ratios that converge to
them), so U / L is the bound's slack up to a small factor. Composing even *exact* per-layer Jacobian norms already
costs up to 5.4 decades on the zoo DeiTs (the layerwise estimate of ``robfilt lipschitz --gap``), so an honest
layer-composition bound must be allowed about that much, and six decades is the first round factor above it. For
radii, 1e-6 of the default rho = 0.1 is 1e-7 in [0, 1] pixel units: the float32 rounding of a pixel near 1
(spacing 6e-8) and four decades below one 8-bit grey level (1/255), so a vacuous radius certifies no image other
than x0 itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the command line imports this module at start-up, where pandas is too heavy
    import pandas as pd

FACTOR = 1e6  # six decades between a certified number and the measured value it certifies
RULE = (
    "vacuous: a certified upper bound above 1e6 x the rigorous lower bound it must dominate (global: the largest "
    "over the examples; local: the same example; blocks: the block's gain), or a certified radius below 1e-6 x "
    "min(rho, margin / (sqrt(2) lower)); a median or mean over examples is vacuous when at least half of its "
    "examples are"
)
#: the rule in one sentence, for table captions
SHORT = (
    "vacuous = a certified bound more than 1e6 × the rigorous lower bound it certifies (medians: for at least half "
    "of the examples), or a certified radius below 1e-6 × the radius that lower bound gives"
)
UPPER_TEXT = "> 1e6 × lower"
RADIUS_TEXT = "< 1e-6 × empirical radius"


def _array(values: Iterable[float] | float) -> np.ndarray:
    return np.atleast_1d(np.asarray(values, dtype=float))


def upper_flags(upper: Iterable[float] | float, lower: Iterable[float] | float) -> np.ndarray:
    """Per value: 1.0 vacuous, 0.0 not, NaN not judged (no bound, or no positive finite lower bound)."""
    u, lo = np.broadcast_arrays(_array(upper), _array(lower))
    judged = ~np.isnan(u) & np.isfinite(lo) & (lo > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        vac = u > FACTOR * lo
    return np.where(judged, vac.astype(float), np.nan)


def radius_reference(margin, lower, rho) -> np.ndarray:
    """The radius the measured lower bound would give, min(rho, margin / (sqrt(2) lower)) (not certified)."""
    m, lo, r = np.broadcast_arrays(_array(margin), _array(lower), _array(rho))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.minimum(r, m / (math.sqrt(2.0) * lo))


def radius_flags(radius, margin, lower, rho) -> np.ndarray:
    """Per example: 1.0 vacuous, 0.0 not, NaN not judged (no radius, no margin or no positive lower bound)."""
    r, m, lo, _ = np.broadcast_arrays(_array(radius), _array(margin), _array(lower), _array(rho))
    ref = radius_reference(m, lo, rho)
    judged = np.isfinite(r) & np.isfinite(m) & np.isfinite(lo) & (lo > 0) & ~np.isnan(ref)
    with np.errstate(invalid="ignore"):
        vac = r < ref / FACTOR
    return np.where(judged, vac.astype(float), np.nan)


def aggregate(flags: np.ndarray) -> bool | None:
    """An aggregate over examples is vacuous when at least half of the judged examples are; None if none is."""
    judged = flags[~np.isnan(flags)]
    if not len(judged):
        return None
    return bool(2 * judged.sum() >= len(judged))


def single(flags: np.ndarray) -> bool | None:
    """One value's flag as a JSON-ready boolean (None: not judged)."""
    return None if np.isnan(flags[0]) else bool(flags[0])


def _finite_max(values: pd.Series) -> float:
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return float(v.max()) if len(v) else math.nan


def _global(upper: pd.Series, lower: pd.Series) -> bool | None:
    """The certified global constant (constant across the rows; +inf counts) against the largest lower bound."""
    u = upper.to_numpy(dtype=float)
    u = u[~np.isnan(u)]
    if not len(u):
        return None
    return single(upper_flags(float(u.max()), _finite_max(lower)))


def model_vacuity(rows: pd.DataFrame) -> dict[str, bool | None]:
    """The model rows of one model -> which of its certified numbers are vacuous (keys as in the summary)."""
    out = {
        "global_upper_vacuous": _global(rows["global_upper"], rows["lower"]),
        "local_upper_vacuous": aggregate(upper_flags(rows["local_upper"], rows["lower"])),
        "radius_vacuous": None,
    }
    if {"radius", "margin", "rho"} <= set(rows.columns):
        out["radius_vacuous"] = aggregate(radius_flags(rows["radius"], rows["margin"], rows["lower"], rows["rho"]))
    return out


def block_vacuity(rows: pd.DataFrame) -> dict[str, bool | None]:
    """The rows of one block of one model (``lower`` = the block's empirical gain) -> its vacuous constants."""
    return {
        "global_upper_vacuous": _global(rows["global_upper"], rows["lower"]),
        "local_upper_vacuous": aggregate(upper_flags(rows["local_upper"], rows["lower"])),
    }


def log10_vacuous(log_upper: float | None, log_lower: float | None) -> bool | None:
    """Medians on a log10 scale (the gap tables): vacuous when the bound is more than six decades above."""
    if log_upper is None or log_lower is None or not (math.isfinite(log_lower) and not math.isnan(log_upper)):
        return None
    return bool(log_upper - log_lower > math.log10(FACTOR))


def label(text: str, vacuous: bool | None, kind: str = "upper") -> str:
    """``text`` (a formatted number) as shown: ``vacuous (3e+91 > 1e6 × lower)`` when vacuous, else unchanged.

    ``kind``: ``upper`` (a bound), ``radius`` (``vacuous (1e-18; < 1e-6 × empirical radius)``), or ``log`` (a log10
    median, whose table states the rule)."""
    if not vacuous:
        return text
    if kind == "log":
        return f"vacuous ({text})"
    if kind == "radius":  # mostly a mean, which the vacuous majority need not dominate: the reason stands apart
        return f"vacuous ({text}; {RADIUS_TEXT})"
    return f"vacuous ({text} {UPPER_TEXT})"
