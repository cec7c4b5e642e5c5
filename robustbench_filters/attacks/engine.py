"""The evaluation engine for image models: eps cascades, per-example rows, resume, sanity checks.

For every model and attack, eps values run in ascending order and only the examples that survived the
previous eps are attacked again: an adversarial example found at a smaller eps lies inside every larger
ball, so it counts there too. Ensembles (``autoattack``) run their components in order on the survivors,
which keeps the per-example worst case. Every measurement is a row; aggregates are recomputed from rows.

Work is split into units (model x attack x batch). Each unit is seeded from (seed, model, attack, batch),
written atomically when it finishes, and skipped on ``--resume``, so a killed run ends with the same numbers.
Under torchrun the units are sharded across ranks (:mod:`..distributed`); batches stay those of a one-process
run, so the merged rows are identical for any world size.

On a GPU the cascade keeps its bookkeeping on the device and copies each unit's rows to the host once; the only
host-device synchronisations left in our code are the survivor counts, one per eps and ensemble component,
which decide the next attack's batch. (torchattacks' own loops are out of our hands.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from .. import checks as C
from .. import distributed
from ..errors import RobfiltError, RunStateError
from ..models.resolve import LoadedModel, load_model, validate_model_ref
from ..progress import ProgressHook, null_progress
from ..results import RunWriter, load_run
from ..stats import wilson_interval
from .catalogue import ATTACKS, AttackParams, Norm, get_attack
from .common import model_labels, resolve_out

log = logging.getLogger(__name__)

# eps grids on the [0, 1] scale. Each grid's top value drives an undefended model close to 0% under PGD.
DEFAULT_EPS: dict[str, dict[Norm, list[float]]] = {
    "fashion-mnist": {Norm.LINF: [0.005, 0.01, 0.02, 0.05, 0.1], Norm.L2: [0.1, 0.25, 0.5, 1.0, 2.0]},
    "mnist": {Norm.LINF: [0.05, 0.1, 0.2, 0.3], Norm.L2: [0.5, 1.0, 2.0, 3.0]},
    "cifar10": {Norm.LINF: [1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255], Norm.L2: [0.125, 0.25, 0.5, 1.0]},
    "cifar100": {Norm.LINF: [1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255], Norm.L2: [0.125, 0.25, 0.5, 1.0]},
    "imagenet": {Norm.LINF: [0.5 / 255, 1 / 255, 2 / 255, 4 / 255], Norm.L2: [0.25, 0.5, 1.0, 2.0]},
}
AMP_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16}


@dataclass
class EvalResult:
    """What ``evaluate`` returns: the per-example rows, the summary (with checks) and the run folder."""

    rows: pd.DataFrame
    summary: dict[str, Any]
    out: Path | None


def default_eps(data: str, norm: Norm) -> list[float]:
    key = data.split(":", 1)[0].replace("-full", "")
    if key == "imagefolder":
        key = "imagenet"
    if key not in DEFAULT_EPS:
        raise RobfiltError(f"no default eps grid for data {data!r}; pass --eps, e.g. --eps 1/255,2/255,4/255.")
    return DEFAULT_EPS[key][norm]


def unit_seed(*parts: object) -> int:
    """A stable 31-bit seed from the unit's identity (independent of Python's hash randomisation)."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


def perturbation_norm(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)


def _margin_loss(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf")).amax(1)
    return true - other, F.cross_entropy(logits, y, reduction="none")


def _row_stats(
    x: torch.Tensor, x_cur: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, norm: Norm
) -> dict[str, torch.Tensor]:
    """The per-example measurements, still on the model's device (copied to the host once per unit)."""
    margin, loss = _margin_loss(logits, y)
    finite = torch.isfinite(x_cur).flatten(1).all(1)
    in_box = finite & (x_cur.flatten(1).amin(1) >= 0) & (x_cur.flatten(1).amax(1) <= 1)
    return {
        "correct": logits.argmax(1) == y,
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
    kinds = {"correct": bool, "in_box": bool, "fooled_code": np.int64}
    out = {k: host[:, i].astype(kinds.get(k, np.float64)) for i, k in enumerate(keys)}
    return out, flat[packed.numel() :].astype(bool)


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
        }
    )


def _rows(
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
) -> pd.DataFrame:
    stats = {k: v.cpu().numpy() for k, v in _row_stats(x, x_cur, y, logits, norm).items()}
    return _frame(label, ids, attack, eps, norm, stats, clean_correct.cpu().numpy(), fooled_by)


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
    steps: int,
    step_size: float | None,
    n_classes: int,
    seed: int,
    clean_logits: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Attack one batch over an ascending eps grid, re-attacking only the survivors; one row per example and eps.

    The rows' logits are those of the forward pass that decided "fooled" (so ``correct`` always agrees with it);
    examples not attacked keep their ``clean_logits`` (computed here when not given). No eps costs an extra
    full-batch forward pass.
    """
    info = get_attack(attack)
    x_cur = x.clone()
    if clean_logits is None:
        with torch.no_grad():
            clean_logits = model(x)
    logits = clean_logits.detach().float().clone()
    # Who fooled each example, kept on the device: -1 nobody (yet), 0 the clean model, c >= 1 component c - 1.
    components: list[str] = []
    fooled_code = torch.where(clean_correct, -1, 0)
    grid = sorted(eps_grid)
    per_eps: list[dict[str, torch.Tensor]] = []
    for k, eps in enumerate(grid):
        idx = (fooled_code < 0).nonzero().squeeze(1)  # a sync: the survivor count sets the next attack's batch
        if len(idx) and eps > 0:
            torch.manual_seed(unit_seed(seed, label, attack, k, int(ids[0])))
            params = AttackParams(
                eps=eps, norm=norm, steps=steps, step_size=step_size, seed=unit_seed(seed, k), n_classes=n_classes
            )
            built = info.build(model, params)
            for j, (component, fn) in enumerate(built):
                if len(idx) == 0:
                    break
                xs, ys = x[idx], y[idx]
                x_adv = fn(xs, ys).detach()
                inside = perturbation_norm(x_adv - xs, norm) <= eps + C.ball_tolerance(eps)
                if info.minimum_norm:
                    # Minimum-norm attacks may return points outside the ball: those are not evidence at this eps.
                    x_adv = torch.where(inside.view(-1, *[1] * (x.dim() - 1)), x_adv, xs)
                x_cur[idx] = x_adv
                with torch.no_grad():
                    adv_logits = model(x_adv).float()
                logits[idx] = adv_logits
                fooled = adv_logits.argmax(1) != ys
                if component not in components:
                    components.append(component)
                # integer-index updates need no host-device sync (a boolean mask index would)
                code = components.index(component) + 1
                fooled_code[idx] = torch.where(fooled, code, fooled_code[idx])
                if j + 1 < len(built):
                    idx = idx[~fooled]  # a sync, only between ensemble components
        per_eps.append({**_row_stats(x, x_cur, y, logits, norm), "fooled_code": fooled_code.clone()})
    host, clean_host = _to_host(per_eps, clean_correct)
    names = ["clean", *components]
    frames = []
    for k, eps in enumerate(grid):
        fooled_by = ["" if c < 0 else names[c] for c in host["fooled_code"][k].tolist()]
        frames.append(
            _frame(label, ids, attack, eps, norm, {key: v[k] for key, v in host.items()}, clean_host, fooled_by)
        )
    return pd.concat(frames, ignore_index=True)


def _select_examples(n_total: int, n_examples: int, seed: int) -> torch.Tensor:
    if n_examples > n_total:
        raise RobfiltError(
            f"--n-examples {n_examples} is larger than the dataset ({n_total} examples); use at most {n_total}."
        )
    perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(seed))
    return perm[:n_examples].sort().values


def _accuracy(correct: pd.Series) -> dict[str, float]:
    n, k = int(len(correct)), int(correct.sum())
    lo, hi = wilson_interval(k, n)
    return {"acc": k / n if n else float("nan"), "lo": lo, "hi": hi, "n": n, "correct": k}


def summarize_rows(rows: pd.DataFrame) -> dict[str, Any]:
    """Aggregate per model: clean accuracy and robust accuracy per attack and eps, with Wilson intervals."""
    out: dict[str, Any] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean = grp[grp.attack == "clean"]
        robust = []
        for (attack, eps), sub in grp[grp.attack != "clean"].groupby(["attack", "eps"], sort=True):
            robust.append({"attack": attack, "eps": float(eps), **_accuracy(sub.correct)})
        out[label] = {"clean": _accuracy(clean.correct), "robust": robust}
    return out


def _model_checks(
    lm: LoadedModel,
    x: torch.Tensor,
    y: torch.Tensor,
    clean_pred: torch.Tensor,
    attacks: Sequence[str],
    norm: Norm,
    eps_grid: Sequence[float],
    steps: int,
    step_size: float | None,
    n_classes: int,
    seed: int,
    check_masking: bool,
) -> list[C.Check]:
    model, label = lm.module, lm.label
    out = [
        C.check_eval_deterministic(model, label, x),
        C.check_gradients(model, label, x, y),
        C.check_logits(model, label, x),
    ]
    first = next(a for a in attacks if ATTACKS[a].build is not None)
    info = ATTACKS[first]
    torch.manual_seed(unit_seed(seed, label, "eps0"))
    (name0, fn0), *_ = info.build(
        model, AttackParams(0.0, norm, steps, 0.0 if step_size is None else step_size, seed, n_classes)
    )
    out.append(C.check_eps0(model, label, x, y, fn0, clean_pred))
    if check_masking:
        out.extend(_masking_checks(model, label, x, y, norm, eps_grid, steps, step_size, n_classes, seed))
    return out


def _acc_under(model: nn.Module, attack: str, x, y, eps, norm, steps, step_size, n_classes, seed) -> float:
    torch.manual_seed(seed)
    params = AttackParams(eps, norm, steps, step_size, seed, n_classes)
    alive = torch.ones(len(y), dtype=torch.bool, device=x.device)
    for _, fn in get_attack(attack).build(model, params):
        idx = alive.nonzero().squeeze(1)
        if not len(idx):
            break
        x_adv = fn(x[idx], y[idx]).detach()
        with torch.no_grad():
            alive[idx[model(x_adv).argmax(1) != y[idx]]] = False
    return alive.float().mean().item()


def _masking_checks(model, label, x, y, norm, eps_grid, steps, step_size, n_classes, seed) -> list[C.Check]:
    """--check-masking: huge eps reaches chance; 5x steps is not weaker; Square does not beat PGD."""
    big = 0.5 if norm is Norm.LINF else 20.0
    acc_big = _acc_under(model, "pgd", x, y, big, norm, max(steps, 20), None, n_classes, seed)
    mid = sorted(eps_grid)[len(eps_grid) // 2]
    acc = _acc_under(model, "pgd", x, y, mid, norm, steps, step_size, n_classes, seed)
    acc5 = _acc_under(
        model, "pgd", x, y, mid, norm, 5 * steps, None if step_size is None else step_size, n_classes, seed
    )
    acc_sq = _acc_under(model, "square", x, y, mid, norm, steps, step_size, n_classes, seed)
    return [
        C.check_chance(acc_big, n_classes, label, big),
        C.check_more_steps(acc, acc5, len(y), label, 5),
        C.check_blackbox(acc, acc_sq, len(y), label),
    ]


@dataclass(frozen=True)
class _Job:
    """What every unit of one evaluation shares (so the unit loop does not take twenty arguments)."""

    attacks: tuple[str, ...]
    eps_grid: list[float]
    norm: Norm
    steps: int
    step_size: float | None
    n_classes: int
    seed: int
    check_masking: bool
    device: torch.device
    amp: str | None
    amp_attacks: bool


def unit_key(mi: int, name: str, bi: int) -> str:
    """The part-file key of one unit; ``name`` is ``clean`` or an attack."""
    return f"m{mi}-{name}-b{bi:04d}"


def plan_units(n_models: int, attacks: Sequence[str], n_batches: int) -> list[tuple[int, str, int]]:
    """Every unit of a run as (model index, ``clean`` or attack, batch index), in the order ranks shard them.

    Attack units come first and clean units last, so round-robin sharding gives every rank a mix of cheap and
    expensive units and of batches.
    """
    attack_units = [(mi, a, bi) for mi in range(n_models) for a in attacks for bi in range(n_batches)]
    return attack_units + [(mi, "clean", bi) for mi in range(n_models) for bi in range(n_batches)]


def _autocast(device: torch.device, amp: str | None) -> AbstractContextManager:
    """bf16 autocast when asked for (``--amp``), otherwise nothing: fp32 stays the default everywhere."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp])


@contextlib.contextmanager
def _input_grads_only(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Freeze the weights while attacking: attacks need input gradients only.

    Autograd then keeps no weight-gradient state, and SDPA can stay on a fused kernel for a learnable attention
    bias (BSA's), since no fused CPU kernel returns a mask gradient. The caller's flags are restored afterwards.
    """
    flags = [(p, p.requires_grad) for m in modules for p in m.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _run_units(
    loaded: Sequence[LoadedModel],
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    ids: torch.Tensor,
    batches: Sequence[slice],
    mine: set[tuple[int, str, int]],
    writer: RunWriter,
    job: _Job,
    primary: bool,
    progress: ProgressHook,
) -> list[C.Check]:
    """Compute this rank's units (all of them in a one-process run); rank 0 also runs the model sanity checks."""
    dev = job.device
    non_blocking = dev.type == "cuda"  # pinned host tensors copy asynchronously to a GPU
    total, done = len(mine), 0
    all_checks: list[C.Check] = []
    for mi, lm in enumerate(loaded):
        model = lm.module.to(dev).eval()
        for bi, sl in enumerate(batches):
            todo = [a for a in ("clean", *job.attacks) if (mi, a, bi) in mine]
            if all(writer.is_done(unit_key(mi, a, bi)) for a in todo):
                done += len(todo)
                if todo:
                    progress("attack", done, total, f"{lm.label} (resumed)")
                continue
            x, y, bid = (
                x_all[sl].to(dev, non_blocking=non_blocking),
                y_all[sl].to(dev, non_blocking=non_blocking),
                ids[sl],
            )
            with torch.no_grad(), _autocast(dev, job.amp):
                clean_logits = model(x).float()
            clean_correct = clean_logits.argmax(1) == y
            for name in todo:
                key = unit_key(mi, name, bi)
                if not writer.is_done(key):
                    if name == "clean":
                        fooled = ["" if c else "clean" for c in clean_correct.tolist()]
                        rows = _rows(
                            lm.label, bid, "clean", 0.0, job.norm, x, x, y, clean_logits, clean_correct, fooled
                        )
                    else:
                        with _autocast(dev, job.amp if job.amp_attacks else None):
                            rows = cascade(
                                model, lm.label, name, job.eps_grid, job.norm, x, y, bid, clean_correct, job.steps,
                                job.step_size, job.n_classes, job.seed, clean_logits=clean_logits,
                            )  # fmt: skip
                    writer.write_part(key, rows)
                done += 1
                progress("attack", done, total, f"{lm.label} {name}")
        if primary:
            xb, yb = x_all[:64].to(dev), y_all[:64].to(dev)
            with torch.no_grad():
                pred = model(xb).argmax(1)
            all_checks += _model_checks(
                lm, xb, yb, pred, job.attacks, job.norm, job.eps_grid, job.steps, job.step_size, job.n_classes,
                job.seed, job.check_masking,
            )  # fmt: skip
    return all_checks


def _finish(
    writer: RunWriter, labels: Sequence[str], keys: Sequence[str], job: _Job, all_checks: list[C.Check], data: str,
    n_examples: int,
) -> tuple[pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """Rank 0: merge every rank's parts, run the row-level checks, write rows.parquet and summary.json."""
    writer.refresh()
    missing = [k for k in keys if not writer.is_done(k)]
    if missing:
        raise RunStateError(
            f"{len(missing)} units have no part file (first: {missing[0]}); if ranks ran on several nodes, --out "
            "must be on a filesystem they all share. Finish the run with --resume."
        )
    rows = writer.rows()
    for label in labels:
        all_checks += [C.check_in_ball(rows, label), C.check_monotone(rows, label)]
        pf = C.check_pgd_vs_fgsm(rows, label)
        if pf is not None:
            all_checks.append(pf)
        if any(a in ("pgd", "pgd-l2") for a in job.attacks):
            all_checks.append(C.check_step_budget(job.steps, job.step_size, job.eps_grid, label))
    summary = {
        "kind": "attack",
        "family": "image",
        "data": data,
        "n_examples": n_examples,
        "seed": job.seed,
        "attacks": list(job.attacks),
        "eps": job.eps_grid,
        "norm": job.norm.value,
        "steps": job.steps,
        "step_size": job.step_size if job.step_size is not None else "0.15*eps",
        "precision": {"clean": job.amp or "fp32", "attacks": (job.amp if job.amp_attacks else None) or "fp32"},
        "models": summarize_rows(rows),
        "checks": [c.to_dict() for c in all_checks],
        "checks_summary": C.summarize(all_checks),
    }
    writer.finish(rows, summary)
    return rows, summary


def evaluate(
    models: Sequence[str | nn.Module],
    attacks: Sequence[str] = ("pgd",),
    eps: Sequence[float] | None = None,
    data: str = "fashion-mnist",
    n_examples: int = 256,
    seed: int = 0,
    out: str | Path | None = None,
    *,
    norm: str | None = None,
    steps: int = 20,
    step_size: float | None = None,
    batch_size: int = 128,
    size: str = "micro",
    checkpoint: str | None = "zoo",
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    check_masking: bool = False,
    data_root: str | None = None,
    progress: ProgressHook | None = None,
    amp: str | None = None,
    amp_attacks: bool = False,
    allow_pickle: bool = False,
) -> EvalResult:
    """Evaluate image models under attacks on the same examples; returns rows and a checked summary.

    Launched by torchrun, every rank calls this with the same arguments: units are sharded across ranks, rank 0
    merges and checks, and every rank returns the merged result (``out`` must be a folder all ranks share).

    Args:
        models: registry names (``deit-grc``), ``timm:<arch>``, ``pkg.mod:factory`` or modules.
        attacks: catalogue names; see ``robustbench_filters.attacks.catalogue.ATTACKS``.
        eps: perturbation budgets on the [0, 1] input scale; default: the dataset's grid.
        data: dataset spec (bundled ``fashion-mnist`` by default).
        n_examples: examples drawn (seeded) from the test split, shared by all models.
        out: run folder; None keeps everything in a temporary folder.
        device: ``cpu`` or ``cuda`` (under torchrun: each rank's own GPU).
        amp: ``bf16`` runs the clean evaluation under autocast; attacks stay fp32 unless ``amp_attacks``.
    """
    progress = progress or null_progress
    norm_e = (
        Norm(norm) if norm else ATTACKS[attacks[0]].default_norm if attacks and attacks[0] in ATTACKS else Norm.LINF
    )
    validated = _validate(models, attacks, eps, n_examples, steps, step_size, batch_size, norm_e, device)
    if amp is not None and amp not in AMP_DTYPES:
        raise RobfiltError(f"unknown --amp {amp!r}; use {', '.join(AMP_DTYPES)} (or leave it off for fp32).")
    if amp_attacks and amp is None:
        raise RobfiltError("--amp-attacks needs --amp bf16 (it runs the attacks in that precision too).")
    ctx = distributed.init(device)
    device = distributed.local_device(device, ctx)
    if ctx.enabled and out is None:
        raise RobfiltError("a distributed run (torchrun) needs --out: a folder on a filesystem all ranks share.")
    eps_grid = sorted(eps) if eps is not None else default_eps(data, norm_e)
    from ..data import load_images

    images = load_images(data, split="test", root=data_root)
    ids = _select_examples(len(images.y), n_examples, seed)
    labels = model_labels(models)
    config = {
        "models": labels,
        "attacks": list(attacks),
        "eps": eps_grid,
        "norm": norm_e.value,
        "steps": steps,
        "step_size": step_size,
        "data": data,
        "data_checksum": images.checksum,
        "n_examples": n_examples,
        "example_ids_sha256": _ids_hash(ids),
        "batch_size": batch_size,
        "size": size,
        "checkpoint": checkpoint,
        "check_masking": check_masking,
    }
    if amp is not None:  # only when set, so fp32 runs keep their fingerprints
        config |= {"amp": amp, "amp_attacks": amp_attacks}
    out, tmp = resolve_out(out)
    try:
        loaded = [
            m_
            if isinstance(m_, LoadedModel)
            else (
                load_model(m_, size, checkpoint, seed, allow_pickle)
                if isinstance(m_, str)
                else LoadedModel(labels[i], "custom", m_.eval(), "module")
            )
            for i, m_ in enumerate(models)
        ]
        dev = torch.device(device)
        x_all, y_all = images.x[ids], images.y[ids]
        for lm in loaded:
            _check_fits(lm, x_all[:1], len(images.classes), data)
        if dev.type == "cuda":
            x_all, y_all = x_all.pin_memory(), y_all.pin_memory()
        job = _Job(
            tuple(attacks), eps_grid, norm_e, steps, step_size, len(images.classes), seed, check_masking, dev, amp,
            amp_attacks,
        )  # fmt: skip
        batches = [slice(i, i + batch_size) for i in range(0, len(ids), batch_size)]
        units = plan_units(len(loaded), attacks, len(batches))
        mine = set(distributed.shard(units, ctx.rank, ctx.world_size))

        def make_writer(primary: bool) -> RunWriter:
            extra = {"family": "image", "world_size": ctx.world_size}
            return RunWriter(
                out, "attack", config, seed=seed, resume=resume, overwrite=overwrite, extra=extra, primary=primary
            )

        with distributed.shared_run(ctx, make_writer) as writer, _input_grads_only([lm.module for lm in loaded]):
            all_checks = distributed.all_or_none(
                ctx, lambda: _run_units(loaded, x_all, y_all, ids, batches, mine, writer, job, ctx.is_primary, progress)
            )
            keys = [unit_key(*u) for u in units]
            merged = distributed.all_or_none(
                ctx,
                lambda: _finish(writer, labels, keys, job, all_checks, data, n_examples) if ctx.is_primary else None,
            )
        if merged is not None:
            rows, summary = merged
        else:  # the other ranks read what rank 0 merged
            run = load_run(out)
            rows = run.rows
            summary = {k: v for k, v in run.summary.items() if k not in ("schema_version", "fingerprint")}
        del validated
        return EvalResult(rows=rows, summary=summary, out=None if tmp else Path(out))
    finally:
        if tmp is not None:
            tmp.cleanup()


def _check_fits(lm: LoadedModel, x: torch.Tensor, n_classes: int, data: str) -> None:
    """Refuse, before any folder is written, a model that cannot take this data or has the wrong classes."""
    try:
        with torch.no_grad(), _input_grads_only([lm.module]):
            out = lm.module.eval()(x)
    except Exception as exc:  # noqa: BLE001 - any failure here means the model does not fit the data
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise RobfiltError(
            f"model {lm.label} cannot take {data} images of shape {tuple(x.shape[1:])} ({first}); "
            "pick matching --data/--size or a model built for this input."
        ) from None
    if out.dim() != 2 or out.shape[1] != n_classes:
        raise RobfiltError(
            f"model {lm.label} returns outputs of shape {tuple(out.shape)} but {data} has {n_classes} classes; "
            "the model must return (batch, classes) logits."
        )


def _ids_hash(ids: torch.Tensor) -> str:
    import hashlib

    return hashlib.sha256(ids.numpy().astype(np.int64).tobytes()).hexdigest()[:16]


def _validate(models, attacks, eps, n_examples, steps, step_size, batch_size, norm: Norm, device: str) -> bool:
    """All user input is checked before any folder is created or any model is loaded."""
    if not models:
        raise RobfiltError("no model given; pass --model NAME[,NAME...].")
    if not attacks:
        raise RobfiltError("no attack given; pass --attack NAME[,NAME...].")
    for m in models:
        if isinstance(m, str):
            family = validate_model_ref(m)
            family = "deit" if family in ("timm", "custom") else family
            for a in attacks:
                info = get_attack(a, family)
                if info.build is None or info.kind != "adversarial":
                    raise RobfiltError(f"attack {a!r} is not an image adversarial attack; see `robfilt attack --help`.")
                if norm not in info.norms:
                    raise RobfiltError(f"attack {a!r} does not support --norm {norm.value}; use {info.norms[0].value}.")
    if eps is not None:
        if len(eps) == 0:
            raise RobfiltError("--eps is empty; give values like 0.01,0.02 or 8/255.")
        for e in eps:
            if not (e >= 0.0) or math.isnan(e):
                raise RobfiltError(f"eps {e} is negative or NaN; eps is a budget on the [0, 1] input scale.")
            if norm is Norm.LINF and e > 1.0:
                raise RobfiltError(f"eps {e:g} is above 1 on the [0, 1] input scale; did you mean {e:g}/255?")
    if n_examples is None or n_examples <= 0:
        raise RobfiltError(f"--n-examples must be positive, got {n_examples}.")
    if steps <= 0:
        raise RobfiltError(f"--steps must be positive, got {steps}.")
    if step_size is not None and not (step_size > 0 and math.isfinite(step_size)):
        raise RobfiltError(f"--step-size must be a positive number, got {step_size}.")
    if batch_size <= 0:
        raise RobfiltError(f"--batch-size must be positive, got {batch_size}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise RobfiltError(f"unknown --device {device!r}; use cpu or cuda.")
    return True
