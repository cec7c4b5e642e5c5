"""Verified robust accuracy as a runner measurement (``robfilt certify --method ibp|crown-ibp|crown``).

One unit per (model, batch). For its examples the unit computes, at every Linf eps of the run (ascending):

- ``clean_correct``: the model's clean prediction is the label;
- ``robust``: the default attack (``apgd-adaptive``) found no misclassified point within eps. An example broken at
  a smaller eps is broken at every larger one (its point lies in the larger box), so each eps attacks only the
  survivors of the last;
- ``verified``: every wrong class's margin lower bound over ``B_inf(x, eps) ∩ [0, 1]^d`` exceeds ``min_margin``
  (:class:`~.verify.Verifier`). Every clean-correct example is bounded, broken or not: a bound the attack
  contradicts is the soundness check's evidence. An example that fails to verify at an eps is not bounded at the
  larger ones (a bigger box only loosens the bound); it counts as not verified there, a conservative count that
  the ``bounded`` column records.

Each (example, eps) gets a ``status``: ``verified``, ``broken``, ``unknown`` (clean-correct, neither), or
``contradicted`` (verified and broken: a wrong bound; the run's soundness check fails and the command exits 3).
Bounds are per example (a row never depends on the batch); the attack is seeded per eps and batch, as attack runs'.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pandas as pd
import torch

from ..attacks.catalogue import DEFAULT_IMAGE_ATTACK, AttackParams, Norm
from ..attacks.image import robust_under
from ..attacks.image_models import ImageModelsMeasurement, frozen
from ..checks import FAIL, PASS, Check, ChecksSummary
from ..checks.logits import predictions
from ..configs.verified import VerifiedConfig
from ..runs.measurement import PrepareContext, Tick
from ..runs.units import Unit, unit_seed
from ..summaries.verified import VerifiedAt, VerifiedSummary
from .verify import Verifier

VERIFIED, BROKEN, UNKNOWN, CONTRADICTED = "verified", "broken", "unknown", "contradicted"
SOUNDNESS = "verified examples survive the default attack"
COLUMNS = ["model", "example_id", "label", "eps", "clean_correct", "robust", "bounded", "verified", "status",
           "worst_margin", "bound_passes"]  # fmt: skip


def status_of(clean_correct: bool, robust: bool, verified: bool) -> str:
    """One example at one eps (see the module docstring); a misclassified example is broken at every eps."""
    broken = not (clean_correct and robust)
    if verified:
        return CONTRADICTED if broken else VERIFIED
    return BROKEN if broken else UNKNOWN


class Verified(ImageModelsMeasurement):
    """Image models x Linf eps: verified, broken or unknown per example, with the attack's soundness check."""

    config: VerifiedConfig

    def prepare(self, ctx: PrepareContext) -> None:
        self.open_examples(ctx)
        probe, _ = self.source.take(self.ids[:1])
        self.shape = tuple(probe.shape[1:])
        self.verifiers: dict[int, Verifier] = {}
        for lm in self.loaded:
            lm.module.to(self.device).eval()
            # the graph is built (and checked against the model's own output) now: an unsupported model is refused
            # in one line before any folder is written
            self.verifiers[len(self.verifiers)] = Verifier(lm.module, self.shape, device=self.device, name=lm.label)

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"models": self.labels, "eps": list(c.eps), "method": c.method, "refresh": self._refresh,
                "min_margin": c.min_margin, "attack": DEFAULT_IMAGE_ATTACK, **self.described_examples()}  # fmt: skip

    @property
    def _refresh(self) -> str:
        return self.config.refresh if self.config.method == "crown" else "none"

    def plan(self) -> list[Unit]:
        return [Unit(mi, "verify", bi) for mi in range(len(self.loaded)) for bi in range(len(self.batches))]

    def work(self, unit: Unit) -> int:
        return len(self.config.eps)

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        c = self.config
        lm = self.loaded[unit.model]
        ids = self.ids[self.batches[unit.batch]]
        x, y = self.source.take(ids)
        x, y = x.to(self.device), y.to(self.device)
        with torch.no_grad():
            logits = lm.module(x)
        clean = (predictions(logits) == y).cpu()
        n_classes = self.classes[unit.model]
        template = AttackParams(eps=0.0, norm=Norm.LINF, steps=None, step_size=None, seed=int(c.seed),
                                n_classes=n_classes)  # fmt: skip
        robust, bounding = clean.clone(), clean.clone()
        rows: list[dict[str, Any]] = []
        for k, eps in enumerate(c.eps):
            alive = robust.nonzero().flatten()
            if len(alive) and eps > 0:
                params = replace(template, eps=float(eps), seed=unit_seed(c.seed, unit.model, unit.batch, k))
                with frozen([lm.module]):
                    kept = robust_under(lm.module, DEFAULT_IMAGE_ATTACK, x[alive], y[alive], params).cpu()
                robust[alive[~kept]] = False
            for i in range(len(ids)):
                verdict = None
                if bounding[i]:
                    verdict = self.verifiers[unit.model].verify(
                        x[i : i + 1], y[i : i + 1], float(eps), method=c.method, refresh=self._refresh,
                        min_margin=c.min_margin,
                    )[0]  # fmt: skip
                verified = bool(verdict is not None and verdict.verified)
                rows.append({
                    "model": lm.label, "example_id": int(ids[i]), "label": int(y[i]), "eps": float(eps),
                    "clean_correct": bool(clean[i]), "robust": bool(robust[i]), "bounded": verdict is not None,
                    "verified": verified, "status": status_of(bool(clean[i]), bool(robust[i]), verified),
                    "worst_margin": verdict.worst if verdict is not None else math.nan,
                    "bound_passes": verdict.passes if verdict is not None else 0.0,
                })  # fmt: skip
                if verdict is not None and not verified:
                    bounding[i] = False  # not bounded at larger eps (see the module docstring)
            tick(1)
        return pd.DataFrame(rows, columns=COLUMNS)

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        return [check_verified_survive(rows[rows["model"] == label], label)]

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> VerifiedSummary:
        c = self.config
        labels = self.labels
        models = {label: per_eps(rows[rows["model"] == label], c.eps) for label in labels}
        passes = {}
        for label in labels:
            bounded = rows[(rows["model"] == label) & rows["bounded"]]
            passes[label] = round(float(bounded["bound_passes"].mean()), 1) if len(bounded) else 0.0
        return VerifiedSummary(
            **self.summary_head(), method=c.method, refresh=self._refresh, min_margin=c.min_margin,
            attack=DEFAULT_IMAGE_ATTACK, eps=list(c.eps), models=models, bound_passes=passes,
            checks=sorted(checks, key=lambda ch: labels.index(ch.model)), checks_summary=ChecksSummary.of(checks),
        )  # fmt: skip


def per_eps(rows: pd.DataFrame, grid: tuple[float, ...]) -> list[VerifiedAt]:
    """The counts and shares of one model's rows at each eps of ``grid``."""
    out = []
    for eps in grid:
        g = rows[rows["eps"] == eps]
        n = len(g)
        counts = {s: int((g["status"] == s).sum()) for s in (VERIFIED, BROKEN, UNKNOWN, CONTRADICTED)}
        clean = int(g["clean_correct"].sum())
        robust = int((g["clean_correct"] & g["robust"]).sum())
        verified = counts[VERIFIED] + counts[CONTRADICTED]
        out.append(VerifiedAt(
            eps=float(eps), n_examples=n, clean=clean, robust=robust, verified=verified, unknown=counts[UNKNOWN],
            contradicted=counts[CONTRADICTED], clean_acc=_share(clean, n), robust_acc=_share(robust, n),
            verified_acc=_share(verified, n), unknown_share=_share(counts[UNKNOWN], n),
            verified_of_clean=verified / clean if clean else 0.0,
        ))  # fmt: skip
    return out


def _share(k: int, n: int) -> float:
    return k / n if n else 0.0


def check_verified_survive(rows: pd.DataFrame, model: str) -> Check:
    """Soundness: no verified example is broken by the default attack at the same eps (a verified example the
    attack breaks is a wrong bound, never noise: the bound is exact arithmetic plus a rounding margin)."""
    bad = rows[rows["status"] == CONTRADICTED]
    verified = int(rows["verified"].sum())
    if len(bad):
        where = ", ".join(f"example {int(r.example_id)} at eps {r.eps:g}" for r in bad.head(5).itertuples())
        return Check(SOUNDNESS, model, FAIL,
                     f"{len(bad)} of {verified} verified (example, eps) broken by {DEFAULT_IMAGE_ATTACK}: {where}; "
                     "a bound is wrong (a bug)")  # fmt: skip
    return Check(SOUNDNESS, model, PASS, f"{verified} verified (example, eps), none broken by {DEFAULT_IMAGE_ATTACK}")


__all__ = ["BROKEN", "CONTRADICTED", "UNKNOWN", "VERIFIED", "Verified", "check_verified_survive", "status_of"]
