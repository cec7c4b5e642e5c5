"""The evaluation engine for image models: eps cascades, per-example rows, resume, sanity checks.

For every model and attack, eps values run in ascending order and only the examples that survived the
previous eps are attacked again: an adversarial example found at a smaller eps lies inside every larger
ball, so it counts there too. Ensembles (``autoattack``) run their components in order on the survivors,
which keeps the per-example worst case. Every measurement is a row; aggregates are recomputed from rows.

Work is split into units (model x attack x batch). Each unit is seeded from (seed, model, attack, batch),
written atomically when it finishes, and skipped on ``--resume``, so a killed run ends with the same numbers.
"""

from __future__ import annotations

import logging
import math
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from .. import checks as C
from ..errors import RobfiltError
from ..models.resolve import LoadedModel, load_model, validate_model_ref
from ..progress import ProgressHook, null_progress
from ..results import RunWriter
from ..stats import wilson_interval
from .catalogue import ATTACKS, AttackParams, Norm, get_attack

log = logging.getLogger(__name__)

# eps grids on the [0, 1] scale. Each grid's top value drives an undefended model close to 0% under PGD.
DEFAULT_EPS: dict[str, dict[Norm, list[float]]] = {
    "fashion-mnist": {Norm.LINF: [0.005, 0.01, 0.02, 0.05, 0.1], Norm.L2: [0.1, 0.25, 0.5, 1.0, 2.0]},
    "mnist": {Norm.LINF: [0.05, 0.1, 0.2, 0.3], Norm.L2: [0.5, 1.0, 2.0, 3.0]},
    "cifar10": {Norm.LINF: [1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255], Norm.L2: [0.125, 0.25, 0.5, 1.0]},
    "cifar100": {Norm.LINF: [1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255], Norm.L2: [0.125, 0.25, 0.5, 1.0]},
    "imagenet": {Norm.LINF: [0.5 / 255, 1 / 255, 2 / 255, 4 / 255], Norm.L2: [0.25, 0.5, 1.0, 2.0]},
}


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
    margin, loss = _margin_loss(logits, y)
    finite = torch.isfinite(x_cur).flatten(1).all(1)
    in_box = finite & (x_cur.flatten(1).amin(1) >= 0) & (x_cur.flatten(1).amax(1) <= 1)
    return pd.DataFrame(
        {
            "model": label,
            "example_id": ids.cpu().numpy().astype(np.int64),
            "kind": "adversarial",
            "attack": attack,
            "eps": float(eps),
            "norm": norm.value,
            "correct": (logits.argmax(1) == y).cpu().numpy(),
            "clean_correct": clean_correct.cpu().numpy(),
            "pert_norm": perturbation_norm(x_cur - x, norm).detach().cpu().numpy().astype(np.float64),
            "margin": margin.detach().cpu().numpy().astype(np.float64),
            "loss": loss.detach().cpu().numpy().astype(np.float64),
            "in_box": in_box.cpu().numpy(),
            "fooled_by": fooled_by,
        }
    )


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
) -> pd.DataFrame:
    """Attack one batch over an ascending eps grid, re-attacking only the survivors; one row per example and eps."""
    info = get_attack(attack)
    robust = clean_correct.clone()
    x_cur = x.clone()
    fooled_by = ["" if c else "clean" for c in clean_correct.tolist()]
    frames = []
    for k, eps in enumerate(sorted(eps_grid)):
        idx = robust.nonzero().squeeze(1)
        if len(idx) and eps > 0:
            torch.manual_seed(unit_seed(seed, label, attack, k, int(ids[0])))
            params = AttackParams(
                eps=eps, norm=norm, steps=steps, step_size=step_size, seed=unit_seed(seed, k), n_classes=n_classes
            )
            for component, fn in info.build(model, params):
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
                    fooled = model(x_adv).argmax(1) != ys
                for j in idx[fooled].tolist():
                    fooled_by[j] = component
                robust[idx[fooled]] = False
                idx = idx[~fooled]
        with torch.no_grad():
            logits = model(x_cur)
        frames.append(_rows(label, ids, attack, eps, norm, x, x_cur, y, logits, clean_correct, list(fooled_by)))
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
    x_cur, alive = x.clone(), torch.ones(len(y), dtype=torch.bool)
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
) -> EvalResult:
    """Evaluate image models under attacks on the same examples; returns rows and a checked summary.

    Args:
        models: registry names (``deit-grc``), ``timm:<arch>``, ``pkg.mod:factory`` or modules.
        attacks: catalogue names; see ``robustbench_filters.attacks.catalogue.ATTACKS``.
        eps: perturbation budgets on the [0, 1] input scale; default: the dataset's grid.
        data: dataset spec (bundled ``fashion-mnist`` by default).
        n_examples: examples drawn (seeded) from the test split, shared by all models.
        out: run folder; None keeps everything in a temporary folder.
    """
    progress = progress or null_progress
    norm_e = (
        Norm(norm) if norm else ATTACKS[attacks[0]].default_norm if attacks and attacks[0] in ATTACKS else Norm.LINF
    )
    validated = _validate(models, attacks, eps, n_examples, steps, step_size, batch_size, norm_e, device)
    eps_grid = sorted(eps) if eps is not None else default_eps(data, norm_e)
    from ..data import load_images

    images = load_images(data, split="test", root=data_root)
    ids = _select_examples(len(images.y), n_examples, seed)
    labels = [
        m if isinstance(m, str) else getattr(getattr(m, "robfilt_spec", None), "name", f"model{i}")
        for i, m in enumerate(models)
    ]
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
    tmp = None
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="robfilt-")
        out = Path(tmp.name) / "run"
    try:
        loaded = [
            m_
            if isinstance(m_, LoadedModel)
            else (
                load_model(m_, size, checkpoint, seed)
                if isinstance(m_, str)
                else LoadedModel(labels[i], "custom", m_.eval(), "module")
            )
            for i, m_ in enumerate(models)
        ]
        dev = torch.device(device)
        x_all, y_all = images.x[ids], images.y[ids]
        n_classes = len(images.classes)
        batches = [slice(i, i + batch_size) for i in range(0, len(ids), batch_size)]
        total = len(loaded) * len(batches) * (1 + len(attacks))
        done = 0
        all_checks: list[C.Check] = []
        with RunWriter(
            out, "attack", config, seed=seed, resume=resume, overwrite=overwrite, extra={"family": "image"}
        ) as writer:
            for mi, lm in enumerate(loaded):
                model = lm.module.to(dev).eval()
                for bi, sl in enumerate(batches):
                    x, y, bid = x_all[sl].to(dev), y_all[sl].to(dev), ids[sl]
                    with torch.no_grad():
                        clean_logits = model(x)
                    clean_correct = clean_logits.argmax(1) == y
                    key = f"m{mi}-clean-b{bi:04d}"
                    if not writer.is_done(key):
                        fooled = ["" if c else "clean" for c in clean_correct.tolist()]
                        writer.write_part(
                            key,
                            _rows(lm.label, bid, "clean", 0.0, norm_e, x, x, y, clean_logits, clean_correct, fooled),
                        )
                    done += 1
                    progress("attack", done, total, f"{lm.label} clean")
                    for attack in attacks:
                        key = f"m{mi}-{attack}-b{bi:04d}"
                        if not writer.is_done(key):
                            rows = cascade(
                                model,
                                lm.label,
                                attack,
                                eps_grid,
                                norm_e,
                                x,
                                y,
                                bid,
                                clean_correct,
                                steps,
                                step_size,
                                n_classes,
                                seed,
                            )
                            writer.write_part(key, rows)
                        done += 1
                        progress("attack", done, total, f"{lm.label} {attack}")
                xb, yb = x_all[:64].to(dev), y_all[:64].to(dev)
                with torch.no_grad():
                    pred = model(xb).argmax(1)
                all_checks += _model_checks(
                    lm, xb, yb, pred, attacks, norm_e, eps_grid, steps, step_size, n_classes, seed, check_masking
                )
            rows = writer.rows()
            for label in labels:
                all_checks += [C.check_in_ball(rows, label), C.check_monotone(rows, label)]
                pf = C.check_pgd_vs_fgsm(rows, label)
                if pf is not None:
                    all_checks.append(pf)
                if any(a in ("pgd", "pgd-l2") for a in attacks):
                    all_checks.append(C.check_step_budget(steps, step_size, eps_grid, label))
            summary = {
                "kind": "attack",
                "family": "image",
                "data": data,
                "n_examples": n_examples,
                "seed": seed,
                "attacks": list(attacks),
                "eps": eps_grid,
                "norm": norm_e.value,
                "steps": steps,
                "step_size": step_size if step_size is not None else "0.15*eps",
                "models": summarize_rows(rows),
                "checks": [c.to_dict() for c in all_checks],
                "checks_summary": C.summarize(all_checks),
            }
            writer.finish(rows, summary)
        del validated
        return EvalResult(rows=rows, summary=summary, out=None if tmp else Path(out))
    finally:
        if tmp is not None:
            tmp.cleanup()


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
