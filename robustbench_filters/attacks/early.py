"""torchattacks' PGD with per-example early exit, restarts and an exact per-example compute ledger.

An example whose current point is misclassified leaves the batch at once and keeps that point as its adversarial
example; the rest go on. For an attack whose per-example trajectory does not depend on its batch-mates (PGD,
APGD: every step, step size and checkpoint is per example), this gives the same set of broken examples as running
every step on every example and keeping any misclassified iterate, and it spends nothing on examples already
broken. With ``early_stop=False`` (and one restart) each class computes exactly what its torchattacks parent
computes (the same adversarials, bit for bit, under the same seed); that is tested. APGD is in :mod:`.apgd`.

Each call leaves a :class:`Ledger` on the attack: the forward and backward passes the model ran for each example
(one batch row through the model is one pass), counted where the loop calls the model, never estimated.

With early exit PGD keeps the first point that fooled an example, where torchattacks returns the last iterate
(which may have stopped fooling it): so it breaks the examples any iterate broke, never fewer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
import torchattacks
from torch import nn

from ..checks.logits import margin
from .ledger import Ledger


class _EarlyPGDMixin:
    """The PGD loop of torchattacks' PGD (Linf) / PGDL2, with early exit, restarts and the ledger."""

    eps: float
    alpha: float
    steps: int
    random_start: bool
    device: torch.device
    get_logits: Callable[[torch.Tensor], torch.Tensor]

    def __init__(
        self,
        model: nn.Module,
        eps: float,
        alpha: float,
        steps: int,
        random_start: bool = True,
        *,
        early_stop: bool = True,
        loss: str = "ce",
        restarts: int = 1,
    ) -> None:
        """The torchattacks parent's arguments (it comes next in the MRO), then the early-exit settings."""
        super().__init__(model, eps=eps, alpha=alpha, steps=steps, random_start=random_start)  # type: ignore[call-arg]
        if loss not in ("ce", "margin"):
            raise ValueError(f"unknown PGD loss {loss!r}")
        self.early_stop, self.loss_kind, self.restarts = early_stop, loss, restarts
        self.ledger: Ledger | None = None

    def _start(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _step(self, x: torch.Tensor, adv: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _cost(self, logits: torch.Tensor, y: torch.Tensor, n0: int) -> torch.Tensor:
        if not self.early_stop and self.loss_kind == "ce":
            return nn.CrossEntropyLoss()(logits, y)  # torchattacks' loss, as it computes it
        # With early exit the batch shrinks: the sum over the call's first batch size gives every example exactly
        # the gradient the full batch's mean would give it.
        # the margin loss to maximise: the best other logit minus the true one (> 0: fooled)
        per = F.cross_entropy(logits, y, reduction="none") if self.loss_kind == "ce" else -margin(logits, y)
        return per.sum() / n0

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        images = images.clone().detach().to(self.device)
        labels = labels.clone().detach().to(self.device)
        self.ledger = Ledger(len(images), images.device)
        out = images.clone()
        alive = torch.ones(len(images), dtype=torch.bool, device=images.device)
        for r in range(self.restarts):
            rows = alive.nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            adv, broken = self._single(images[rows], labels[rows], rows, judge_last=r < self.restarts - 1)
            out[rows] = adv  # broken examples keep the point that fooled them, the others this run's last iterate
            alive[rows[broken]] = False
        return out

    def _single(
        self, x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor, judge_last: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One run from a random start: its points and which of them are known to fool the model.

        ``judge_last``: also classify the last iterates (one forward pass each), as a further restart needs.
        """
        assert self.ledger is not None
        n0 = len(x)
        adv = self._start(x)
        broken = torch.zeros(n0, dtype=torch.bool, device=x.device)
        act = torch.arange(n0, device=x.device)  # the examples still attacked
        for _ in range(self.steps):
            cur = (adv[act] if self.early_stop else adv).detach()
            cur.requires_grad = True
            logits = self.get_logits(cur)
            ys = y[act] if self.early_stop else y
            grad = torch.autograd.grad(self._cost(logits, ys, n0), cur, retain_graph=False, create_graph=False)[0]
            self.ledger.add(rows[act], fwd=1, bwd=1)
            if not self.early_stop:
                adv = self._step(x, cur.detach(), grad)
                continue
            hit = logits.detach().argmax(1) != ys
            if bool(hit.any()):  # fooled at this point: it stays the example's adversarial, the example leaves
                broken[act[hit]] = True
                keep = ~hit
                act, cur, grad = act[keep], cur[keep], grad[keep]
                if act.numel() == 0:
                    return adv, broken
            adv[act] = self._step(x[act], cur.detach(), grad)
        if judge_last:
            with torch.no_grad():
                fooled = self.get_logits(adv[act]).argmax(1) != y[act]
            self.ledger.add(rows[act], fwd=1)
            broken[act[fooled]] = True
        return adv, broken


class EarlyPGD(_EarlyPGDMixin, torchattacks.PGD):
    """torchattacks.PGD (Linf) with early exit, random restarts, an optional margin loss and the ledger."""

    def _start(self, x: torch.Tensor) -> torch.Tensor:
        adv = x.clone().detach()
        if self.random_start:
            adv = adv + torch.empty_like(adv).uniform_(-self.eps, self.eps)
            adv = torch.clamp(adv, min=0, max=1).detach()
        return adv

    def _step(self, x: torch.Tensor, adv: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        adv = adv + self.alpha * grad.sign()
        delta = torch.clamp(adv - x, min=-self.eps, max=self.eps)
        return torch.clamp(x + delta, min=0, max=1).detach()


class EarlyPGDL2(_EarlyPGDMixin, torchattacks.PGDL2):
    """torchattacks.PGDL2 with early exit, restarts, the ledger and a defined eps = 0 (the ball is x itself:
    torchattacks' projection divides 0 by 0 there)."""

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.eps == 0:
            self.ledger = Ledger(len(images), images.device)
            return images.clone().detach().to(self.device)
        return super().forward(images, labels)

    def _start(self, x: torch.Tensor) -> torch.Tensor:
        adv = x.clone().detach()
        if self.random_start:
            delta = torch.empty_like(adv).normal_()
            d_flat = delta.view(adv.size(0), -1)
            n = d_flat.norm(p=2, dim=1).view(adv.size(0), 1, 1, 1)
            r = torch.zeros_like(n).uniform_(0, 1)
            delta *= r / n * self.eps
            adv = torch.clamp(adv + delta, min=0, max=1).detach()
        return adv

    def _step(self, x: torch.Tensor, adv: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        b = len(x)
        grad_norms = torch.norm(grad.view(b, -1), p=2, dim=1) + self.eps_for_division
        grad = grad / grad_norms.view(b, 1, 1, 1)
        adv = adv + self.alpha * grad
        delta = adv - x
        delta_norms = torch.norm(delta.view(b, -1), p=2, dim=1)
        factor = torch.min(self.eps / delta_norms, torch.ones_like(delta_norms))
        delta = delta * factor.view(-1, 1, 1, 1)
        return torch.clamp(x + delta, min=0, max=1).detach()
