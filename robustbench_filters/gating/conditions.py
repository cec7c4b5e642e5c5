"""How the gate names what a metric was measured under (its *condition*), and reads the name back.

``clean``, ``<attack>@<eps>`` (``pgd@0.02``, ``pgd@8/255``), ``certified:sigma<s>@<radius>`` (randomized
smoothing), ``verified@<eps>`` (bound propagation) and ``-`` (Lipschitz, which has none). Apart from
:mod:`.metrics` because every part of the gate (spec requirements, series, baselines, outcomes) spells and matches
conditions, while only some of it computes metrics.
"""

from __future__ import annotations

import math

from ..core.errors import RobfiltError
from ..core.parsing import parse_number
from ..stats import aggregates as A
from ..summaries import VERIFIED

#: certified-accuracy conditions: ``certified:sigma<s>@<radius>`` (see :func:`certified_condition`)
CERTIFIED = "certified"
#: verified-accuracy conditions: ``verified@<eps>`` (a verified run's Linf eps)
VERIFIED_CONDITION = VERIFIED
LIPSCHITZ_CONDITION = "-"


def condition(attack: str, eps: float) -> str:
    """'clean', or '<attack>@<eps>' with eps as papers print it (8/255 stays 8/255; parsed back exactly); a
    certified radius is a plain number ('certified:sigma0.25@1', never '255/255')."""
    if attack == A.CLEAN:
        return "clean"
    if attack.startswith(f"{CERTIFIED}:"):
        return f"{attack}@{float(eps):.8g}"
    return f"{attack}@{A.eps_label(float(eps))}"


def certified_attack(sigma: float) -> str:
    """The attack part of a certified-accuracy condition: 'certified:sigma0.25' (each sigma is its own classifier)."""
    return f"{CERTIFIED}:sigma{float(sigma):.8g}"


def certified_condition(sigma: float, radius: float) -> str:
    """'certified:sigma0.25@0.5': certified accuracy of the sigma-0.25 smoothed classifier at L2 radius 0.5."""
    return condition(certified_attack(sigma), radius)


def parse_condition(text: str) -> tuple[str, float | None]:
    """'pgd@0.02' -> ('pgd', 0.02); 'clean' -> ('clean', 0.0); '-' -> ('-', None)."""
    if text in ("clean", LIPSCHITZ_CONDITION):
        return text, (0.0 if text == "clean" else None)
    attack, sep, eps = text.rpartition("@")
    if not sep or not attack:
        raise RobfiltError(f"condition {text!r} is not 'clean', '-' or '<attack>@<eps>' (e.g. 'pgd@0.02').")
    return attack, parse_number(eps, f"eps in condition {text!r}")


def same_eps(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


__all__ = ["CERTIFIED", "LIPSCHITZ_CONDITION", "VERIFIED_CONDITION", "certified_attack", "certified_condition",
           "condition", "parse_condition", "same_eps"]  # fmt: skip
