"""The eps cascade: attack one batch over an ascending eps grid, re-attacking only the survivors.

For one model, attack and batch, eps values run in ascending order and only the examples that survived the
previous eps are attacked again: an adversarial example found at a smaller eps lies inside every larger ball, so
it counts there too. Ensembles (``autoattack-fast``, ``autoattack``) run their components in order on the
survivors, which keeps the per-example worst case. Each eps gets one row per example (correct, margin, loss,
perturbation norm, who fooled it) with its compute ledger (model passes spent on it there; :mod:`.ledger`) and,
for the attacks checked, the convergence check's verdict on it.

On a GPU the bookkeeping stays on the device and a unit's rows are copied to the host once; the only
host-device synchronisations left in our code are the survivor counts, one per eps and ensemble component,
which decide the next attack's batch, and with early exit one per attack step (who was fooled decides the next
step's batch). (torchattacks' own loops are out of our hands.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import ball_tolerance
from ..checks.logits import GuardedLogits, predictions
from ..runs.adversarial import AdversarialTrace
from ..runs.units import unit_seed
from .catalogue import AttackFn, AttackParams, Norm, get_attack
from .ledger import CountingModel, component_cost


def perturbation_norm(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)


def margin_loss(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf")).amax(1)
    return true - other, F.cross_entropy(logits, y, reduction="none")


def _row_stats(
    x: torch.Tensor, x_cur: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, norm: Norm
) -> dict[str, torch.Tensor]:
    """The per-example measurements, still on the model's device (copied to the host once per unit)."""
    margin, loss = margin_loss(logits, y)
    finite = torch.isfinite(x_cur).flatten(1).all(1)
    in_box = finite & (x_cur.flatten(1).amin(1) >= 0) & (x_cur.flatten(1).amax(1) <= 1)
    return {
        "correct": predictions(logits) == y,  # a NaN row (guarded bad output) is no prediction, never class 0
        "pert_norm": perturbation_norm(x_cur - x, norm).detach(),
        "margin": margin.detach(),
        "loss": loss.detach(),
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


def convergence_subset(survivors: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    """A seeded subset of the survivors for the convergence check: ``ceil(share * n)`` of them (at least one)."""
    n = len(survivors)
    if n == 0 or share <= 0:
        return survivors[:0]
    m = min(n, max(1, math.ceil(share * n)))
    pick = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:m].sort().values
    return survivors[pick.to(survivors.device)]


def cascade(
    model: nn.Module,
    label: str,
    attack: str,
    eps_grid: Sequence[float],
    norm: Norm,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    clean_correct: torch.Tensor,
    steps: int | None,
    step_size: float | None,
    n_classes: int,
    seed: int,
    clean_logits: torch.Tensor | None = None,
    tick: Callable[[int], None] | None = None,
    *,
    early_stop: bool = True,
    convergence: float | None = None,
    trace: AdversarialTrace | None = None,
) -> pd.DataFrame:
    """Attack one batch over an ascending eps grid, re-attacking only the survivors; one row per example and eps.

    The rows' logits are those of the forward pass that decided "fooled" (so ``correct`` always agrees with it);
    examples not attacked keep their ``clean_logits`` (computed here when not given). No eps costs an extra
    full-batch forward pass. Every row records the passes spent on its example at its eps (the ledger).

    The model runs guarded (:class:`~..checks.logits.GuardedLogits`), for the attack's own calls too: a bad output
    (NaN, a tuple, another shape) is a NaN row, no prediction, and fails the run's "model outputs finite" check
    instead of crashing the attack or becoming class 0.

    ``convergence``: the share of each eps's survivors (seeded) that are attacked again with twice the steps and
    one more restart (:func:`convergence_subset`); the rows record which of them that rerun broke. The rerun is a
    check: it changes no row's outcome.

    ``trace``: receives every example's point after each eps (and which examples were attacked there), for
    ``--save-adversarial`` and :func:`robustbench_filters.api.attack.attack`; recording changes nothing the cascade computes.
    """
    info = get_attack(attack)
    model = GuardedLogits(model, n_classes)
    counter = CountingModel(model)
    x_cur = x.clone()
    if clean_logits is None:
        with torch.no_grad():
            clean_logits = model(x)
    logits = clean_logits.detach().float().clone()
    # Who fooled each example, kept on the device: -1 nobody (yet), 0 the clean model, c >= 1 component c - 1.
    components: list[str] = []
    fooled_code = torch.where(clean_correct, -1, 0)
    n, dev = len(y), x.device
    grid = sorted(eps_grid)
    per_eps: list[dict[str, torch.Tensor]] = []
    for k, eps in enumerate(grid):
        led = {key: torch.zeros(n, dtype=torch.float64, device=dev) for key in ("fwd", "bwd", "conv_fwd", "conv_bwd")}
        exact = torch.ones(n, dtype=torch.bool, device=dev)
        conv_code = torch.zeros(n, dtype=torch.int64, device=dev)
        idx = (fooled_code < 0).nonzero().squeeze(1)  # a sync: the survivor count sets the next attack's batch
        attacked = bool(len(idx)) and eps > 0
        if attacked:
            torch.manual_seed(unit_seed(seed, label, attack, k, int(ids[0])))
            params = AttackParams(
                eps=eps, norm=norm, steps=steps, step_size=step_size, seed=unit_seed(seed, k), n_classes=n_classes,
                early_stop=early_stop,
            )  # fmt: skip
            survivors = idx
            for st in run_components(
                info.build(counter, params), counter, model, x, y, idx, eps, norm, info.minimum_norm
            ):
                x_cur[st.idx] = st.x_adv
                logits[st.idx] = st.logits
                led["fwd"][st.idx] += st.fwd
                led["bwd"][st.idx] += st.bwd
                exact[st.idx] &= st.exact
                if st.component not in components:
                    components.append(st.component)
                # integer-index updates need no host-device sync (a boolean mask index would)
                code = components.index(st.component) + 1
                fooled_code[st.idx] = torch.where(st.fooled, code, fooled_code[st.idx])
                survivors = st.idx[~st.fooled]
            if convergence is not None and info.converges:
                key = (seed, label, attack, k, int(ids[0]))
                pick = convergence_subset(survivors, convergence, unit_seed(*key, "subset"))
                if len(pick):
                    torch.manual_seed(unit_seed(*key, "converge"))
                    conv_code[pick] = 1
                    stronger = info.build(counter, replace(params, converge=True))
                    for st in run_components(stronger, counter, model, x, y, pick, eps, norm, info.minimum_norm):
                        led["conv_fwd"][st.idx] += st.fwd
                        led["conv_bwd"][st.idx] += st.bwd
                        conv_code[st.idx] = torch.where(st.fooled, 2, conv_code[st.idx])
        per_eps.append(
            {**_row_stats(x, x_cur, y, logits, norm), "fooled_code": fooled_code.clone(), **led,
             "cost_exact": exact, "conv_code": conv_code}
        )  # fmt: skip
        if trace is not None:
            trace.record(x_cur, idx if attacked else None)
        if tick is not None:
            tick(1)
    host, clean_host = _to_host(per_eps, clean_correct)
    names = ["clean", *components]
    frames = []
    for k, eps in enumerate(grid):
        fooled_by = ["" if c < 0 else names[c] for c in host["fooled_code"][k].tolist()]
        frames.append(
            _frame(label, ids, attack, eps, norm, {key: v[k] for key, v in host.items()}, clean_host, fooled_by)
        )
    return pd.concat(frames, ignore_index=True)
