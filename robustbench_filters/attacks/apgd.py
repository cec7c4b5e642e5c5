"""torchattacks' APGD and APGD-T with per-example early exit and the compute ledger (see :mod:`.early`).

The loop below is torchattacks' ``attack_single_run`` in named parts (shared by APGD and APGD-T); with
``early_stop=False`` it computes exactly what torchattacks computes (tested bit for bit). Bookkeeping (step sizes,
checkpoints, best points) stays on the whole batch, as torchattacks keeps it; with early exit only the model's
forward and backward passes shrink to the examples not yet fooled, and a fooled example keeps the first point that
fooled it (torchattacks keeps the last; the set of fooled examples is the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torchattacks
from torch import nn

from .abandon import Abandon
from .ledger import Ledger

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def _random_start(atk: torchattacks.APGD, x: torch.Tensor) -> torch.Tensor:
    """A uniform point of the ball's surface direction, scaled to eps (torchattacks' draw, in its order)."""
    dev = atk.device
    if atk.norm == "Linf":
        t = 2 * torch.rand(x.shape).to(dev).detach() - 1
        x_adv = x.detach() + atk.eps * torch.ones([x.shape[0], 1, 1, 1]).to(dev).detach() * t / (
            t.reshape([t.shape[0], -1]).abs().max(dim=1, keepdim=True)[0].reshape([-1, 1, 1, 1])
        )
    else:
        t = torch.randn(x.shape).to(dev).detach()
        x_adv = x.detach() + atk.eps * torch.ones([x.shape[0], 1, 1, 1]).to(dev).detach() * t / (
            (t**2).sum(dim=(1, 2, 3), keepdim=True).sqrt() + 1e-12
        )
    return x_adv.clamp(0.0, 1.0)


def _l2_project(atk: torchattacks.APGD, x: torch.Tensor, point: torch.Tensor, slack: float) -> torch.Tensor:
    """``point`` pulled back into the L2 ball around x and into [0, 1] (``slack``: torchattacks adds 1e-12 to the
    norm in the second of its two projections, not in the first)."""
    delta = point - x
    norm = (delta**2).sum(dim=(1, 2, 3), keepdim=True).sqrt()
    radius = torch.min(atk.eps * torch.ones(x.shape).to(atk.device).detach(), norm + slack)
    return torch.clamp(x + delta / (norm + 1e-12) * radius, 0.0, 1.0)


def _momentum_step(
    atk: torchattacks.APGD, x: torch.Tensor, x_adv: torch.Tensor, moved: torch.Tensor, grad: torch.Tensor,
    step_size: torch.Tensor, a: float,
) -> torch.Tensor:  # fmt: skip
    """APGD's step: a projected gradient step, then momentum ``a`` towards it (``moved``: the last step taken).
    ``step_size`` is per example, or the first example's (torchattacks' L2 APGD-T rule)."""
    if atk.norm == "Linf":
        x_adv_1 = x_adv + step_size * torch.sign(grad)
        x_adv_1 = torch.clamp(torch.min(torch.max(x_adv_1, x - atk.eps), x + atk.eps), 0.0, 1.0)
        return torch.clamp(
            torch.min(torch.max(x_adv + (x_adv_1 - x_adv) * a + moved * (1 - a), x - atk.eps), x + atk.eps), 0.0, 1.0
        )
    x_adv_1 = x_adv + step_size * grad / ((grad**2).sum(dim=(1, 2, 3), keepdim=True).sqrt() + 1e-12)
    x_adv_1 = _l2_project(atk, x, x_adv_1, 0.0)
    x_adv_1 = x_adv + (x_adv_1 - x_adv) * a + moved * (1 - a)
    return _l2_project(atk, x, x_adv_1, 1e-12)


class _StepSizes:
    """APGD's step-size schedule (Croce & Hein 2020, Algorithm 1): at checkpoints that come closer together, an
    example whose loss oscillated, or did not improve since a halving, gets half the step and restarts from its
    best point."""

    def __init__(self, atk: torchattacks.APGD, x: torch.Tensor, loss_best: torch.Tensor) -> None:
        self.atk, n = atk, x.shape[0]
        self.steps_min, self.size_decr = max(int(0.06 * atk.steps), 1), max(int(0.03 * atk.steps), 1)
        self.k = max(int(0.22 * atk.steps), 1)
        self.size = (
            atk.eps * torch.ones([n, 1, 1, 1]).to(atk.device).detach()
            * torch.Tensor([2.0]).to(atk.device).detach().reshape([1, 1, 1, 1])
        )  # fmt: skip
        self.loss_steps = torch.zeros([atk.steps, n])
        self.u, self.counter = np.arange(n), 0
        self.best_last_check = loss_best.clone()
        self.reduced_last_check = np.zeros(loss_best.shape) == np.zeros(loss_best.shape)

    def update(self, i: int, loss: torch.Tensor, best: _Best, x_adv: torch.Tensor, grad: torch.Tensor) -> None:
        """Record step ``i``'s losses; at a checkpoint, halve and reset the oscillating examples (in place)."""
        self.loss_steps[i] = loss.cpu() + 0
        self.counter += 1
        if self.counter != self.k:
            return
        fl_oscillation = self.atk.check_oscillation(
            self.loss_steps.detach().cpu().numpy(), i, self.k, best.loss.detach().cpu().numpy(), k3=self.atk.thr_decr
        )
        fl_reduce_no_impr = (~self.reduced_last_check) * (self.best_last_check.cpu().numpy() >= best.loss.cpu().numpy())
        fl_oscillation = ~(~fl_oscillation * ~fl_reduce_no_impr)
        self.reduced_last_check = np.copy(fl_oscillation)
        self.best_last_check = best.loss.clone()
        if np.sum(fl_oscillation) > 0:
            self.size[self.u[fl_oscillation]] /= 2.0
            fl_oscillation = np.where(fl_oscillation)
            x_adv[fl_oscillation] = best.x[fl_oscillation].clone()
            grad[fl_oscillation] = best.grad[fl_oscillation].clone()
        self.counter = 0
        self.k = np.maximum(self.k - self.size_decr, self.steps_min)


class _Best:
    """The highest-loss point of each example so far, with its gradient and loss."""

    def __init__(self, x_adv: torch.Tensor, grad: torch.Tensor, loss: torch.Tensor) -> None:
        self.x, self.grad, self.loss = x_adv.detach().clone(), grad.clone(), loss.detach().clone()

    def update(self, x_adv: torch.Tensor, grad: torch.Tensor, loss: torch.Tensor) -> None:
        ind = (loss > self.loss).nonzero().squeeze()
        self.x[ind] = x_adv[ind].clone()
        self.grad[ind] = grad[ind].clone()
        self.loss[ind] = loss[ind] + 0


class _Gradients:
    """Logits, per-example loss and input gradient (EOT-averaged), counted in the ledger; with ``act`` only those
    rows are computed and the others keep their previous logits and loss (and get a zero gradient)."""

    def __init__(self, atk: torchattacks.APGD, y: torch.Tensor, rows: torch.Tensor, loss_fn: LossFn,
                 y_target: torch.Tensor | None) -> None:  # fmt: skip
        self.atk, self.y, self.rows, self.loss_fn, self.y_target = atk, y, rows, loss_fn, y_target

    def __call__(
        self, x_adv: torch.Tensor, act: torch.Tensor | None, logits_prev: torch.Tensor | None,
        loss_prev: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        atk, y, eot = self.atk, self.y, self.atk.eot_iter
        grad = torch.zeros_like(x_adv)
        if act is None:
            x_adv.requires_grad_()
            for _ in range(eot):
                with torch.enable_grad():
                    logits = atk.get_logits(x_adv)
                    loss_indiv = self.loss_fn(logits, y, self.y_target)
                    loss = loss_indiv.sum()
                grad += torch.autograd.grad(loss, [x_adv])[0].detach()
            atk.ledger.add(self.rows, fwd=eot, bwd=eot)
        else:
            assert logits_prev is not None and loss_prev is not None
            logits, loss_indiv = logits_prev.clone(), loss_prev.clone()
            xa = x_adv[act].detach().requires_grad_()
            yt = None if self.y_target is None else self.y_target[act]
            for _ in range(eot):
                with torch.enable_grad():
                    la = atk.get_logits(xa)
                    li = self.loss_fn(la, y[act], yt)
                grad[act] += torch.autograd.grad(li.sum(), [xa])[0].detach()
                logits[act], loss_indiv[act] = la.detach(), li.detach()
            atk.ledger.add(self.rows[act], fwd=eot, bwd=eot)
        grad /= float(eot)
        return logits, loss_indiv, grad


def _apgd_run(atk: torchattacks.APGD | torchattacks.APGDT, x_in: torch.Tensor, y_in: torch.Tensor,
              rows: torch.Tensor, loss_fn: LossFn, y_target: torch.Tensor | None, first_step_size: bool,
              group: torch.Tensor | None = None, abandon: Abandon | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """One APGD run from a random start: (best-loss points, still correct, best loss, fooling points).

    torchattacks' ``attack_single_run`` in named parts (start, momentum step, gradients, best points, step-size
    schedule), each computing what its lines computed, in the same order of random draws.
    ``first_step_size``: APGD-T's L2 step uses the first example's step size (torchattacks' rule, which makes an
    example's attack depend on its batch-mates); kept only without early exit, which needs every example's own.
    ``group``: rows that are copies of one example (parallel restarts or targets); with early exit, all copies of
    an example leave once one of them fools the model.
    ``abandon``: with early exit, the rows this rule gives up on at the run's midpoint leave too, unfooled, with
    their best points (:mod:`.abandon`; the default's long runs).
    """
    early: bool = atk.early_stop
    x = x_in.clone() if len(x_in.shape) == 4 else x_in.clone().unsqueeze(0)
    y = y_in.clone() if len(y_in.shape) == 1 else y_in.clone().unsqueeze(0)
    x_adv = _random_start(atk, x)
    x_best_adv = x_adv.clone()
    gradient = _Gradients(atk, y, rows, loss_fn, y_target)
    logits, loss_indiv, grad = gradient(x_adv, None, None, None)
    best = _Best(x_adv, grad, loss_indiv)
    schedule = _StepSizes(atk, x, best.loss)
    acc = logits.detach().max(1)[1] == y
    alive = acc.clone()  # early exit: the examples still attacked
    x_adv_old = x_adv.clone()
    rule = abandon if early and abandon is not None and abandon.applies(atk.steps) else None
    compare, decide = rule.steps_at(atk.steps) if rule is not None else (-1, -1)
    earlier = best.loss
    for i in range(atk.steps):
        act = alive.nonzero().squeeze(1) if early else None
        if act is not None and act.numel() == 0:
            break
        with torch.no_grad():
            x_adv = x_adv.detach()
            moved = x_adv - x_adv_old
            x_adv_old = x_adv.clone()
            size = schedule.size[0] if atk.norm != "Linf" and first_step_size and not early else schedule.size
            x_adv = _momentum_step(atk, x, x_adv, moved, grad, size, 0.75 if i > 0 else 1.0) + 0.0
        logits, loss_indiv, grad = gradient(x_adv, act, logits, loss_indiv)
        pred = logits.detach().max(1)[1] == y
        acc = torch.min(acc, pred)
        if act is None:
            x_best_adv[(pred == 0).nonzero().squeeze()] = x_adv[(pred == 0).nonzero().squeeze()] + 0.0
        else:
            hit = act[~pred[act]]
            x_best_adv[hit] = x_adv[hit] + 0.0
            alive[hit] = False
            if group is not None and hit.numel():
                alive &= ~torch.isin(group, group[hit])
        with torch.no_grad():
            y1 = loss_indiv.detach().clone()
            best.update(x_adv, grad, y1)
            schedule.update(i, y1, best, x_adv, grad)
            if i == compare:
                earlier = best.loss.clone()
            elif i == decide and rule is not None:
                alive &= ~rule.stops(atk.steps, earlier, best.loss)
    return best.x, acc, best.loss, x_best_adv


def _perturb(atk: EarlyAPGD | EarlyAPGDT, x_in: torch.Tensor, y_in: torch.Tensor,
             runs: list[Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]]) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """torchattacks' ``perturb(cheap=True)``: each run attacks the examples every earlier run left robust."""
    x = x_in.clone() if len(x_in.shape) == 4 else x_in.clone().unsqueeze(0)
    y = y_in.clone() if len(y_in.shape) == 1 else y_in.clone().unsqueeze(0)
    atk.ledger = Ledger(len(x), x.device)
    adv = x.clone()
    atk.clean_logits = atk.get_logits(x).detach()
    acc = atk.clean_logits.max(1)[1] == y
    atk.ledger.add(None, fwd=1)
    torch.random.manual_seed(atk.seed)
    torch.cuda.random.manual_seed(atk.seed)
    for run in runs:
        ind_to_fool = acc.nonzero().squeeze()
        if len(ind_to_fool.shape) == 0:
            ind_to_fool = ind_to_fool.unsqueeze(0)
        if ind_to_fool.numel() != 0:
            x_to_fool, y_to_fool = x[ind_to_fool].clone(), y[ind_to_fool].clone()
            _, acc_curr, _, adv_curr = run(x_to_fool, y_to_fool, ind_to_fool)
            ind_curr = (acc_curr == 0).nonzero().squeeze()
            acc[ind_to_fool[ind_curr]] = 0
            adv[ind_to_fool[ind_curr]] = adv_curr[ind_curr].clone()
    return acc, adv


def _perturb_parallel(atk: EarlyAPGD | EarlyAPGDT, x_in: torch.Tensor, y_in: torch.Tensor, loss_fn: LossFn,
                      targets: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Every run at once: each (target, restart) is a copy of every correctly classified example in one batch, and
    an example leaves when any copy fools the model. The same runs as :func:`_perturb` (per-example independent,
    each with its own random start), in ``steps`` model calls instead of ``steps`` per run: what a few examples
    need when the call, not the row, is what costs (small models, GPUs). Not torchattacks' order of draws."""
    x = x_in.clone() if len(x_in.shape) == 4 else x_in.clone().unsqueeze(0)
    y = y_in.clone() if len(y_in.shape) == 1 else y_in.clone().unsqueeze(0)
    atk.ledger = Ledger(len(x), x.device)
    adv = x.clone()
    clean = atk.get_logits(x).detach()
    atk.ledger.add(None, fwd=1)
    acc = clean.max(1)[1] == y
    torch.random.manual_seed(atk.seed)
    idx = acc.nonzero().squeeze(1)
    runs = [(t, r) for t in (targets or [None]) for r in range(atk.n_restarts)]
    if idx.numel() == 0:
        return acc, adv
    m, k = len(idx), len(runs)
    rows = idx.repeat(k)  # copy-major: run c holds rows c*m .. (c+1)*m - 1
    y_target = None
    if targets is not None:
        order = clean[idx].sort(dim=1)[1]
        y_target = torch.cat([order[:, -t] for t, _ in runs])
    _, acc_c, _, adv_c = _apgd_run(atk, x[rows], y[rows], rows, loss_fn, y_target, False, group=rows)
    for c in reversed(range(k)):  # the first run that fooled an example gives its adversarial
        fooled = ~acc_c[c * m : (c + 1) * m]
        adv[idx[fooled]] = adv_c[c * m : (c + 1) * m][fooled]
        acc[idx[fooled]] = False
    return acc, adv


class EarlyAPGD(torchattacks.APGD):
    """torchattacks.APGD (CE or DLR loss, restarts) with early exit and the ledger; ``parallel`` runs the restarts
    as copies in one batch (:func:`_perturb_parallel`)."""

    def __init__(self, model: nn.Module, *, early_stop: bool = True, parallel: bool = False, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.early_stop, self.parallel = early_stop, parallel
        self.ledger: Ledger | None = None
        self.clean_logits = torch.empty(0)

    def _loss(self, logits: torch.Tensor, y: torch.Tensor, _: torch.Tensor | None) -> torch.Tensor:
        if self.loss == "ce":
            return nn.CrossEntropyLoss(reduction="none")(logits, y)
        if self.loss == "dlr":
            return self.dlr_loss(logits, y)
        raise ValueError("unknown loss")

    def perturb(self, x_in, y_in, best_loss=False, cheap=True):  # noqa: ANN001, ANN201 - torchattacks' signature
        assert self.norm in ["Linf", "L2"] and not best_loss and cheap
        if self.parallel:
            return _perturb_parallel(self, x_in, y_in, self._loss, None)

        def run(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor) -> tuple:
            return _apgd_run(self, x, y, rows, self._loss, None, first_step_size=False)

        return _perturb(self, x_in, y_in, [run] * self.n_restarts)


class EarlyAPGDT(torchattacks.APGDT):
    """torchattacks.APGDT (targeted DLR) with early exit, the ledger and ``n_targets`` targets: the classes with
    the highest clean logits after the top one (for a correctly classified example, those with the smallest
    margin to the true class). torchattacks takes every other class (``n_classes - 1``). ``parallel`` runs every
    (target, restart) as a copy in one batch (:func:`_perturb_parallel`)."""

    def __init__(
        self, model: nn.Module, *, n_targets: int | None = None, early_stop: bool = True, parallel: bool = False,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(model, **kwargs)
        if n_targets is not None:
            self.n_target_classes = n_targets
        self.early_stop, self.parallel = early_stop, parallel
        self.ledger: Ledger | None = None
        self.clean_logits = torch.empty(0)

    def perturb(self, x_in, y_in, best_loss=False, cheap=True):  # noqa: ANN001, ANN201 - torchattacks' signature
        assert self.norm in ["Linf", "L2"] and cheap
        if self.parallel:
            targets = list(range(2, self.n_target_classes + 2))
            return _perturb_parallel(self, x_in, y_in, self.dlr_loss_targeted, targets)

        def run_for(target_class: int) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]:
            def run(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor) -> tuple:
                self.target_class = target_class
                assert self.ledger is not None
                if self.early_stop:  # the clean logits perturb computed: the same rows, not computed again
                    output = self.clean_logits[rows]
                else:  # torchattacks computes them again for every run
                    output = self.get_logits(x)
                    self.ledger.add(rows, fwd=1)
                y_target = output.sort(dim=1)[1][:, -target_class]
                return _apgd_run(self, x, y, rows, self.dlr_loss_targeted, y_target, first_step_size=True)

            return run

        runs = [run_for(t) for t in range(2, self.n_target_classes + 2) for _ in range(self.n_restarts)]
        return _perturb(self, x_in, y_in, runs)
