"""Complete verification of small-input models by branch and bound on the input box.

The bound is incomplete alone (a relaxation can fail to verify a robust example). Splitting the box along its
widest coordinate and bounding each piece closes the gap when the input has few dimensions: the smallest lower
bound over the pieces rises to the exact minimum of the margin, while the margin at the pieces' centres falls to
it. :func:`min_margin` returns that bracket; the tests compare it with a MILP's exact minimum, and a verified set
from it must equal the exact one. (Images have too many dimensions for this; it is a check of the engine.)
"""

from __future__ import annotations

import heapq

import torch

from .domain import Domain
from .graph import Graph
from .propagate import Cost
from .verify import Settings, margin_bounds


def min_margin(
    graph: Graph,
    lo: torch.Tensor,
    hi: torch.Tensor,
    y: int,
    t: int,
    *,
    tol: float = 1e-6,
    max_boxes: int = 20000,
    batch: int = 64,
    settings: Settings | None = None,
) -> tuple[float, float]:
    """``(lower, upper)`` with ``lower <= min over the box of z_y - z_t <= upper`` and ``upper - lower <= tol``
    unless ``max_boxes`` pieces were bounded first. ``lo``, ``hi``: the box (K,)."""
    settings = settings or Settings("crown", refresh="none")
    dt = graph.dtype
    lo, hi = lo.to(dt).reshape(-1), hi.to(dt).reshape(-1)

    def bound(boxes: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[list[float], list[float]]:
        blo = torch.stack([b[0] for b in boxes])
        bhi = torch.stack([b[1] for b in boxes])
        ys = torch.full((len(boxes),), y, dtype=torch.long)
        low = margin_bounds(graph, Domain(blo, bhi), ys, settings, Cost(graph.macs()))[:, t]
        centre = graph.with_margin(ys)((blo + bhi) / 2)[:, t]
        return low.tolist(), centre.tolist()

    low, up = bound([(lo, hi)])
    best = up[0]
    heap = [(low[0], 0, lo, hi)]
    count, seen = 1, 1
    while heap and count < max_boxes:
        if best - heap[0][0] <= tol:
            break
        take = [heapq.heappop(heap) for _ in range(min(batch, len(heap)))]
        pieces = []
        for _, _, a, b in take:
            k = int(torch.argmax(b - a))
            m = (a[k] + b[k]) / 2
            b1, a2 = b.clone(), a.clone()
            b1[k], a2[k] = m, m
            pieces += [(a, b1), (a2, b)]
        low, up = bound(pieces)
        count += len(pieces)
        best = min(best, *up)
        for lb, (a, b) in zip(low, pieces, strict=True):
            if lb < best:  # a piece whose lower bound is above a point already found cannot hold the minimum
                seen += 1
                heapq.heappush(heap, (lb, seen, a, b))
    lower = heap[0][0] if heap else best
    return min(lower, best), best
