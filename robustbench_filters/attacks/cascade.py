"""The eps cascade: attack one batch over an ascending eps grid, re-attacking only the survivors.

For one model, attack and batch, eps values run in ascending order and only the examples that survived the
previous eps are attacked again: an adversarial example found at a smaller eps lies inside every larger ball, so
it counts there too. Ensembles (``apgd-adaptive``, ``autoattack-standard``, ``autoattack``) run their components in order on the
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

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import ball_tolerance
from ..checks.convergence import RERUN, ROUNDS, allowed
from ..checks.logits import GuardedLogits, margin, predictions
from ..runs.adversarial import AdversarialTrace
from ..runs.units import unit_seed
from .catalogue import AttackFn, AttackParams, Norm, get_attack
from .ledger import CountingModel, Ledger, component_cost

log = logging.getLogger(__name__)


def perturbation_norm(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)


def _row_stats(
    x: torch.Tensor, x_cur: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, norm: Norm
) -> dict[str, torch.Tensor]:
    """The per-example measurements, still on the model's device (copied to the host once per unit)."""
    finite = torch.isfinite(x_cur).flatten(1).all(1)
    in_box = finite & (x_cur.flatten(1).amin(1) >= 0) & (x_cur.flatten(1).amax(1) <= 1)
    return {
        "correct": predictions(logits) == y,  # a NaN row (guarded bad output) is no prediction, never class 0
        "pert_norm": perturbation_norm(x_cur - x, norm).detach(),
        "margin": margin(logits, y).detach(),
        "loss": F.cross_entropy(logits, y, reduction="none").detach(),
        "in_box": in_box,
    }


def _to_host(
    per_eps: list[dict[str, torch.Tensor]], clean_correct: torch.Tensor
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """All of a unit's per-eps measurements in one device-to-host copy (float64 holds every value exactly)."""
    keys = list(per_eps[0])
    packed = torch.stack([torch.stack([stats[k].double() for k in keys]) for stats in per_eps])  # (eps, key, n)
    flat = torch.cat([packed.flatten(), clean_correct.double()]).cpu().numpy()
    host = flat[: packed.numel()].reshape(packed.shape)
    kinds = {"correct": bool, "in_box": bool, "cost_exact": bool, "fooled_code": np.int64, "conv_code": np.int64}
    out = {k: host[:, i].astype(kinds.get(k, np.float64)) for i, k in enumerate(keys)}
    return out, flat[packed.numel() :].astype(bool)


#: The convergence column: not in the checked subset, survived the stronger rerun, or broken by it.
CONVERGENCE = ("", "held", "broken")


def _frame(
    label: str,
    ids: torch.Tensor,
    attack: str,
    eps: float,
    norm: Norm,
    stats: dict[str, np.ndarray],
    clean_correct: np.ndarray,
    fooled_by: list[str],
) -> pd.DataFrame:
    n = len(fooled_by)
    zeros = np.zeros(n)
    return pd.DataFrame(
        {
            "model": label,
            "example_id": ids.cpu().numpy().astype(np.int64),
            "kind": "adversarial",
            "attack": attack,
            "eps": float(eps),
            "norm": norm.value,
            "correct": stats["correct"],
            "clean_correct": clean_correct,
            "pert_norm": stats["pert_norm"].astype(np.float64),
            "margin": stats["margin"].astype(np.float64),
            "loss": stats["loss"].astype(np.float64),
            "in_box": stats["in_box"],
            "fooled_by": fooled_by,
            # the compute ledger: passes the model ran on this example at this eps (see attacks.ledger)
            "fwd": stats.get("fwd", zeros).astype(np.float64),
            "bwd": stats.get("bwd", zeros).astype(np.float64),
            "cost_exact": stats.get("cost_exact", np.ones(n, dtype=bool)).astype(bool),
            "convergence": [CONVERGENCE[c] for c in stats.get("conv_code", np.zeros(n, dtype=np.int64)).tolist()],
            "conv_fwd": stats.get("conv_fwd", zeros).astype(np.float64),
            "conv_bwd": stats.get("conv_bwd", zeros).astype(np.float64),
        }
    )


def batch_rows(
    label: str,
    ids: torch.Tensor,
    attack: str,
    eps: float,
    norm: Norm,
    x: torch.Tensor,
    x_cur: torch.Tensor,
    y: torch.Tensor,
    logits: torch.Tensor,
    clean_correct: torch.Tensor,
    fooled_by: list[str],
    fwd: int = 0,
) -> pd.DataFrame:
    """Rows of one batch evaluated once (``fwd``: the forward passes that took, per example)."""
    stats = {k: v.cpu().numpy() for k, v in _row_stats(x, x_cur, y, logits, norm).items()}
    stats["fwd"] = np.full(len(y), float(fwd))
    return _frame(label, ids, attack, eps, norm, stats, clean_correct.cpu().numpy(), fooled_by)


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
        self.x_cur, self.logits = b.x.clone(), clean_logits.detach().float().clone()
        # Who fooled each example, kept on the device: -1 nobody (yet), 0 the clean model, c >= 1 component c - 1.
        self.fooled_code = torch.where(b.clean_correct, -1, 0)
        self.components: list[str] = []
        self.verdict = torch.zeros(len(b.y), dtype=torch.int64, device=b.y.device)  # the convergence column

    def attack(self, k: int, eps: float, led: Ledger) -> torch.Tensor | None:
        """Attack the survivors at eps index ``k`` (and check convergence); the examples attacked, None if none.
        Their passes go to ``led``, the convergence check's verdicts (:data:`CONVERGENCE`) to ``self.verdict``."""
        s, b = self.settings, self.batch
        self.verdict = torch.zeros(len(b.y), dtype=torch.int64, device=b.y.device)
        idx = (self.fooled_code < 0).nonzero().squeeze(1)  # a sync: the survivor count sets the next batch
        if not len(idx) or eps <= 0:
            return None
        torch.manual_seed(unit_seed(s.seed, self.label, s.attack, k, int(b.ids[0])))
        params = s.params(eps, k)
        survivors = idx
        built = self.info.build(self.counter, params)
        for st in run_components(built, self.counter, self.model, b.x, b.y, idx, eps, s.norm, self.info.minimum_norm):
            self.x_cur[st.idx] = st.x_adv
            self.logits[st.idx] = st.logits
            led.charge(st.idx, st.fwd, st.bwd, st.exact, check=False)
            if st.component not in self.components:
                self.components.append(st.component)
            # integer-index updates need no host-device sync (a boolean mask index would)
            code = self.components.index(st.component) + 1
            self.fooled_code[st.idx] = torch.where(st.fooled, code, self.fooled_code[st.idx])
            survivors = st.idx[~st.fooled]
        if s.convergence is not None and self.info.converges:
            _converge(self, led, survivors, k, params)
        return idx


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
    """Attack one batch over an ascending eps grid, re-attacking only the survivors; one row per example and eps.

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
    per_eps: list[dict[str, torch.Tensor]] = []
    for k, eps in enumerate(grid):
        led = Ledger(len(b.y), b.x.device, torch.float64)
        attacked = run.attack(k, eps, led)
        per_eps.append(
            {**_row_stats(b.x, run.x_cur, b.y, run.logits, settings.norm), "fooled_code": run.fooled_code.clone(),
             **led.columns(), "conv_code": run.verdict}
        )  # fmt: skip
        if trace is not None:
            trace.record(run.x_cur, attacked)
        if tick is not None:
            tick(1)
    host, clean_host = _to_host(per_eps, b.clean_correct)
    names = ["clean", *run.components]
    frames = []
    for k, eps in enumerate(grid):
        fooled_by = ["" if c < 0 else names[c] for c in host["fooled_code"][k].tolist()]
        frames.append(
            _frame(label, b.ids, settings.attack, eps, settings.norm, {key: v[k] for key, v in host.items()},
                   clean_host, fooled_by)
        )  # fmt: skip
    return pd.concat(frames, ignore_index=True)
