"""Adversarial attacks on image models as a runner measurement: units, rows, checks and summary.

Units are (model, attack, batch) plus one (model, ``clean``, batch) per batch. An attack unit runs the eps cascade
(:mod:`.cascade`) on its batch; its seeds derive from (seed, model label, attack, eps index, first example id), so a
unit's rows do not depend on which process computes it or when. Aggregates are recomputed from the rows.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import Check, ChecksSummary
from ..checks import image as IC
from ..checks import model as MC
from ..checks.convergence import THRESHOLD_POINTS, sample_probability
from ..checks.logits import GuardedLogits, check_image_rows, guard_logits, predictions
from ..configs import ImageAttackConfig
from ..runs.adversarial import AdversarialTrace
from ..runs.measurement import PrepareContext, Tick, UnitOutput
from ..runs.units import Unit, unit_seed
from ..stats.aggregates import attack_accuracies
from ..summaries import ImageAttackSummary
from ..summaries.image import RobustAccuracy
from .cascade import Batch, CascadeSettings, cascade
from .cascade_rows import batch_rows
from .catalogue import ATTACKS, PGD_STEPS, STRONG, AttackParams, Norm, get_attack
from .image_models import GridMeasurement
from .standard import SQUARE_QUERIES

log = logging.getLogger(__name__)

#: the torch dtype of each --amp choice (their names: core.names.AMP_DTYPES)
AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16}
#: Examples the model-level sanity checks probe: one per 16 examples of the run, 1 to N_CHECK. The checks then
#: cost a few percent of an attack (PGD-10 spends 31 passes per example; the checks about 7 on each probed one).
N_CHECK = 16
#: --check-masking's black-box check attacks the survivors among the run's first this many examples with the
#: reference's Square (5000 queries each: about what ``autoattack-standard`` spends on a robust example)
BLACKBOX_EXAMPLES = 256
#: the attack whose Square component the black-box check runs
REFERENCE = "autoattack-standard"


def n_check(n_examples: int) -> int:
    return max(1, min(N_CHECK, n_examples // 16))


def convergence_attacks(config: ImageAttackConfig) -> tuple[str, ...]:
    """The attacks of a run whose survivors get the convergence check (``check_convergence``: None for the strong
    ensembles only, True for every attack with a stronger rerun, False for none)."""
    if config.check_convergence is False:
        return ()
    chosen = (a for a in config.attacks if ATTACKS[a].converges)
    return tuple(a for a in chosen if config.check_convergence or ATTACKS[a].strength == STRONG)


def _budget(entry: RobustAccuracy, config: ImageAttackConfig) -> RobustAccuracy:
    """``entry`` with the budget its attack ran with: ``--steps`` / ``--step-size`` when given, else the attack's
    own (its longest run's steps; its fixed step at this eps, or None where it sets its own steps sizes)."""
    spec = ATTACKS[entry.attack]
    steps = 1 if spec.steps == 1 else config.steps if config.steps is not None else spec.steps  # fgsm: one step
    own = spec.step_size * entry.eps if spec.step_size else None
    return replace(entry, steps=steps, step_size=config.step_size if config.step_size is not None else own)


def cut_by_user(config: ImageAttackConfig, attack: str) -> bool:
    """Whether ``--steps`` / ``--step-size`` lowered ``attack``'s budget below its own (``AttackSpec.cut_by``)."""
    return ATTACKS[attack].cut_by(config.steps, config.step_size, config.eps)


def autocast(device: torch.device, amp: str | None) -> AbstractContextManager:
    """bf16 autocast when asked for (``--amp``), otherwise nothing: fp32 stays the default everywhere."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[amp])


class ImageAttack(GridMeasurement):
    """Image models x catalogue attacks over an eps grid, on examples shared by every model."""

    config: ImageAttackConfig

    def prepare(self, ctx: PrepareContext) -> None:
        self.open_examples(ctx)
        self._batch_cache: tuple[int, tuple[torch.Tensor, ...]] | None = None
        self._clean_cache: tuple[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] | None = None
        self._on_device: set[int] = set()

    def describe(self) -> dict[str, Any]:
        c = self.config
        described = {
            "models": self.labels,
            "attacks": list(c.attacks),
            "eps": list(c.eps),
            "norm": c.norm.value,
            "steps": c.steps,
            "step_size": c.step_size,
            "early_stop": c.early_stop,
            "convergence": {
                "attacks": list(convergence_attacks(c)),
                "probability": sample_probability(len(self.ids)),
                "threshold_points": THRESHOLD_POINTS,
            },  # fmt: skip
            **self.described_examples(),
            "check_masking": c.check_masking,
        }
        if c.amp is not None:
            described |= {"amp": c.amp, "amp_attacks": c.amp_attacks}
        if c.save_adversarial:  # only when on: runs without it keep the fingerprints they always had
            described["save_adversarial"] = True
        return described

    def parts(self) -> Sequence[str]:
        return self.config.attacks

    def grid(self) -> Sequence[float]:
        return self.config.eps

    # --- units ----------------------------------------------------------------------------------------------------

    def _model(self, mi: int) -> nn.Module:
        module = self.loaded[mi].module
        if mi not in self._on_device:
            module.to(self.device).eval()
            self._on_device.add(mi)
        return module

    def _batch(self, bi: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._batch_cache is None or self._batch_cache[0] != bi:
            ids = self.ids[self.batches[bi]]
            x, y = self.source.take(ids)
            if self.device.type == "cuda":  # pinned host tensors copy asynchronously to a GPU
                x, y = x.pin_memory(), y.pin_memory()
            non_blocking = self.device.type == "cuda"
            x, y = x.to(self.device, non_blocking=non_blocking), y.to(self.device, non_blocking=non_blocking)
            self._batch_cache = (bi, (x, y, ids))
        return self._batch_cache[1]  # type: ignore[return-value]

    def _clean(self, mi: int, bi: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._clean_cache is None or self._clean_cache[0] != (mi, bi):
            x, y, _ = self._batch(bi)
            with torch.no_grad(), autocast(self.device, self.config.amp):
                logits = guard_logits(self._model(mi)(x), len(x), self.classes[mi], x.device).float()
            self._clean_cache = ((mi, bi), (logits, predictions(logits) == y))
        return self._clean_cache[1]

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame | UnitOutput:
        c, label = self.config, self.labels[unit.model]
        model = self._model(unit.model)
        x, y, ids = self._batch(unit.batch)
        clean_logits, clean_correct = self._clean(unit.model, unit.batch)
        if unit.part == "clean":
            fooled = ["" if ok else "clean" for ok in clean_correct.tolist()]
            rows = batch_rows(label, ids, "clean", 0.0, c.norm, x, x, y, clean_logits, clean_correct, fooled, fwd=1)
            tick(1)
            return rows
        trace = AdversarialTrace() if c.save_adversarial else None
        with autocast(self.device, c.amp if c.amp_attacks else None):
            conv = sample_probability(len(self.ids)) if unit.part in convergence_attacks(c) else None
            settings = CascadeSettings.of(c, unit.part, self.classes[unit.model], conv)
            rows = cascade(
                model, label, Batch(x, y, ids, clean_correct, clean_logits), settings, tick=tick, trace=trace
            )
        if trace is None:
            return rows
        return UnitOutput(rows, trace.tensors(ids, c.eps, model=label, attack=unit.part, norm=c.norm.value))

    # --- checks and summary ---------------------------------------------------------------------------------------

    def model_checks(self, model: int) -> list[Check]:
        """Model-level checks on a few examples (:func:`n_check`); none repeats an attack's cost."""
        c, lm = self.config, self.loaded[model]
        module, label = self._model(model), lm.label
        x, y = self.source.take(self.ids[: n_check(len(self.ids))])
        x, y = x.to(self.device), y.to(self.device)
        out = [
            MC.check_eval_deterministic(module, label, x),
            MC.check_gradients(module, label, x, y),
            MC.check_logits(module, label, x),
        ]
        # eps = 0, structurally: one step (every fixed budget at its minimum) must leave x exactly where it is.
        torch.manual_seed(unit_seed(c.seed, label, "eps0"))
        classes = self.classes[model]
        step = 0.0 if c.step_size is None else c.step_size
        params = AttackParams(0.0, c.norm, 1, step, c.seed, classes, early_stop=c.early_stop, probe=True)
        guarded = GuardedLogits(module, classes)
        built = {attack: ATTACKS[attack].build(guarded, params) for attack in c.attacks}
        out.append(IC.check_eps0(guarded, label, x, y, built))
        if c.check_masking:  # opt-in and costly anyway: on up to 64 examples, as before
            xm, ym = self.source.take(self.ids[:64])
            out.extend(self._masking_checks(module, label, xm.to(self.device), ym.to(self.device), classes))
        return out

    @property
    def _middle_eps(self) -> float:
        """Where --check-masking's checks attack: the grid's middle eps, inside what the run measures and away from
        its ends (the smallest leaves little to find, the largest may be past every model's robustness)."""
        return self.config.eps[len(self.config.eps) // 2]

    def _masking_checks(
        self, model: nn.Module, label: str, x: torch.Tensor, y: torch.Tensor, classes: int
    ) -> list[Check]:
        """--check-masking, on the model: huge eps reaches chance; 5x steps is not weaker (Square against the run's
        own survivors is a row check: :meth:`_blackbox_check`)."""
        c = self.config
        big = 0.5 if c.norm is Norm.LINF else 20.0
        mid = self._middle_eps

        def acc(attack: str, eps: float, steps: int | None, step_size: float | None) -> float:
            return accuracy_under(model, attack, x, y, AttackParams(eps, c.norm, steps, step_size, c.seed, classes))

        steps = c.steps or PGD_STEPS
        acc_big = acc("pgd", big, max(steps, 20), None)
        acc_mid = acc("pgd", mid, steps, c.step_size)
        acc_5x = acc("pgd", mid, 5 * steps, c.step_size)
        return [IC.check_chance(acc_big, classes, label, big), IC.check_more_steps(acc_mid, acc_5x, len(y), label, 5)]

    def _blackbox_check(self, rows: pd.DataFrame, label: str) -> Check:
        """--check-masking, per example: the reference's Square (``autoattack-standard``'s last component, 5000
        queries) on the examples every attack of the run left robust at the middle eps, among the first
        :data:`BLACKBOX_EXAMPLES` of the run. A point Square finds there is one the gradient attacks missed (masked
        or shattered gradients): the run's robust accuracy is then overstated, whatever its convergence check says,
        since that check reruns gradient attacks (on ``benchmarks/robust_bn.py``, trained with label smoothing, only
        Square found 2 of the default's 71 survivors, after 4,222 and 4,431 queries)."""
        c = self.config
        mi = self.labels.index(label)
        mid = self._middle_eps
        first = self.ids[:BLACKBOX_EXAMPLES]
        at = rows[(rows.kind != "clean") & np.isclose(rows.eps, mid) & rows.example_id.isin(first.tolist())]
        held = at.groupby("example_id").correct.all()
        ids = torch.tensor(held.index[held.to_numpy()].tolist(), dtype=torch.long)
        broken = 0
        if len(ids):
            x, y = self.source.take(ids)
            x, y = x.to(self.device), y.to(self.device)
            model = GuardedLogits(self._model(mi), self.classes[mi])
            params = AttackParams(mid, c.norm, None, None, unit_seed(c.seed, label, "blackbox"), self.classes[mi])
            torch.manual_seed(params.seed)
            square = dict(ATTACKS[REFERENCE].build(model, params))["square"]
            with torch.no_grad():
                broken = int((predictions(model(square(x, y).detach())) != y).sum())
        return IC.check_blackbox(broken, len(ids), len(first), len(self.ids), mid, SQUARE_QUERIES, label)

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        checks = [check_image_rows(rows, label), IC.check_in_ball(rows, label), IC.check_monotone(rows, label)]
        pgd_fgsm = IC.check_pgd_vs_fgsm(rows, label)
        if pgd_fgsm is not None:
            checks.append(pgd_fgsm)
        if any(a in ("pgd", "pgd-l2") for a in self.config.attacks):
            steps = self.config.steps or PGD_STEPS
            checks.append(IC.check_step_budget(steps, self.config.step_size, list(self.config.eps), label))
        checks.extend(IC.check_convergence(rows, label))
        if self.config.check_masking:
            checks.append(self._blackbox_check(rows, label))
        return checks

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> ImageAttackSummary:
        c = self.config
        models = attack_accuracies(rows, cut=[a for a in c.attacks if cut_by_user(c, a)])
        return ImageAttackSummary(
            **self.summary_head(), attacks=list(c.attacks), eps=list(c.eps), norm=c.norm.value, steps=c.steps,
            step_size=c.step_size, early_stop=c.early_stop,
            precision={"clean": c.amp or "fp32", "attacks": (c.amp if c.amp_attacks else None) or "fp32"},
            models={label: replace(res, robust=[_budget(r, c) for r in res.robust]) for label, res in models.items()},
            checks=list(checks), checks_summary=ChecksSummary.of(checks), attention=self.attention_maps(),
        )  # fmt: skip

    def attention_maps(self) -> dict[str, Any]:
        """CLS attention per layer of every DeiT-style model on the first selected example (for reports).

        The image itself is stored when it is small (<= 64 x 64 per channel), so the figure can show it.
        """
        from ..models.attention_maps import cls_attention_maps, supports_attention_maps

        x, _ = self.source.take(self.ids[:1])
        out: dict[str, Any] = {"_example_id": int(self.ids[0])}
        if x.shape[-1] * x.shape[-2] <= 64 * 64:
            out["_image"] = x[0].mean(0).tolist()
        for mi, lm in enumerate(self.loaded):
            if not supports_attention_maps(lm.module):
                continue
            try:
                maps = cls_attention_maps(self._model(mi), x[0].to(self.device))
            except (RuntimeError, AttributeError, TypeError, ValueError) as exc:  # an attention layer we cannot read
                log.info("no attention maps for %s: %s", lm.label, exc)
                continue
            out[lm.label] = {"maps": np.round(maps, 6).tolist()}
        return out


def accuracy_under(model: nn.Module, attack: str, x: torch.Tensor, y: torch.Tensor, params: AttackParams) -> float:
    """Robust accuracy of ``model`` under one attack (per-example worst case over its components)."""
    return robust_under(model, attack, x, y, params).float().mean().item()


def robust_under(model: nn.Module, attack: str, x: torch.Tensor, y: torch.Tensor, params: AttackParams) -> torch.Tensor:
    """Per example, whether ``model`` still classifies it correctly after every component of one attack (a bool
    tensor on ``x``'s device; a misclassified clean example is not robust)."""
    torch.manual_seed(params.seed)
    alive = torch.ones(len(y), dtype=torch.bool, device=x.device)
    model = GuardedLogits(model, params.n_classes)
    for _, fn in get_attack(attack).build(model, params):
        idx = alive.nonzero().squeeze(1)
        if not len(idx):
            break
        x_adv = fn(x[idx], y[idx]).detach()
        with torch.no_grad():
            pred = predictions(model(x_adv))
            alive[idx[pred != y[idx]]] = False
    return alive
