"""``autoattack-fast``: robfilt's default attack until issue 32, kept under its name so earlier runs, baselines and
specs that name it keep their meaning. It is weaker than the default (``apgd-adaptive``, :mod:`.adaptive`) on
adversarially trained models: three fixed targets and short runs miss examples there (B9).

Two stages, in order; the second runs only on the examples the first left correctly classified (as AutoAttack
does), and inside each stage an example leaves the batch the moment it is fooled (:mod:`.apgd`):

1. APGD-CE: APGD on cross-entropy, 1 restart;
2. APGD-T: APGD on the targeted DLR loss (scale invariant, so a saturated cross-entropy cannot hide an
   adversarial), one run per target class, the targets being the classes with the highest clean logits after
   the top one: for a correctly classified example, those with the smallest margin to the true class.

Both are torchattacks' APGD code (thin subclasses add the early exit and the compute ledger). How it differs from
AutoAttack's ``version='standard'`` is in :data:`DIFFERENCES` and docs/attacks.md, with the measurements behind
the step and target counts (a third stage, untargeted APGD-DLR, broke no example there and was dropped).
"""

from __future__ import annotations

from torch import nn

from .apgd import EarlyAPGD, EarlyAPGDT
from .params import AttackFn, AttackParams, Builder

NAME = "autoattack-fast"
CE_STEPS = 25  # APGD-CE
T_STEPS = 12  # APGD-T, per target
N_TARGETS = 3  # APGD-T targets (AutoAttack: 9)

DIFFERENCES = (
    "AutoAttack standard (Linf/L2): APGD-CE 100 steps, APGD-T 9 targets x 100 steps, FAB-T 9 targets x 100 steps, "
    f"Square 5000 queries, 1 restart each, no early exit inside an attack. {NAME}: APGD-CE {CE_STEPS} steps, "
    f"APGD-T {N_TARGETS} targets x {T_STEPS} steps, 1 restart each; no FAB-T, no Square; an example leaves each "
    "attack once fooled; torchattacks' ports, inside robfilt's eps cascade."
)


def build(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    """The stages for one eps (``--steps`` sets every stage's steps; the convergence rerun doubles them and adds a
    restart to each). Each stage has its own seed: one seed would give every stage the same random starts."""
    # The convergence rerun checks a few examples with many runs each: one batch of copies, not one call per run.
    common = {"norm": p.norm_name, "eps": p.eps, "early_stop": p.early_stop, "n_restarts": p.restarts(),
              "parallel": bool(p.converge)}  # fmt: skip
    stages: list[tuple[str, AttackFn]] = [
        ("apgd-ce", EarlyAPGD(model, steps=p.iterations(CE_STEPS), loss="ce", seed=p.seed, **common))
    ]
    if p.n_classes >= 4:  # the targeted DLR loss reads the 4th-largest logit
        targets = min(N_TARGETS, p.n_classes - 1)
        stages.append(
            (
                "apgd-t",
                EarlyAPGDT(
                    model,
                    steps=p.iterations(T_STEPS),
                    n_classes=p.n_classes,
                    n_targets=targets,
                    seed=p.seed + 1,
                    **common,
                ),
            )  # fmt: skip
        )
    return stages


#: this module's attack, by name (the catalogue joins it to its spec)
BUILDERS: dict[str, Builder] = {NAME: build}
