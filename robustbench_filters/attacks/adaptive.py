"""``apgd-adaptive``: robfilt's default image attack; effort where the evidence says an example may still fall.

Three stages, in order, each on the examples the earlier ones left correctly classified (AutoAttack's per-example
worst case); inside each, an example leaves the moment it is fooled:

1. APGD-CE: APGD on cross-entropy, :data:`CE_STEPS` steps, 1 restart; it breaks nearly every example that is not
   robust, in a few steps;
2. APGD-T with targets chosen per example (:class:`.targeted.RankedAPGDT`): every other class ranked by its
   linearised distance to the decision boundary; a short run (4 steps) on each of the 9 closest (every target of a
   10-class model); then the near misses (a targeted DLR loss of at least -0.5) get one 100-step run on the
   target that came closest (and on the next, when its loss came within 0.15), and a run that ended at -0.1 or
   closer one more from a fresh start; every long run gives up half way on the rows whose loss cannot reach the
   boundary in the steps left (:mod:`.abandon`);
3. escalation (:mod:`.cascade`): the stronger rerun on the survivors: stage 2 at twice its steps (the sweep on
   every target, the long runs for its own near misses; fresh random starts); what it breaks counts, and while a
   round breaks more than the convergence check allows, another runs on what is left at twice the steps of the
   one before (fresh seed), at most 3 rounds. The last round is the convergence check. The rerun has no APGD-CE:
   the targeted sweep attacks every other class, and in B9's ten cells a rerun APGD-CE (2 x 50 steps) broke
   nothing, at a sixth of the rerun's cost.

docs/attacks.md gives the measurements behind the numbers (the robust CNN of ``benchmarks/robust_cnn.py``, and B9:
``autoattack-standard`` on robust and normally trained models) and how it differs from AutoAttack's standard
version. ``autoattack-fast``, the default before it, keeps its name and definition so that earlier runs, baselines
and specs keep their meaning.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from .apgd import EarlyAPGD
from .params import AttackFn, AttackParams, Builder
from .targeted import RankedAPGDT, TargetPlan

NAME = "apgd-adaptive"
CE_STEPS = 25
PLAN = TargetPlan()


def plan_for(p: AttackParams) -> TargetPlan:
    """The targeted stage's plan: ``--steps`` sets the sweep's and the escalation's steps; the convergence rerun
    takes the stronger plan, never below the plan's own steps; the eps = 0 probe one step of everything."""
    sweep, long = (PLAN.sweep_steps, PLAN.escalate_steps) if p.steps is None else (p.steps, p.steps)
    if p.converge:  # the check runs at the attack's own budget or above (AttackParams.iterations)
        sweep, long = max(sweep, PLAN.sweep_steps), max(long, PLAN.escalate_steps)
    plan = replace(PLAN, sweep_steps=sweep, escalate_steps=long, max_targets=min(PLAN.max_targets, p.n_classes - 1))
    return plan.stronger(int(p.converge)) if p.converge else plan


def build(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    """The two stages for one eps, each with its own seed (one seed would give both the same random starts); the
    convergence rerun (``p.converge``) is the targeted stage alone."""
    common = {"norm": p.norm_name, "eps": p.eps, "early_stop": p.early_stop}
    targeted = p.n_classes >= 4  # the targeted DLR loss reads the 4th-largest logit
    stages: list[tuple[str, AttackFn]] = []
    if not (p.converge and targeted):  # the rerun's targeted sweep covers what APGD-CE would check
        ce = EarlyAPGD(model, steps=p.iterations(CE_STEPS), loss="ce", seed=p.seed, n_restarts=p.restarts(),
                       parallel=bool(p.converge), **common)  # fmt: skip
        stages.append(("apgd-ce", ce))
    if targeted:
        plan = plan_for(p)
        stages.append(("apgd-t", RankedAPGDT(model, plan=plan, steps=plan.sweep_steps, n_classes=p.n_classes,
                                             seed=p.seed + 1, **common)))  # fmt: skip
    return stages


#: this module's attack, by name (the catalogue joins it to its spec)
BUILDERS: dict[str, Builder] = {NAME: build}
