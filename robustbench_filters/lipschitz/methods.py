"""The closed vocabulary of lower-bound methods, shared by the library and the CLI."""

from __future__ import annotations

from enum import Enum

from ..errors import unknown


class Method(str, Enum):
    """How the per-example lower bound is computed (all are rigorous lower bounds, notes §3.1)."""

    EXACT = "exact"  # dense per-example Jacobian + float64 SVD (small outputs)
    POWER = "power"  # batched jvp/vjp power iteration on J^T J
    RATIO = "ratio"  # pair-ratio ascent ||f(x) - f(x')|| / ||x - x'|| on the ball B(x, rho)


def parse_method(value: str | Method) -> Method:
    """'power' -> Method.POWER; an unknown name raises with close-match suggestions."""
    if isinstance(value, Method):
        return value
    try:
        return Method(str(value).strip().lower())
    except ValueError:
        raise unknown("method", str(value), [m.value for m in Method]) from None
