"""Seeds: the range a user's seed may take, and seeds derived from it that stay in that range.

A seed is a whole number in [0, 2^63): numpy, torch and every generator robfilt seeds take it as it is, and
Parquet and JSON record it exactly. Seeds derived from it (one per training step, per model, per unit) are reduced
into the same range, so no derived value overflows torch's 64-bit seed for any seed a user may give. For the seeds
used in practice (below 2^40) the reduction changes nothing, so earlier runs keep their numbers.
"""

from __future__ import annotations

from typing import Any

from .errors import RobfiltError
from .surface import flag

SEED_LIMIT = 2**63


def check_seed(value: Any, name: str = "seed") -> int:
    """``value`` as a seed, or a one-line refusal naming the option (``--seed`` / ``seed``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise RobfiltError(f"{flag(name)} must be a whole number in [0, 2^63), got {value!r}.")
    if not 0 <= value < SEED_LIMIT:
        raise RobfiltError(f"{flag(name)} must be a whole number in [0, 2^63), got {value}.")
    return value


def derived_seed(seed: int, factor: int, offset: int = 0) -> int:
    """``seed * factor + offset``, reduced into [0, 2^63) (unchanged whenever it is already inside)."""
    return (int(seed) * int(factor) + int(offset)) % SEED_LIMIT


__all__ = ["SEED_LIMIT", "check_seed", "derived_seed"]
