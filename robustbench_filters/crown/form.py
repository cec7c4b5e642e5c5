"""The linear-bound object: a node's value as a linear function of the input plus an interval constant.

Every relaxation in this package has *equal slopes* for its lower and upper bound (a linearisation plus an
interval error: a chord and the tangent parallel to it, McCormick's midpoint plane for a product, ...). The bound
of a node is then one linear map and an interval,

    value(x) in A x + [mid - err, mid + err]      for every x in the input domain,

(``A``: (B, K, *shape), ``mid`` and ``err >= 0``: (B, *shape)), rather than two separate linear maps. Two forms of
the same node computed along different routes share ``A`` (it is the Jacobian of the network linearised at the
relaxations' slopes), so they can be intersected constant by constant (:meth:`LinearForm.meet`), and a
back-substitution (:mod:`.propagate`) only needs to recompute the constants.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .domain import Domain
from .interval import Interval, widen


@dataclass
class LinearForm:
    """``value(x) in a @ x + [mid - err, mid + err]``; ``a`` is None when only the constants are kept."""

    a: torch.Tensor | None
    mid: torch.Tensor
    err: torch.Tensor

    def bounds(self, domain: Domain) -> Interval:
        """Elementwise bounds over ``domain`` (widened outward for rounding)."""
        if self.a is None:
            raise ValueError("a form without its linear part cannot be concretised")
        part = domain.concretize(self.a)
        lo, hi = widen(part.lo + self.mid - self.err, part.hi + self.mid + self.err, self.mid.abs() + self.err)
        return Interval(lo, hi)

    def meet(self, mid: torch.Tensor, err: torch.Tensor) -> LinearForm:
        """Intersect the constant interval with another one valid for the same ``a``."""
        lo = torch.maximum(self.mid - self.err, mid - err)
        hi = torch.minimum(self.mid + self.err, mid + err)
        hi = torch.maximum(hi, lo)  # equal up to rounding when both are exact; never an empty interval
        return LinearForm(self.a, (lo + hi) / 2, (hi - lo) / 2)


def input_form(domain: Domain, shape: tuple[int, ...]) -> LinearForm:
    """The input itself: ``A`` = identity over the K input coordinates, no constant."""
    b, k = domain.lo.shape
    eye = torch.eye(k, dtype=domain.lo.dtype, device=domain.lo.device)
    a = eye.expand(b, k, k).reshape(b, k, *shape)
    zero = torch.zeros((b, *shape), dtype=domain.lo.dtype, device=domain.lo.device)
    return LinearForm(a, zero, zero.clone())
