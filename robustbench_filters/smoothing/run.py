"""Randomized-smoothing certification as a runner measurement (``robfilt certify``).

Units are (model, ``certify``, batch) and, on the first ``attack_examples`` examples, (model, ``attack``, batch).
A certify unit runs CERTIFY (:mod:`.certify`) for its examples at every sigma; its noise is seeded per example id,
so a unit's rows do not depend on the batch, the rank or the order. An attack unit re-derives the same
certificates for its examples (deterministic, so identical to the certify unit's) and attacks the smoothed
classifier with SmoothAdv PGD at each attack radius: certified accuracy must never exceed what the attack leaves.

Rows (one table, ``kind`` tells them apart): ``certificate`` rows (:data:`.rows.ROW_COLUMNS`) and ``attack`` rows
(example, sigma, radius, robust, certified, contradicted). The summary holds certified accuracy with exact
intervals at ``radii``, the certified-accuracy curve, the abstention rate, the smoothed classifier's empirical
robust accuracy at the attack radii, and the sanity checks.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch

from ..attacks.image_models import ImageModelsMeasurement
from ..checks import Check, ChecksSummary
from ..configs import CertifyConfig
from ..runs.measurement import PrepareContext, Tick
from ..runs.units import Unit
from ..summaries import CertifySummary
from ..summaries.certify import CertifiedAt, SigmaCertificates
from .bounds import max_certifiable_radius
from .rows import ROW_COLUMNS, accuracy_curve, certificate_rows, summarize
from .settings import Sampling
from .soundness import (
    attack_rows,
    check_abstention,
    check_certified_below_attack,
    check_determinism,
    check_finite_draws,
)

CERTIFICATE, ATTACK = "certificate", "attack"


class Certify(ImageModelsMeasurement):
    """Smoothed image models x sigmas: certified L2 radii per example, with the attack check on a subset."""

    config: CertifyConfig

    def prepare(self, ctx: PrepareContext) -> None:
        c = self.config
        self.open_examples(ctx)
        for lm in self.loaded:
            lm.module.to(self.device).eval()
        self.attacked = min(c.attack_examples, len(self.ids)) if c.attack_radii else 0

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {
            "models": self.labels, "sigmas": list(c.sigmas), "n0": c.n0, "n": c.n, "alpha": c.alpha,
            "radii": list(c.radii), "attack_examples": self.attacked, "attack_radii": list(c.attack_radii),
            "attack_steps": c.attack_steps, "attack_draws": c.attack_draws, "noise_batch": c.noise_batch,
            **self.described_examples(),
        }  # fmt: skip

    def _attack_batches(self) -> list[int]:
        return [bi for bi, sl in enumerate(self.batches) if sl.start < self.attacked]

    def plan(self) -> list[Unit]:
        n_models = len(self.loaded)
        attack = [Unit(mi, ATTACK, bi) for mi in range(n_models) for bi in self._attack_batches()]
        return attack + [Unit(mi, "certify", bi) for mi in range(n_models) for bi in range(len(self.batches))]

    def work(self, unit: Unit) -> int:
        return len(self.config.sigmas) * (1 if unit.part == "certify" else 1 + len(self.config.attack_radii))

    def _sampling(self, mi: int) -> Sampling:
        return Sampling.of(self.config, num_classes=self.classes[mi])

    def _certificates(self, mi: int, ids: torch.Tensor) -> tuple[pd.DataFrame, torch.Tensor, torch.Tensor]:
        lm = self.loaded[mi]
        x, y = self.source.take(ids)
        x, y = x.to(self.device), y.to(self.device)
        rows = certificate_rows(lm.module, x, y, ids.tolist(), self.config.sigmas, self._sampling(mi), lm.label)
        return rows, x, y

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        sl = self.batches[unit.batch]
        if unit.part == "certify":
            rows, _, _ = self._certificates(unit.model, self.ids[sl])
            tick(len(self.config.sigmas))
            return rows.assign(kind=CERTIFICATE)
        ids = self.ids[sl.start : min(sl.stop, self.attacked)]
        rows, x, y = self._certificates(unit.model, ids)
        tick(len(self.config.sigmas))
        c = self.config
        attacks = attack_rows(self.loaded[unit.model].module, x, y, rows, c.attack_radii, self._sampling(unit.model))
        tick(len(c.sigmas) * len(c.attack_radii))
        return attacks.assign(kind=ATTACK)

    def model_checks(self, model: int) -> list[Check]:
        ids = self.ids[: min(4, len(self.ids))]
        rows, x, y = self._certificates(model, ids)
        return [check_determinism(self.loaded[model].module, x, y, rows, self._sampling(model))]

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        certs = rows[(rows["kind"] == CERTIFICATE) & (rows["model"] == label)]
        checks = [check_finite_draws(rows, label), check_abstention(certs, label)]
        attacks = rows[(rows["kind"] == ATTACK) & (rows["model"] == label)]
        if len(attacks):
            checks.append(check_certified_below_attack(attacks, label))
        return checks

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> CertifySummary:
        c = self.config
        # the certificate columns by name: dropping all-NaN columns (the attack rows' ones) would also drop
        # certified_correct_radius when no example is certified correct, e.g. an untrained model
        certs = rows.loc[rows["kind"] == CERTIFICATE].reindex(columns=ROW_COLUMNS)  # older parts lack new columns
        table = summarize(certs, c.radii)
        attacks = rows[rows["kind"] == ATTACK]
        empirical = []
        if len(attacks):
            grouped = attacks.groupby(["model", "sigma", "radius"], sort=True)
            for (model, sigma, radius), g in grouped:
                empirical.append({"model": model, "sigma": float(sigma), "radius": float(radius),
                                  "n_examples": len(g), "smoothed_robust_acc": float(g["robust"].mean()),
                                  "certified_acc": float(g["certified"].mean())})  # fmt: skip
        labels = self.labels
        return CertifySummary(
            **self.summary_head(), sigmas=list(c.sigmas), n0=c.n0, n=c.n, alpha=c.alpha,
            max_certifiable_radius={f"{s:g}": max_certifiable_radius(s, c.n, c.alpha) for s in c.sigmas},
            models=_by_model(table), curve=_records(accuracy_curve(certs)), empirical_l2=empirical,
            checks=sorted(checks, key=lambda ch: labels.index(ch.model)), checks_summary=ChecksSummary.of(checks),
        )  # fmt: skip


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in
            frame.to_dict(orient="records")]  # fmt: skip


def _by_model(table: pd.DataFrame) -> dict[str, dict[str, SigmaCertificates]]:
    """model -> sigma key -> its certificates on the radius grid."""
    out: dict[str, dict[str, SigmaCertificates]] = {}
    columns = ["radius", "certified_acc", "ci_low", "ci_high", "certified", "n_examples"]
    for model, grp in table.groupby("model", sort=False):
        out[str(model)] = {
            f"{s:g}": SigmaCertificates(
                abstain_rate=float(g["abstain_rate"].iloc[0]),
                clean_smoothed_acc=float(g["clean_smoothed_acc"].iloc[0]),
                certified=[CertifiedAt(**r) for r in _records(g[columns])],
            )
            for s, g in grp.groupby("sigma", sort=True)
        }
    return out


__all__ = ["ATTACK", "CERTIFICATE", "Certify"]
