"""The compute ledger: forward and backward passes spent on each example, counted where the model is called.

One batch row through the model is one pass. robfilt's own attack loops (:mod:`.early`) count per example as
they call the model and leave a :class:`Ledger` on the attack. Any other attack (torchattacks' FGSM, FAB,
Square, CW, a user's) runs on a :class:`CountingModel`, which counts every call's rows: when each call took the
attack's whole batch the count per example is exact (FAB's, given only examples still standing); an attack that
calls the model on subsets it picks itself (Square) cannot be attributed to examples from outside, so its exact
total is spread evenly over its batch and the rows say so (``cost_exact`` false).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Ledger:
    """Passes per example, on the device: forward and backward (``fwd``, ``bwd``), those of the convergence check
    (``conv_fwd``, ``conv_bwd``) and whether each count is exact. One attack call keeps int64 counts of its own
    loop's passes; the cascade keeps one float64 ledger per eps (a :class:`CountingModel`'s share can be
    fractional) and writes it into the rows (:meth:`columns`)."""

    def __init__(self, n: int, device: torch.device | None, dtype: torch.dtype = torch.int64) -> None:
        self.fwd, self.bwd, self.conv_fwd, self.conv_bwd = (
            torch.zeros(n, dtype=dtype, device=device) for _ in range(4)
        )
        self.exact = torch.ones(n, dtype=torch.bool, device=device)

    def charge(self, rows: torch.Tensor, fwd: torch.Tensor, bwd: torch.Tensor, exact: bool, check: bool) -> None:
        """A component's passes per example of ``rows`` (distinct): the convergence check's when ``check``."""
        if check:
            self.conv_fwd[rows] += fwd
            self.conv_bwd[rows] += bwd
            return
        self.fwd[rows] += fwd
        self.bwd[rows] += bwd
        self.exact[rows] &= exact

    def columns(self) -> dict[str, torch.Tensor]:
        """The rows' ledger columns."""
        return {"fwd": self.fwd, "bwd": self.bwd, "conv_fwd": self.conv_fwd, "conv_bwd": self.conv_bwd,
                "cost_exact": self.exact}  # fmt: skip

    def add(self, rows: torch.Tensor | None, fwd: int = 0, bwd: int = 0) -> None:
        """Count ``fwd``/``bwd`` passes for each example in ``rows`` (None: every example)."""
        if rows is None:
            self.fwd += fwd
            self.bwd += bwd
        else:
            self.fwd.index_add_(0, rows, torch.full_like(rows, fwd))
            self.bwd.index_add_(0, rows, torch.full_like(rows, bwd))


class CountingModel(nn.Module):
    """``model`` itself, counting the rows of every forward call and of every backward pass through its output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        # A new module starts in training mode; torchattacks restores whatever mode it finds, on the whole model.
        self.train(model.training)
        self.fwd_rows: list[int] = []
        self.bwd_rows: list[int] = []

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.model(x, *args, **kwargs)
        self.fwd_rows.append(len(x))
        if out.requires_grad:
            out.register_hook(lambda grad, n=len(x): self.bwd_rows.append(n))
        return out

    def reset(self) -> None:
        self.fwd_rows, self.bwd_rows = [], []

    def per_example(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """(forward, backward) passes per example of a call on ``n`` examples, and whether they are exact."""
        exact = all(r == n for r in self.fwd_rows + self.bwd_rows)
        fwd, bwd = sum(self.fwd_rows), sum(self.bwd_rows)
        per = (len(self.fwd_rows), len(self.bwd_rows)) if exact else (fwd / max(n, 1), bwd / max(n, 1))
        return (torch.full((n,), float(per[0]), dtype=torch.float64, device=device),
                torch.full((n,), float(per[1]), dtype=torch.float64, device=device), exact)  # fmt: skip


def component_cost(
    fn: Any, counter: CountingModel, n: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The passes one attack component spent on each of its ``n`` examples: its own ledger when it keeps one,
    else what the counting model saw."""
    ledger = getattr(fn, "ledger", None)
    if isinstance(ledger, Ledger):
        return ledger.fwd.double(), ledger.bwd.double(), True
    return counter.per_example(n, device)
