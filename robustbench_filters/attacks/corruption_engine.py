"""Corruption robustness for image models: accuracy per corruption and severity, and mean corruption error.

Every model sees the same seeded test examples and the same corrupted images (noise is pre-generated per
example, see :mod:`.corruptions`). Rows use the attack run-folder format: ``kind="contamination"``,
``attack="corruption:<name>"``, ``eps`` = the severity (1-5), ``norm=""``, ``pert_norm`` = L2 distance to the clean
image; clean rows have ``kind="clean"``, ``attack="clean"``, ``eps=0``. Aggregates are recomputed from the rows.

Corruption error, following Hendrycks & Dietterich (2019) with ``baseline`` (default ``deit``) in AlexNet's
place: for model f and corruption c, ``CE_c = sum_s E(f, c, s) / sum_s E(base, c, s)`` (E = top-1 error, s over
the severities run), and ``mCE = mean_c CE_c`` (1.0 = as robust as the baseline, lower is better). The relative
variant subtracts clean error first: ``relCE_c = sum_s (E(f,c,s) - E(f,clean)) / sum_s (E(base,c,s) -
E(base,clean))``. Both are reported only when the baseline is among the models; a corruption on which the
baseline makes no error (or no extra error) has an undefined CE (null) and is left out of the mean.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from .. import checks as C
from ..errors import RobfiltError
from ..models.resolve import LoadedModel, load_model, validate_model_ref
from ..progress import ProgressHook, null_progress
from ..results import RunWriter
from . import lm_checks as LC
from .catalogue import get_attack
from .common import model_labels, resolve_out
from .corruptions import CORRUPTIONS, SEVERITIES, check_severity, corrupt, get_corruption, parameter_table, pregenerate
from .engine import EvalResult, _accuracy, _ids_hash, _margin_loss, _select_examples, unit_seed

log = logging.getLogger(__name__)

PREFIX = "corruption"
DEFAULT_BASELINE = "deit"


def parse_corruptions(attacks: Sequence[str]) -> list[str]:
    """``corruption`` means all of them; ``corruption:<name>`` picks one. Other attacks are refused here."""
    names: list[str] = []
    for a in attacks:
        head, _, tail = a.partition(":")
        if head != PREFIX:
            raise RobfiltError(
                f"attack {a!r} cannot run in a corruption evaluation; run adversarial attacks in a separate command."
            )
        for n in [tail] if tail else list(CORRUPTIONS):
            get_corruption(n)
            if n not in names:
                names.append(n)
    return names


def _rows(label, ids, kind, attack, severity, x, x_c, y, logits, clean_correct) -> pd.DataFrame:
    margin, loss = _margin_loss(logits, y)
    flat = x_c.flatten(1)
    in_box = torch.isfinite(flat).all(1) & (flat.amin(1) >= 0) & (flat.amax(1) <= 1)
    correct = logits.argmax(1) == y
    fooled = [
        "" if c else ("clean" if not cc else attack)
        for c, cc in zip(correct.tolist(), clean_correct.tolist(), strict=True)
    ]
    return pd.DataFrame(
        {
            "model": label,
            "example_id": ids.numpy().astype(np.int64),
            "kind": kind,
            "attack": attack,
            "eps": float(severity),
            "norm": "",
            "correct": correct.cpu().numpy(),
            "clean_correct": clean_correct.cpu().numpy(),
            "pert_norm": (x_c - x).flatten(1).norm(dim=1).double().cpu().numpy(),
            "margin": margin.double().cpu().numpy(),
            "loss": loss.double().cpu().numpy(),
            "in_box": in_box.cpu().numpy(),
            "fooled_by": fooled,
        }
    )


def corruption_rows(
    model: nn.Module,
    label: str,
    name: str,
    severities: Sequence[int],
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    clean_correct: torch.Tensor,
    seed: int,
) -> pd.DataFrame:
    """One corruption at every severity on one batch; the noise is drawn per example, once for all severities."""
    noise = pregenerate(name, tuple(x.shape[1:]), [unit_seed(seed, name, int(i)) for i in ids])
    frames = []
    for s in severities:
        x_c = corrupt(x, name, s, noise)
        with torch.no_grad():
            logits = model(x_c)
        frames.append(_rows(label, ids, "contamination", f"{PREFIX}:{name}", s, x, x_c, y, logits, clean_correct))
    return pd.concat(frames, ignore_index=True)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def summarize_corruption_rows(rows: pd.DataFrame, baseline: str | None = DEFAULT_BASELINE) -> dict[str, Any]:
    """Per model: clean accuracy, accuracy per corruption and severity, mean accuracy, and (m)CE vs ``baseline``."""
    out: dict[str, Any] = {}
    errors: dict[str, dict[str, float]] = {}
    clean_err: dict[str, float] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean = _accuracy(grp[grp.attack == "clean"].correct)
        per: dict[str, Any] = {}
        cor = grp[grp.kind == "contamination"]
        errors[label], clean_err[label] = {}, 1.0 - clean["acc"]
        order = {f"{PREFIX}:{n}": i for i, n in enumerate(CORRUPTIONS)}
        for attack, sub in sorted(cor.groupby("attack"), key=lambda t: order.get(t[0], len(order))):
            name = attack.split(":", 1)[1]
            by_sev = [{"severity": int(s), **_accuracy(g.correct)} for s, g in sub.groupby("eps", sort=True)]
            mean_acc = float(np.mean([c["acc"] for c in by_sev]))
            per[name] = {"by_severity": by_sev, "mean_acc": mean_acc}
            errors[label][name] = float(sum(1.0 - c["acc"] for c in by_sev))
        out[label] = {
            "clean": clean,
            "corruptions": per,
            "mean_acc": float(np.mean([p["mean_acc"] for p in per.values()])) if per else float("nan"),
            "mce": None,
            "relative_mce": None,
        }
    if baseline is not None and baseline in errors:
        base = errors[baseline]
        n_sev = {name: len(p["by_severity"]) for name, p in out[baseline]["corruptions"].items()}
        for label, m in out.items():
            ce, rel = {}, {}
            for name, err in errors[label].items():
                ce[name] = _ratio(err, base.get(name, 0.0))
                rel[name] = _ratio(
                    err - n_sev[name] * clean_err[label], base.get(name, 0.0) - n_sev[name] * clean_err[baseline]
                )
                m["corruptions"][name]["ce"], m["corruptions"][name]["relative_ce"] = ce[name], rel[name]
            ok = [v for v in ce.values() if v is not None]
            ok_rel = [v for v in rel.values() if v is not None]
            m["mce"] = float(np.mean(ok)) if ok else None
            m["relative_mce"] = float(np.mean(ok_rel)) if ok_rel else None
    return out


def _validate(models, attacks, severities, norm, batch_size, n_examples, device) -> list[str]:
    if not models:
        raise RobfiltError("no model given; pass --model NAME[,NAME...].")
    if norm is not None:
        raise RobfiltError("--norm does not apply to corruptions; they are measured by their L2 distance.")
    for m in models:
        if isinstance(m, str):
            family = validate_model_ref(m)
            get_attack(PREFIX, "deit" if family in ("timm", "custom") else family)
    names = parse_corruptions(attacks)
    if not severities:
        raise RobfiltError("no severities given; use some of 1-5.")
    for s in severities:
        check_severity(s)
    if n_examples is None or n_examples <= 0:
        raise RobfiltError(f"--n-examples must be positive, got {n_examples}.")
    if batch_size <= 0:
        raise RobfiltError(f"--batch-size must be positive, got {batch_size}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")
    if device != "cpu" and not device.startswith("cuda"):
        raise RobfiltError(f"unknown --device {device!r}; use cpu or cuda.")
    return names


def _model_checks(model: nn.Module, label: str, x: torch.Tensor, names: Sequence[str], seed: int) -> list[C.Check]:
    ids = torch.arange(len(x))
    with torch.no_grad():
        pred = model(x).argmax(1)
        moved, changed = 0.0, 0
        for name in names:
            noise = pregenerate(name, tuple(x.shape[1:]), [unit_seed(seed, name, int(i)) for i in ids])
            x0 = corrupt(x, name, 0, noise)
            moved = max(moved, float((x0 - x).abs().max()))
            changed += int((model(x0).argmax(1) != pred).sum())
    return [
        C.check_eval_deterministic(model, label, x),
        C.check_logits(model, label, x),
        LC.check_severity0(label, moved, changed, len(x)),
    ]


def evaluate_corruptions(
    models: Sequence[str | nn.Module],
    attacks: Sequence[str] = (PREFIX,),
    data: str = "fashion-mnist",
    n_examples: int = 256,
    seed: int = 0,
    out: str | Path | None = None,
    *,
    severities: Sequence[int] = SEVERITIES,
    baseline: str | None = DEFAULT_BASELINE,
    norm: str | None = None,
    batch_size: int = 128,
    size: str = "micro",
    checkpoint: str | None = "zoo",
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    data_root: str | None = None,
    progress: ProgressHook | None = None,
    **_: Any,
) -> EvalResult:
    """Evaluate image models on corrupted test images (all corruptions x severities) on shared examples.

    Args:
        attacks: ``corruption`` (all five) and/or ``corruption:<name>`` (see :data:`.corruptions.CORRUPTIONS`).
        severities: which of 1-5 to run (0, the identity, is allowed and equals clean).
        baseline: the model label mCE is normalised by (reported only when that model is in ``models``).
        out: run folder; None keeps everything in a temporary folder.
    """
    progress = progress or null_progress
    names = _validate(models, attacks, severities, norm, batch_size, n_examples, device)
    sev = sorted(set(int(s) for s in severities))
    from ..data import load_images

    images = load_images(data, split="test", root=data_root)
    ids = _select_examples(len(images.y), n_examples, seed)
    labels = model_labels(models)
    config = {
        "models": labels,
        "attacks": list(attacks),
        "corruptions": names,
        "severities": sev,
        "data": data,
        "data_checksum": images.checksum,
        "n_examples": n_examples,
        "example_ids_sha256": _ids_hash(ids),
        "batch_size": batch_size,
        "size": size,
        "checkpoint": checkpoint,
        "baseline": baseline,
    }
    out, tmp = resolve_out(out)
    try:
        loaded = [
            load_model(m, size, checkpoint, seed)
            if isinstance(m, str)
            else LoadedModel(labels[i], "custom", m.eval(), "module")
            for i, m in enumerate(models)
        ]
        dev = torch.device(device)
        x_all, y_all = images.x[ids], images.y[ids]
        batches = [slice(i, i + batch_size) for i in range(0, len(ids), batch_size)]
        total, done = len(loaded) * len(batches) * (1 + len(names)), 0
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
                        writer.write_part(
                            key, _rows(lm.label, bid, "clean", "clean", 0, x, x, y, clean_logits, clean_correct)
                        )
                    done += 1
                    progress("corruption", done, total, f"{lm.label} clean")
                    for name in names:
                        key = f"m{mi}-{name}-b{bi:04d}"
                        if not writer.is_done(key):
                            writer.write_part(
                                key, corruption_rows(model, lm.label, name, sev, x, y, bid, clean_correct, seed)
                            )
                        done += 1
                        progress("corruption", done, total, f"{lm.label} {name}")
                all_checks += _model_checks(model, lm.label, x_all[:32].to(dev), names, seed)
            rows = writer.rows()
            for label in labels:
                all_checks += [
                    c for c in (LC.check_corruption_box(rows, label), LC.check_severity_distance(rows, label)) if c
                ]
            summary = {
                "kind": "corruption",
                "family": "image",
                "data": data,
                "n_examples": n_examples,
                "seed": seed,
                "attacks": list(attacks),
                "corruptions": names,
                "severities": sev,
                "parameters": [p for p in parameter_table() if p["corruption"] in names],
                "baseline": baseline if baseline in labels else None,
                "models": summarize_corruption_rows(rows, baseline),
                "checks": [c.to_dict() for c in sorted(all_checks, key=lambda c: labels.index(c.model))],
                "checks_summary": C.summarize(all_checks),
            }
            writer.finish(rows, summary)
        return EvalResult(rows=rows, summary=summary, out=None if tmp else Path(out))
    finally:
        if tmp is not None:
            tmp.cleanup()
