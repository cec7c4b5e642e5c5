"""The eps cascade: attack one batch over an eps grid, largest eps first, skipping what a larger eps covered.

For one model, attack and batch, the eps values run in descending order. At each eps the attack runs on every
clean-correct example that did not hold at a larger eps, from its clean point: its first stages, then the
default's long runs on near misses and every checked attack's convergence check. An example that survived the
whole attack and its check at a larger eps held a search of a ball that contains this one; it is not attacked
again, and its rows at the smaller eps say ``covered``. So every example pays the full search once, at the
largest eps it survives, and at every larger eps only what breaking it costs (a few steps on a normally trained
model). Robust accuracy is non-increasing in eps by construction: an example is attacked at a smaller eps only if
a larger one broke it.

Why this order: run ascending (each eps attacking the survivors of the smaller one), an example robust at 0.02
paid the first stages at 0.005 and 0.01 too, where nothing broke it: 16% of the default's passes on the study's
grid, for the same outcome of every example at every eps (docs/attacks.md). One eps, as in B9, is unchanged.
Covering needs the check: an attack the run does not check (``pgd`` by default, ``fgsm``) runs ascending, each
eps on the survivors of the smaller one, so that its breaks count upward (a single FGSM step can overshoot at a
larger eps and land at a smaller one).

Ensembles (``apgd-adaptive``, ``autoattack-standard``, ``autoattack``) run their components in order on the
survivors, which keeps the per-example worst case. Each eps gets one row per example (correct, margin, loss,
perturbation norm, who fooled it) with its compute ledger (model passes spent on it there; :mod:`.ledger`) and,
for the attacks checked, the convergence check's verdict on it.

On a GPU the bookkeeping stays on the device and a unit's rows are copied to the host once; the only
host-device synchronisations left in our code are the survivor counts, one per eps and ensemble component,
which decide the next attack's batch, and with early exit one per attack step (who was fooled decides the next
step's batch). (torchattacks' own loops are out of our hands.)
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import torch
from torch import nn

from ..checks import ball_tolerance
from ..checks.convergence import RERUN, ROUNDS, allowed
from ..checks.logits import GuardedLogits, predictions
from ..runs.adversarial import AdversarialTrace
from ..runs.units import unit_seed
from .cascade_rows import CONVERGENCE, COVERED, HELD, batch_rows, frame_rows, perturbation_norm, row_stats, to_host
from .catalogue import AttackFn, AttackParams, Norm, get_attack
from .ledger import CountingModel, Ledger, component_cost

log = logging.getLogger(__name__)


@dataclass
class Step:
    """One component's result on the examples ``idx``: its points, the logits that decide "fooled", and its passes
    per example (``fwd`` includes that deciding forward pass)."""

    component: str
    idx: torch.Tensor
    x_adv: torch.Tensor
    logits: torch.Tensor
    fooled: torch.Tensor
    fwd: torch.Tensor
    bwd: torch.Tensor
    exact: bool


def run_components(
    built: list[tuple[str, AttackFn]],
    counter: CountingModel,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    eps: float,
    norm: Norm,
    minimum_norm: bool,
) -> Iterator[Step]:
    """Run an attack's components in order on the examples ``idx``, each on the survivors of the last."""
    for j, (component, fn) in enumerate(built):
        if len(idx) == 0:
            return
        xs, ys = x[idx], y[idx]
        counter.reset()
        x_adv = fn(xs, ys).detach()
        fwd, bwd, exact = component_cost(fn, counter, len(idx), x.device)
        if minimum_norm:
            # Minimum-norm attacks may return points outside the ball: those are not evidence at this eps.
            inside = perturbation_norm(x_adv - xs, norm) <= eps + ball_tolerance(eps)
            x_adv = torch.where(inside.view(-1, *[1] * (x.dim() - 1)), x_adv, xs)
        with torch.no_grad():
            adv_logits = model(x_adv).float()
        fooled = predictions(adv_logits) != ys  # a bad output (NaN row) is no prediction, never class 0
        yield Step(component, idx, x_adv, adv_logits, fooled, fwd + 1, bwd, exact)
        if j + 1 < len(built):
            idx = idx[~fooled]  # a sync, only between ensemble components


def convergence_sample(ids: torch.Tensor, probability: float, key: tuple) -> torch.Tensor:
    """Which of the examples ``ids`` (survivors at one eps) the convergence check reruns: each independently with
    ``probability``, decided by a hash of ``key`` and its example id alone.

    Independent inclusion needs no knowledge of the other units' survivors, and given how many it picked over the
    whole run, the checked survivors are a simple random sample without replacement of all survivors, which is
    what the exact hypergeometric bound of :mod:`..checks.convergence` needs. Probability 1 checks them all.
    """
    if probability >= 1:
        return torch.ones(len(ids), dtype=torch.bool, device=ids.device)
    draws = [random.Random(unit_seed(*key, int(i))).random() < probability for i in ids.tolist()]
    return torch.tensor(draws, dtype=torch.bool, device=ids.device)


@dataclass(frozen=True)
class Batch:
    """The examples one unit attacks: images, labels, ids and the clean pass (logits computed when not given)."""

    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor
    clean_correct: torch.Tensor
    clean_logits: torch.Tensor | None = None


@dataclass(frozen=True)
class CascadeSettings:
    """What the cascade runs: the attack, its eps grid, the parameters every component shares (``template``: the
    threat model, steps, step size, the run's seed, classes, early exit; each eps sets its own eps and seed), the
    convergence check's inclusion probability (None: no check), and whether the user cut the attack's budget."""

    attack: str
    eps: tuple[float, ...]
    template: AttackParams
    convergence: float | None = None
    #: the user cut the attack's budget below its own (``AttackSpec.cut_by``): an escalating attack then does not
    #: escalate; its rerun, at the attack's own settings, is a check alone and fails what the cut left
    cut: bool = False

    @classmethod
    def of(cls, config: Any, attack: str, n_classes: int, convergence: float | None = None) -> CascadeSettings:
        """The settings of a run's config (an :class:`~..configs.ImageAttackConfig`) for one attack."""
        template = AttackParams(eps=0.0, norm=config.norm, steps=config.steps, step_size=config.step_size,
                                seed=int(config.seed), n_classes=n_classes, early_stop=config.early_stop)  # fmt: skip
        cut = get_attack(attack).cut_by(config.steps, config.step_size, config.eps)
        return cls(attack, tuple(config.eps), template, convergence, cut)

    @property
    def norm(self) -> Norm:
        return self.template.norm

    @property
    def seed(self) -> int:
        return self.template.seed

    def params(self, eps: float, k: int) -> AttackParams:
        """The components' parameters at the ``k``-th eps of the grid."""
        return replace(self.template, eps=eps, seed=unit_seed(self.seed, k))


@dataclass
class _Run:
    """A unit's cascade state: the guarded model and its counter, the points and logits so far, who fooled whom."""

    model: nn.Module
    label: str
    batch: Batch
    settings: CascadeSettings

    def __post_init__(self) -> None:
        self.info = get_attack(self.settings.attack)
        self.model = GuardedLogits(self.model, self.settings.template.n_classes)
        self.counter = CountingModel(self.model)
        b = self.batch
        clean_logits = b.clean_logits
        if clean_logits is None:
            with torch.no_grad():
                clean_logits = self.model(b.x)
        self.clean_logits = clean_logits.detach().float()
        self.components: list[str] = []
        self._restart()
        #: the run checks this attack's convergence: an example that held it and its check at a larger eps is
        #: covered at the smaller ones (the grid runs descending; otherwise ascending, see :func:`cascade`)
        self.checked = self.settings.convergence is not None and self.info.converges

    def at_eps(self, k: int, eps: float, covered: torch.Tensor) -> _Eps:
        """Everything at eps index ``k``: every clean-correct example not ``covered`` (held at a larger eps) is
        attacked from its clean point (:meth:`attack`), then the escalation and the check (:meth:`finish`), which
        add what held here to ``covered``. Returns this eps's points, logits, who fooled whom and verdicts."""
        self._restart()
        state = self.attack(k, eps, covered)
        self.finish(state, covered)
        return state.keep(self, copy=False)

    def _restart(self) -> None:
        """Every example back at its clean point, unfooled unless the clean model got it wrong, no verdict."""
        b = self.batch
        self.x_cur, self.logits = b.x.clone(), self.clean_logits.clone()
        # Who fooled each example, kept on the device: -1 nobody (yet), 0 the clean model, c >= 1 component c - 1.
        self.fooled_code = torch.where(b.clean_correct, -1, 0)
        self.verdict = torch.zeros(len(b.y), dtype=torch.int64, device=b.y.device)  # the convergence column

    def attack(self, k: int, eps: float, covered: torch.Tensor) -> _Eps:
        """Phase 1 at eps index ``k``: the attack's components on the examples still correct and not ``covered``,
        an escalation that can wait (:meth:`.targeted.RankedAPGDT.escalate`) kept for :meth:`finish`."""
        s, b = self.settings, self.batch
        led = Ledger(len(b.y), b.x.device, torch.float64)
        idx = ((self.fooled_code < 0) & ~covered).nonzero().squeeze(1)  # a sync: the count sets the next batch
        state = _Eps(k, eps, led, None, [])
        if len(idx) and eps > 0:
            torch.manual_seed(unit_seed(s.seed, self.label, s.attack, k, int(b.ids[0])))
            built = self.info.build(self.counter, s.params(eps, k))
            for _, fn in built:
                if hasattr(fn, "escalate"):
                    fn.defer = True
            state.attacked, fns = idx, dict(built)
            for st in run_components(
                built, self.counter, self.model, b.x, b.y, idx, eps, s.norm, self.info.minimum_norm
            ):
                self._take(st, led)
                if getattr(fns[st.component], "pending", None) is not None:
                    state.pending.append((st.component, fns[st.component], st.idx))
        return state

    def _take(self, st: Step, led: Ledger) -> None:
        """A component's points, logits, passes and breaks, into the state at hand."""
        self.x_cur[st.idx] = st.x_adv
        self.logits[st.idx] = st.logits
        led.charge(st.idx, st.fwd, st.bwd, st.exact, check=False)
        if st.component not in self.components:
            self.components.append(st.component)
        # integer-index updates need no host-device sync (a boolean mask index would)
        code = self.components.index(st.component) + 1
        self.fooled_code[st.idx] = torch.where(st.fooled, code, self.fooled_code[st.idx])

    def finish(self, state: _Eps, covered: torch.Tensor) -> None:
        """Phase 2 at ``state``'s eps: the deferred escalation and the convergence check on what phase 1 attacked
        and left correct, but for what held at a larger eps; what then held (and its check did not break) joins
        ``covered`` for the smaller eps, and what was covered before is marked so."""
        s, b = self.settings, self.batch
        if state.attacked is None:
            self._mark_covered(covered)
            return
        for component, fn, idx in state.pending:
            _acc, adv = fn.escalate(~covered[idx])
            ran = fn.escalated.nonzero().squeeze(1)
            if not len(ran):
                continue
            sub = idx[ran]
            with torch.no_grad():
                logits = self.model(adv[ran]).float()
            fooled = predictions(logits) != b.y[sub]
            fwd, bwd, exact = component_cost(fn, self.counter, len(idx), b.x.device)
            self._take(Step(component, sub, adv[ran], logits, fooled, fwd[ran] + 1, bwd[ran], exact), state.led)
        attacked = state.attacked
        survivors = attacked[(self.fooled_code[attacked] < 0) & ~covered[attacked]]
        if self.checked:
            _converge(self, state.led, survivors, state.k, s.params(state.eps, state.k))
        held = survivors[self.fooled_code[survivors] < 0]
        if self.checked:
            held = held[self.verdict[held] == HELD]  # a survivor the (sampled) check did not rerun is not covered
        self._mark_covered(covered)
        covered[held] = True

    def _mark_covered(self, covered: torch.Tensor) -> None:
        """The convergence column of the examples still correct here because they held at a larger eps."""
        if self.checked:
            self.verdict[covered & (self.fooled_code < 0)] = COVERED


@dataclass
class _Eps:
    """One eps's state: what phase 1 attacked, its deferred escalations, and (after :meth:`_Run.at_eps`) the
    unit's points, logits, who fooled whom and verdicts at this eps."""

    k: int
    eps: float
    led: Ledger
    attacked: torch.Tensor | None
    pending: list[tuple[str, Any, torch.Tensor]]
    x_cur: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    fooled: torch.Tensor | None = None
    verdict: torch.Tensor | None = None

    def keep(self, run: _Run, copy: bool = True) -> _Eps:
        """The unit's points, logits, who fooled whom and verdicts as they stand (``copy``: when the run goes on
        changing them, as the ascending grid does)."""
        take = (lambda t: t.clone()) if copy else (lambda t: t)
        self.x_cur, self.logits, self.fooled = take(run.x_cur), take(run.logits), take(run.fooled_code)
        self.verdict = take(run.verdict)
        return self

    def restore(self, run: _Run) -> None:
        """Back to this eps's state, for the ascending grid's second pass (phase 2 there runs eps descending)."""
        run.x_cur, run.logits, run.fooled_code, run.verdict = self.x_cur, self.logits, self.fooled, self.verdict


def _converge(run: _Run, led: Ledger, survivors: torch.Tensor, k: int, params: AttackParams) -> None:
    """The convergence check at eps index ``k``: the stronger rerun on the sampled survivors.

    For an attack that escalates (``AttackSpec.escalates``, the default; not when the user cut its budget,
    ``CascadeSettings.cut``) the rerun is also the attack's last stage:
    what it breaks is broken (its points and logits replace the survivor's, ``fooled_by`` "rerun"), and a fresh
    round (new sample, new seed, twice the effort of the round before: the check must be stronger than the attack
    as it now stands) runs on what is left until a round breaks no more than the check allows in this unit
    (:func:`~..checks.convergence.allowed` of its size: units that all stop there pass the run's check together) or
    :data:`~..checks.convergence.ROUNDS` have run. The convergence column then records the last round only, the
    one that judges the number reported. Otherwise the rerun is a check alone and changes no row but that column.
    """
    s, b = run.settings, run.batch
    escalates = run.info.escalates and not s.cut
    rounds = ROUNDS if escalates else 1
    for r in range(rounds):
        key = (s.seed, run.label, s.attack, k) if r == 0 else (s.seed, run.label, s.attack, k, "round", r)
        pick = survivors[
            convergence_sample(b.ids.to(survivors.device)[survivors], s.convergence or 0.0, (*key, "pick"))
        ]
        run.verdict.zero_()  # the column records the judging (last) round
        if not len(pick):
            return
        torch.manual_seed(unit_seed(*key, int(b.ids[0]), "converge"))
        run.verdict[pick] = 1
        # round r + 1 at level r + 1: twice the effort of the attack as it stood after the round before
        level = replace(params, converge=r + 1, seed=unit_seed(params.seed, "round", r) if r else params.seed)
        stronger = run.info.build(run.counter, level)
        broke = torch.zeros(len(b.y), dtype=torch.bool, device=b.y.device)
        for st in run_components(
            stronger, run.counter, run.model, b.x, b.y, pick, params.eps, s.norm, run.info.minimum_norm
        ):
            led.charge(st.idx, st.fwd, st.bwd, st.exact, check=True)
            run.verdict[st.idx] = torch.where(st.fooled, 2, run.verdict[st.idx])
            broke[st.idx] |= st.fooled
            if escalates:
                hit = st.idx[st.fooled]
                run.x_cur[hit], run.logits[hit] = st.x_adv[st.fooled], st.logits[st.fooled]
                if RERUN not in run.components:
                    run.components.append(RERUN)
                run.fooled_code[hit] = run.components.index(RERUN) + 1
        log.debug("%s eps %g: rerun round %d broke %d of %d", run.label, params.eps, r + 1, int(broke.sum()), len(pick))
        if not escalates or int(broke.sum()) <= allowed(len(b.y)):
            return  # this round is the check that judges: within the allowance, the check passes on it
        survivors = survivors[~broke[survivors]]


def cascade(
    model: nn.Module,
    label: str,
    batch: Batch,
    settings: CascadeSettings,
    *,
    tick: Callable[[int], None] | None = None,
    trace: AdversarialTrace | None = None,
) -> pd.DataFrame:
    """Attack one batch over an eps grid (descending when the attack is checked, see the module docstring); one row
    per example and eps.

    The rows' logits are those of the forward pass that decided "fooled" (so ``correct`` always agrees with it);
    examples not attacked keep their clean logits. No eps costs an extra full-batch forward pass. Every row records
    the passes spent on its example at its eps (the ledger).

    The model runs guarded (:class:`~..checks.logits.GuardedLogits`), for the attack's own calls too: a bad output
    (NaN, a tuple, another shape) is a NaN row, no prediction, and fails the run's "model outputs finite" check
    instead of crashing the attack or becoming class 0.

    ``settings.convergence``: each survivor of each eps is attacked again, with that probability, by the attack's
    stronger rerun (:func:`convergence_sample`; ``AttackSpec.rerun``: twice the steps); the rows record
    which of them it broke. For most attacks the rerun is a check and changes no row's outcome; for an attack that
    escalates (the default) its breaks count and it repeats on what is left (:func:`_converge`).

    ``trace``: receives every example's point after each eps (and which examples were attacked there), for
    ``--save-adversarial`` and :func:`robustbench_filters.api.attack.attack`; recording changes nothing the cascade computes.
    """
    run = _Run(model, label, batch, settings)
    b, grid = batch, sorted(settings.eps)
    covered = torch.zeros(len(b.y), dtype=torch.bool, device=b.y.device)
    if run.checked:  # eps descending: the full search and its check once, at the largest eps an example survives
        at: dict[int, _Eps] = {}
        for k in reversed(range(len(grid))):
            at[k] = run.at_eps(k, grid[k], covered)
            if tick is not None:
                tick(1)
        states = [at[k] for k in range(len(grid))]
    else:
        # Unchecked attacks run ascending, each eps attacking the survivors of the smaller one, whose breaks count
        # upward: what an attack without a check held at a larger eps is no evidence at a smaller one (FGSM's
        # single step can overshoot at the larger eps and land at the smaller). The deferred escalation of the
        # default with its check off then runs descending at the largest eps each example survives.
        states = [run.attack(k, eps, covered).keep(run) for k, eps in enumerate(grid)]
        for state in reversed(states):
            state.restore(run)
            run.finish(state, covered)
            if tick is not None:
                tick(1)
    per_eps: list[dict[str, torch.Tensor]] = []
    for state in states:
        per_eps.append(
            {**row_stats(b.x, state.x_cur, b.y, state.logits, settings.norm), "fooled_code": state.fooled,
             **state.led.columns(), "conv_code": state.verdict}
        )  # fmt: skip
        if trace is not None:
            trace.record(state.x_cur, state.attacked)
    host, clean_host = to_host(per_eps, b.clean_correct)
    names = ["clean", *run.components]
    frames = []
    for k, eps in enumerate(grid):
        fooled_by = ["" if c < 0 else names[c] for c in host["fooled_code"][k].tolist()]
        frames.append(
            frame_rows(label, b.ids, settings.attack, eps, settings.norm, {key: v[k] for key, v in host.items()},
                   clean_host, fooled_by)
        )  # fmt: skip
    return pd.concat(frames, ignore_index=True)


# CONVERGENCE and batch_rows (cascade_rows.py) lived here until 2026-12-06: re-exported so that path keeps working
__all__ = ["CONVERGENCE", "Batch", "CascadeSettings", "Step", "batch_rows", "cascade", "convergence_sample",
           "perturbation_norm", "run_components"]  # fmt: skip
