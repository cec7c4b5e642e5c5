"""``autoattack-standard``: AutoAttack's standard version (Croce & Hein 2020) at the reference settings, the yardstick.

The four components of fra31/auto-attack's ``version='standard'`` (Linf and L2), in its order, each run only on the
examples every earlier component left correctly classified (the per-example worst case), with the reference's
budgets set explicitly rather than left at torchattacks' defaults (torchattacks' own ``AutoAttack`` runs its
components at 10 steps):

1. APGD-CE: 100 steps, 1 restart;
2. APGD-T: targeted DLR loss, 9 targets (the classes with the highest clean logits after the top one) x 100 steps,
   1 restart each;
3. FAB-T: 9 targets x 100 steps, 1 restart, a success counting only inside the eps-ball;
4. Square: 5000 queries, 1 restart, ``p_init`` 0.8, margin loss, the reference's unrescaled schedule.

It is slow (a robust example costs about 10,000 model passes) and never the default; B9 measures the default
against it. Every remaining difference from the reference is in :data:`DIFFERENCES` and docs/attacks.md.
"""

from __future__ import annotations

import torchattacks
from torch import nn

from .apgd import EarlyAPGD, EarlyAPGDT
from .params import AttackFn, AttackParams, Builder, within_ball

NAME = "autoattack-standard"
#: the reference's budgets (fra31/auto-attack, autoattack.py: the constructors and set_version('standard'))
APGD_STEPS = 100
N_TARGETS = 9
FAB_STEPS = 100
SQUARE_QUERIES = 5000
SQUARE_P_INIT = 0.8

DIFFERENCES = (
    "torchattacks 3.5.1's ports, not the reference code: APGD and APGD-T run robfilt's copy of torchattacks' loop "
    "(the reference's algorithm step for step), FAB and Square torchattacks' own classes; "
    "an example leaves APGD/APGD-T once fooled (the same examples are broken: every step is per example); "
    "APGD-T under L2 uses each example's own step size, as the reference does (torchattacks: the first example's); "
    "Square's schedule is the reference's (resc_schedule=False, torchattacks' default is True); "
    "seeds come from the run's seed per unit and component (reference: time.time() unless set); "
    "the components see the run's batches (reference: batches of 250 robust points; only Square's random draws "
    "depend on the batch); eps values run as robfilt's cascade (reference: one eps per call); "
    "robfilt's sanity checks replace the reference's flags (randomness, softmax output, zero gradients, dynamic "
    "defenses, Square beating the white-box attacks); Linf and L2 only (no L1 version)."
)


def build(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    """The four components for one eps, each with its own seed (``--steps`` sets every component's steps and
    Square's queries)."""
    norm, targets = p.norm_name, min(N_TARGETS, p.n_classes - 1)
    common = {"norm": norm, "eps": p.eps, "n_restarts": p.restarts(), "early_stop": p.early_stop}
    stages: list[tuple[str, AttackFn]] = [
        ("apgd-ce", EarlyAPGD(model, steps=p.iterations(APGD_STEPS), loss="ce", seed=p.seed, **common))
    ]
    if p.n_classes >= 4:  # the targeted DLR loss reads the 4th-largest logit
        apgd_t = EarlyAPGDT(
            model, steps=p.iterations(APGD_STEPS), n_classes=p.n_classes, n_targets=targets, seed=p.seed + 1, **common
        )
        stages.append(("apgd-t", apgd_t))
    fab = torchattacks.FAB(
        model, norm=norm, eps=p.eps, steps=p.iterations(FAB_STEPS), n_restarts=p.restarts(), multi_targeted=True,
        n_classes=p.n_classes, seed=p.seed + 2,
    )  # fmt: skip
    fab.n_target_classes = targets  # torchattacks' default is every other class
    queries = 2 if p.probe else p.iterations(SQUARE_QUERIES)
    square = torchattacks.Square(
        model, norm=norm, eps=p.eps, n_queries=queries, n_restarts=p.restarts(), p_init=SQUARE_P_INIT,
        loss="margin", resc_schedule=False, seed=p.seed + 3,
    )  # fmt: skip
    return [*stages, ("fab-t", within_ball(fab, p.eps, p.norm)), ("square", square)]


#: this module's attack, by name (the catalogue joins it to its spec)
BUILDERS: dict[str, Builder] = {NAME: build}
