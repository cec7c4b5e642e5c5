"""Targeted APGD on targets chosen per example: ranked by a linearised margin, escalated on the near misses.

AutoAttack's APGD-T attacks the 9 classes with the highest clean logits, 100 steps each, whatever the example. Most
of that budget is spent on long runs that cannot win: a robust example falls, if at all, to one class, and a few
steps on each target show which one comes close. Here the budget follows the evidence, per example:

1. **rank** the other classes by the linearised distance to each decision boundary at the clean point,
   ``(z_y - z_t) / ||grad_x (z_y - z_t)||_*`` (the dual norm of the threat model: L1 for Linf), the targeting of
   MALT (Melamed et al., NeurIPS 2024); the logit margin alone ignores how fast the margin can move;
2. **sweep**: a short APGD-T run on each of the ``max_targets`` closest targets (9, as many as AutoAttack attacks,
   but ranked by distance, which matters where there are more than 10 classes); all of an example's runs are
   copies in one batch, and it leaves as soon as one of them fools the model;
3. **escalate**: the survivors that came close in the sweep (a best targeted DLR loss of at least ``-near``; the
   loss is scale-free and positive once the target's logit passes the true one's) get a long run on the target
   that came closest, and on the next one when it came as close (``second``); a long run that ended closer still
   (``retry``) gets one more from a fresh start. The others are far from every boundary: long runs there are what
   made AutoAttack expensive without breaking anything (B9, docs/attacks.md). A long run gives up half way on a row
   whose loss, extrapolated from its recent gain, ends short of the boundary (``abandon``, :mod:`.abandon`).

Every run is :func:`.apgd._apgd_run` (torchattacks' APGD loop) on the targeted DLR loss, with early exit and the
ledger; the ranking's passes (one forward and one backward per ranked class) are counted too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .abandon import Abandon
from .apgd import EarlyAPGDT, _apgd_run
from .ledger import Ledger

#: classes ranked, at most (the closest by clean logit first): bounds the ranking's cost on 1000-class models
RANKED = 20


@dataclass(frozen=True)
class TargetPlan:
    """How many targets each example gets, and how long each is attacked."""

    sweep_steps: int = 4
    #: targets every example sweeps, the closest first (on deit-grc-at at Linf 0.125 a sweep of the 4+ closest left 3
    #: examples to the rerun's 9-target sweep, and a second, costlier round; docs/attacks.md)
    max_targets: int = 9
    #: one long run, not two half as long: APGD's step-size schedule needs the steps (the robust CNN, docs/attacks.md)
    escalate_steps: int = 100
    escalate_targets: int = 1
    #: near misses: a survivor is escalated when its best targeted DLR loss in the sweep is at least -near
    #: (the loss is scale-free and positive once the target's logit passes the true one's)
    near: float = 0.5
    #: a long run on the next target of the sweep too, when its loss came within ``second`` of the best (0: none):
    #: a 4-step sweep ranks close targets by chance (B9's deit at 0.025: the target that fell was the second)
    second: float = 0.15
    #: the closest misses: a long run that ended at a targeted DLR loss of at least -retry gets a second one from a
    #: fresh random start (0: none). Not in the rerun, whose one run of twice the steps is the stronger of the two
    #: (APGD's step-size schedule needs the steps: docs/attacks.md)
    retry: float = 0.1
    #: the rerun's near misses, judged on its own sweep of twice the steps, whose losses sit higher: every example a
    #: rerun's long run broke in B9's ten cells had reached -0.31 or more there
    rerun_near: float = 0.35
    restarts: int = 1  # of every sweep run
    escalate_restarts: int = 1
    #: the long runs give up half way on a row whose loss cannot reach the boundary in the steps left (None: never)
    abandon: Abandon | None = Abandon()

    def stronger(self, level: int = 1) -> TargetPlan:
        """The convergence check's rerun at ``level``: every target, the sweep's and the long runs' steps doubled
        ``level`` times (fresh random starts); its near misses are judged on its own sweep (:attr:`rerun_near`).
        Twice the steps, not also a restart more: on B9's ten cells the restart more broke one example in one cell
        and doubled the rerun's cost (docs/attacks.md)."""
        return replace(self, sweep_steps=self.sweep_steps * 2**level, escalate_steps=self.escalate_steps * 2**level,
                       near=self.rerun_near, retry=0.0)  # fmt: skip


def linearised_distances(
    model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor, dual: float, ranked: int = RANKED
) -> tuple[torch.Tensor, torch.Tensor]:
    """((n, classes) distances, the clean logits): ``(z_y - z_t) / ||grad (z_y - z_t)||_dual`` for the ``ranked``
    classes with the highest clean logits after the true one; inf elsewhere (the true class, the unranked). One
    forward and ``ranked`` backward passes per example."""
    xs = x.detach().clone().requires_grad_()
    with torch.enable_grad():
        z = model(xs).float()
        n, classes = z.shape
        others = z.detach().masked_fill(F.one_hot(y, classes).bool(), float("-inf"))
        cand = others.topk(min(ranked, classes - 1), dim=1).indices
        zy = z.gather(1, y[:, None]).squeeze(1)
        out = torch.full((n, classes), float("inf"), device=x.device)
        for j in range(cand.shape[1]):
            t = cand[:, j]
            diff = zy - z.gather(1, t[:, None]).squeeze(1)
            (g,) = torch.autograd.grad(diff.sum(), xs, retain_graph=j + 1 < cand.shape[1])
            size = g.flatten(1).norm(p=dual, dim=1)
            out.scatter_(1, t[:, None], (diff.detach() / (size + 1e-12))[:, None])
    return out, z.detach()


def in_play(distances: torch.Tensor, plan: TargetPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets ordered by distance, (n, max_targets); which of them each example attacks: every ranked one)."""
    k = min(plan.max_targets, int(torch.isfinite(distances).sum(1).max()) if len(distances) else 0)
    dist, order = distances.sort(dim=1)
    return order[:, :k], torch.isfinite(dist[:, :k])


@dataclass
class _Examples:
    """The examples of one call: images, labels, who is still correctly classified, and their points so far."""

    x: torch.Tensor
    y: torch.Tensor
    acc: torch.Tensor
    adv: torch.Tensor


@dataclass
class _Sweep:
    """What the sweep leaves for the escalation: the examples, their targets in order, which are in play, the best
    targeted loss each reached, and the random state the escalation continues from."""

    ex: _Examples
    order: torch.Tensor
    play: torch.Tensor
    reached: torch.Tensor
    rng: tuple[torch.Tensor, torch.Tensor | None]


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class RankedAPGDT(EarlyAPGDT):
    """APGD-T with per-example targets (:mod:`.targeted`): rank, sweep, escalate.

    ``defer``: :meth:`perturb` stops after the sweep and keeps its state; :meth:`escalate` runs the long runs later,
    on the examples the caller still wants (the eps cascade escalates an example only at the largest eps it
    survives, :mod:`.cascade`). The escalation continues the sweep's random state, so a deferred call gives what
    an undeferred one gives."""

    def __init__(self, model: nn.Module, *, plan: TargetPlan, **kwargs: Any) -> None:
        super().__init__(model, n_targets=plan.max_targets, n_restarts=plan.restarts, **kwargs)
        self.plan = plan
        self.dual = 1.0 if self.norm == "Linf" else 2.0
        self.defer = False
        self.pending: _Sweep | None = None
        #: which of the last call's examples the escalation gave long runs
        self.escalated: torch.Tensor | None = None

    def perturb(self, x_in, y_in, best_loss=False, cheap=True):  # noqa: ANN001, ANN201 - torchattacks' signature
        x, y = x_in.clone(), y_in.clone()
        plan = self.plan
        self.ledger = Ledger(len(x), x.device)
        torch.random.manual_seed(self.seed)
        distances, clean = linearised_distances(self.get_logits, x, y, self.dual)
        self.ledger.add(None, fwd=1, bwd=int(torch.isfinite(distances).sum(1).max()) if len(x) else 0)
        ex = _Examples(x, y, clean.argmax(1) == y, x.clone())
        order, play = in_play(distances, plan)
        # the sweep: every (example, target in play) pair at once, an example leaving when any of its copies fools
        pairs = play.nonzero()
        reached = torch.full(order.shape, float("-inf"), device=x.device)
        loss = self._runs(ex, pairs[:, 0], order[pairs[:, 0], pairs[:, 1]], plan.sweep_steps, plan.restarts)
        reached[pairs[:, 0], pairs[:, 1]] = loss
        sweep = _Sweep(ex, order, play, reached, _rng_state(x.device))
        if self.defer:
            self.pending = sweep
            return ex.acc.clone(), ex.adv.clone()
        return self._escalate(sweep, torch.ones_like(ex.acc))

    def escalate(self, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The deferred escalation on the last call's examples where ``keep``: (still correct, points), over all of
        that call's examples; its passes in a fresh ``ledger``, who got long runs in ``escalated``."""
        if self.pending is None:
            raise RuntimeError("escalate() needs a deferred perturb() first")
        sweep, self.pending = self.pending, None
        self.ledger = Ledger(len(sweep.ex.y), sweep.ex.x.device)
        _set_rng_state(sweep.rng, sweep.ex.x.device)
        return self._escalate(sweep, keep)

    def _escalate(self, sweep: _Sweep, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Long runs for the near misses (``keep`` of them) on the targets that came closest in the sweep."""
        plan, ex, order, play, reached = self.plan, sweep.ex, sweep.order, sweep.play, sweep.reached
        self.escalated = torch.zeros_like(ex.acc)
        if plan.escalate_targets and plan.escalate_steps and bool((ex.acc & keep).any()):
            near = ex.acc & keep & (reached.amax(1) >= -plan.near)
            k = plan.escalate_targets + (1 if plan.second else 0)
            top = reached.masked_fill(~play, float("-inf")).argsort(dim=1, descending=True)[:, :k]
            want = near[:, None] & play.gather(1, top)
            if plan.second and top.shape[1] > plan.escalate_targets:  # the next target too, when it came as close
                score = reached.gather(1, top)
                want[:, -1] &= (score[:, -1] >= score[:, 0] - plan.second) & (score[:, -1] >= -plan.near)
            rows, col = want.nonzero().unbind(1)
            self.escalated[rows] = True
            targets = order[rows, top[rows, col]]
            long = (plan.escalate_steps, plan.escalate_restarts, plan.abandon)
            ended = self._runs(ex, rows, targets, *long)
            if plan.retry:  # the closest misses after their long run: one more, from a fresh random start
                again = (ended >= -plan.retry) & ex.acc[rows]
                self._runs(ex, rows[again], targets[again], *long)
        return ex.acc, ex.adv

    def _runs(
        self, ex: _Examples, which: torch.Tensor, target: torch.Tensor, steps: int, restarts: int,
        abandon: Abandon | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """``restarts`` x ``steps``-step runs of every (example ``which[i]``, ``target[i]``) pair, as copies in one
        batch; an example leaves when any of its copies fools the model (a copy, when ``abandon`` gives up on it).
        Updates ``ex`` in place and returns each pair's highest targeted loss (the best over its restarts)."""
        best = torch.full((len(which),), float("-inf"), device=ex.x.device)
        live = ex.acc[which]
        if not bool(live.any()):
            return best
        self.steps = steps
        pair = live.nonzero().squeeze(1).repeat(restarts)  # restart-major copies of the live pairs
        rows = which[pair]
        _, acc_c, loss, adv_c = _apgd_run(
            self,
            ex.x[rows],
            ex.y[rows],
            rows,
            self.dlr_loss_targeted,
            target[pair],
            first_step_size=False,
            group=rows,
            abandon=abandon,
        )
        best.scatter_reduce_(0, pair, loss, reduce="amax")
        for c in (~acc_c).nonzero().squeeze(1).flip(0).tolist():  # the first copy that fooled an example wins
            ex.adv[rows[c]] = adv_c[c]
        ex.acc[rows[~acc_c]] = False
        return best
