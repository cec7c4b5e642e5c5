"""Composition rules for residual and boosting (GRC) sublayers (notes/lipschitz.md §1.1, rules C4 and C5).

A boosting sublayer computes Y_{l+1} = (1 - lambda) Y_l + F(Y_l) + lambda Y_0 with Y_0 = E(u). With L_l the
constant of u -> Y_l and L_E that of u -> Y_0, the triangle inequality gives

    L_{l+1} <= (1 - lambda + L_F) L_l + lambda L_E,

which is *not* a plain product: Y_0 re-enters at every sublayer. lambda = 0 is the stock residual rule
L_{l+1} <= (1 + L_F) L_l. Both are exact when every map is a positive multiple of the identity (for a constant
alpha = 1 - lambda + L_F != 1 the recursion sums to L_E (alpha^L + lambda (alpha^L - 1) / (alpha - 1))).
"""

from __future__ import annotations

from typing import TypeVar

import torch

T = TypeVar("T", float, torch.Tensor)


def residual_step(l_prev: T, l_f: T, lam: float = 0.0, l_e: T | float = 0.0) -> T:
    """One sublayer: (1 - lambda + L_F) L_prev + lambda L_E (lambda in [0, 1); 0 = plain residual)."""
    return (1.0 - lam + l_f) * l_prev + lam * l_e
