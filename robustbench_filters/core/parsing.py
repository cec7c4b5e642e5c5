"""Parsers for CLI option values, shared by the library (specs) and the CLI.

Each parser raises :class:`RobfiltError` with a one-line message naming the bad value and the fix.
Fractions such as ``8/255`` are accepted wherever a number is, so eps is never on the wrong scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from .errors import RobfiltError


def parse_number(text: str, what: str = "value") -> float:
    """'0.03' -> 0.03, '8/255' -> 0.0313..., rejecting NaN, inf and malformed fractions."""
    s = str(text).strip()
    if not s:
        raise RobfiltError(f"empty {what}; give a number such as 0.03 or 8/255.")
    try:
        if "/" in s:
            num, den = (Fraction(part.strip()) for part in s.split("/", 1))
            if den == 0:
                raise ZeroDivisionError
            value = float(num / den)
        else:
            value = float(s)
    except ZeroDivisionError:
        raise RobfiltError(f"{what} {s!r} divides by zero; give a number such as 8/255.") from None
    except (ValueError, OverflowError):
        raise RobfiltError(f"{what} {s!r} is not a number; give a number such as 0.03 or 8/255.") from None
    if not math.isfinite(value):
        raise RobfiltError(f"{what} {s!r} is not finite; give a finite number.")
    return value


def parse_list(text: str, item: Callable[[str], object], what: str) -> list:
    """Comma-separated list; empty items (',' or 'a,,b') are errors, not silently dropped."""
    s = str(text).strip()
    parts = [p.strip() for p in s.split(",")]
    if not s or any(not p for p in parts):
        raise RobfiltError(f"{what} {text!r} has an empty item; give a comma-separated list like 'a,b'.")
    return [item(p) for p in parts]


def parse_numbers(
    text: str,
    what: str,
    lo: float | None = None,
    hi: float | None = None,
    hi_inclusive: bool = True,
) -> list[float]:
    """A list of numbers, each within [lo, hi] (or [lo, hi) when ``hi_inclusive`` is false)."""
    values = parse_list(text, lambda p: parse_number(p, what), what)
    low = "-inf" if lo is None else f"{lo:g}"
    high = "inf" if hi is None else f"{hi:g}"
    bracket = "]" if hi_inclusive and hi is not None else ")"
    for v in values:
        if lo is not None and v < lo:
            raise RobfiltError(f"{what} {v:g} is below {low}; use values in [{low}, {high}{bracket}.")
        if hi is not None and (v > hi or (not hi_inclusive and v >= hi)):
            raise RobfiltError(f"{what} {v:g} is outside the allowed range [{low}, {high}{bracket}.")
    return values


def parse_names(text: str, what: str, choices: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """A list of names; with ``choices``, unknown names get close-match suggestions."""
    from .errors import unknown

    names = parse_list(text, str, what)
    if choices is not None:
        for n in names:
            if n not in choices:
                raise unknown(what, n, choices)
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated is not None:
        raise RobfiltError(f"{what} lists {repeated!r} twice; list each value once.")
    return names
