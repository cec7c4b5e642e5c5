"""How a perturbation budget reads: one formatter for every table, figure axis and terminal line.

Papers state L-inf budgets on the 8-bit grid ("8/255"), so a budget that is k/255 (within float tolerance: a
budget that went through float32 or a JSON round trip still counts) prints as such; every other budget prints
with 3 significant digits ("0.00196", "0.25"). A short decimal such as 0.2 or 0.4 is exactly 51/255 or 102/255,
but nobody means that: it stays a decimal. The same budget therefore never appears as "1/255" in one place and
"0.0039215686" in another.

This module imports nothing heavy (the CLI's console tables use it), so it must stay free of pandas and
matplotlib. Condition keys that are parsed back into numbers (``pgd@0.0019607843`` in gates and metrics) need
all digits and use :func:`eps_key` instead.
"""

from __future__ import annotations

import math

GRID = 255  # the 8-bit pixel grid
GRID_TOL = 1e-4  # |eps * 255 - k| below this counts as k/255 (float32 keeps ~1e-7 relative)


def grid_step(eps: float) -> int | None:
    """k when ``eps`` is k/255 for a whole k >= 1 (and not a short decimal like 0.2), else None."""
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0 or eps >= 1 or math.isclose(eps, round(eps, 4), rel_tol=1e-9):
        return None  # a short decimal, also with float noise (an axis tick at 0.1 * 6 = 0.6000000000000001)
    k = eps * GRID
    return round(k) if round(k) >= 1 and abs(k - round(k)) < GRID_TOL else None


def eps_text(eps: float) -> str:
    """'0', 'k/255' where the budget is one, otherwise 3 significant digits ('0.00196', '0.03', '1')."""
    eps = float(eps)
    if eps == 0:
        return "0"
    k = grid_step(eps)
    return f"{k}/{GRID}" if k is not None else f"{eps:.3g}"


def eps_key(eps: float) -> str:
    """A budget in a condition key ('pgd@8/255', 'pgd@0.0019607843'): k/255 where it is one, else every digit
    needed to parse it back (:func:`robustbench_filters.core.parsing.parse_number` reads both)."""
    eps = float(eps)
    if eps == 0:
        return "0"
    k = grid_step(eps)
    if k is not None and abs(eps * GRID - k) < 1e-6:  # parsed back, k/255 must land within a key's tolerance
        return f"{k}/{GRID}"
    return f"{eps:.8g}"


def on_grid(eps: list[float] | tuple[float, ...]) -> bool:
    """True when every non-zero budget is k/255 (then an axis can say so once, in its label)."""
    nonzero = [float(e) for e in eps if float(e) != 0]
    return bool(nonzero) and all(grid_step(e) is not None for e in nonzero)


__all__ = ["GRID", "eps_key", "eps_text", "grid_step", "on_grid"]
