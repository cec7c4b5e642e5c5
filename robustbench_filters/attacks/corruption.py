"""Corruption robustness for image models: accuracy per corruption and severity, and mean corruption error.

Every model sees the same seeded test examples and the same corrupted images (noise is pre-generated per
example, see :mod:`.corruption_transforms`). Rows use the attack run-folder format: ``kind="contamination"``,
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

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import Check, ChecksSummary
from ..checks import corruption as CC
from ..checks import model as MC
from ..checks.logits import check_image_rows, guard_logits, margin, predictions
from ..configs import CORRUPTION as PREFIX
from ..configs import CorruptionConfig
from ..runs.measurement import PrepareContext, Tick
from ..runs.units import Unit, unit_seed
from ..stats.aggregates import accuracy
from ..stats.intervals import finite_interval
from ..summaries import CorruptionSummary
from ..summaries.corruption import CorruptionModelResults, CorruptionResult, SeverityAccuracy
from ..summaries.image import Accuracy
from ..summaries.record import ABSENT
from .corruption_transforms import CORRUPTIONS, corrupt, parameter_table, pregenerate
from .image_models import GridMeasurement

DEFAULT_BASELINE = "deit"
N_CHECK = 32  # images the severity-0 and model checks probe


def _rows(label, ids, kind, attack, severity, x, x_c, y, logits, clean_correct) -> pd.DataFrame:
    margins, loss = margin(logits, y), F.cross_entropy(logits, y, reduction="none")
    flat = x_c.flatten(1)
    in_box = torch.isfinite(flat).all(1) & (flat.amin(1) >= 0) & (flat.amax(1) <= 1)
    correct = predictions(logits) == y  # a guarded (NaN) row is no prediction
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
            "margin": margins.double().cpu().numpy(),
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
    classes: int,
    tick: Tick | None = None,
) -> pd.DataFrame:
    """One corruption at every severity on one batch; the noise is drawn per example, once for all severities.
    ``classes`` is the model's class count: an output that is not finite (batch, classes) logits is a NaN row."""
    noise = pregenerate(name, tuple(x.shape[1:]), [unit_seed(seed, name, int(i)) for i in ids])
    frames = []
    for s in severities:
        x_c = corrupt(x, name, s, noise)
        with torch.no_grad():
            logits = guard_logits(model(x_c), len(x_c), classes, x_c.device)
        frames.append(_rows(label, ids, "contamination", f"{PREFIX}:{name}", s, x, x_c, y, logits, clean_correct))
        if tick is not None:
            tick(1)
    return pd.concat(frames, ignore_index=True)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _mean_interval(cor: pd.DataFrame) -> dict[str, float | None]:
    """95% t-interval of the mean corrupted accuracy. Every example is scored by its own accuracy over the
    severities, then over the corruptions; those scores are independent across examples and average to
    ``mean_acc``, so the interval counts each example once, however many corrupted copies it has."""
    if cor.empty:
        return {"mean_acc_lo": None, "mean_acc_hi": None}
    score = cor.groupby(["example_id", "attack", "eps"]).correct.mean().groupby(["example_id", "attack"]).mean()
    lo, hi = finite_interval(score.groupby("example_id").mean().tolist())
    return {"mean_acc_lo": None if lo is None else max(0.0, lo), "mean_acc_hi": None if hi is None else min(1.0, hi)}


def summarize_corruption_rows(
    rows: pd.DataFrame, baseline: str | None = DEFAULT_BASELINE
) -> dict[str, CorruptionModelResults]:
    """Per model: clean accuracy, accuracy per corruption and severity, mean accuracy, and (m)CE vs ``baseline``."""
    order = {f"{PREFIX}:{n}": i for i, n in enumerate(CORRUPTIONS)}
    clean: dict[str, Accuracy] = {}
    severities: dict[str, dict[str, list[SeverityAccuracy]]] = {}
    contaminated: dict[str, pd.DataFrame] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean[label] = Accuracy(**accuracy(grp[grp.attack == "clean"].correct))
        contaminated[label] = cor = grp[grp.kind == "contamination"]
        severities[label] = {
            attack.split(":", 1)[1]: [SeverityAccuracy(severity=int(s), **accuracy(g.correct)) for s, g in
                                      sub.groupby("eps", sort=True)]
            for attack, sub in sorted(cor.groupby("attack"), key=lambda t: order.get(t[0], len(order)))
        }  # fmt: skip
    errors = {m: {n: float(sum(1.0 - c.acc for c in sev)) for n, sev in per.items()} for m, per in severities.items()}
    base = baseline if baseline is not None and baseline in errors else None
    out: dict[str, CorruptionModelResults] = {}
    for label, per in severities.items():
        corruptions: dict[str, CorruptionResult] = {}
        for name, sev in per.items():
            ce: Any = ABSENT
            relative: Any = ABSENT
            if base is not None:
                n_sev, err, base_err = len(severities[base][name]), errors[label][name], errors[base].get(name, 0.0)
                ce = _ratio(err, base_err)
                relative = _ratio(err - n_sev * (1 - clean[label].acc), base_err - n_sev * (1 - clean[base].acc))
            corruptions[name] = CorruptionResult(
                by_severity=sev, mean_acc=float(np.mean([c.acc for c in sev])), ce=ce, relative_ce=relative
            )
        ces = [c.ce for c in corruptions.values() if c.ce is not None and c.ce is not ABSENT]
        rels = [
            c.relative_ce for c in corruptions.values() if c.relative_ce is not None and c.relative_ce is not ABSENT
        ]
        out[label] = CorruptionModelResults(
            clean=clean[label], corruptions=corruptions,
            mean_acc=float(np.mean([c.mean_acc for c in corruptions.values()])) if corruptions else float("nan"),
            **_mean_interval(contaminated[label]),
            mce=float(np.mean(ces)) if ces else None, relative_mce=float(np.mean(rels)) if rels else None,
        )  # fmt: skip
    return out


def _model_checks(
    model: nn.Module, label: str, x: torch.Tensor, names: Sequence[str], seed: int, classes: int
) -> list[Check]:
    ids = torch.arange(len(x))

    def pred_of(inputs: torch.Tensor) -> torch.Tensor:
        return predictions(guard_logits(model(inputs), len(inputs), classes, inputs.device))

    with torch.no_grad():
        pred = pred_of(x)
        moved, changed = 0.0, 0
        for name in names:
            noise = pregenerate(name, tuple(x.shape[1:]), [unit_seed(seed, name, int(i)) for i in ids])
            x0 = corrupt(x, name, 0, noise)
            moved = max(moved, float((x0 - x).abs().max()))
            changed += int((pred_of(x0) != pred).sum())
    return [
        MC.check_eval_deterministic(model, label, x),
        MC.check_logits(model, label, x),
        CC.check_severity0(label, moved, changed, len(x)),
    ]


class Corruptions(GridMeasurement):
    """Image models x corruptions x severities on shared examples, with mCE relative to a baseline model."""

    config: CorruptionConfig

    def prepare(self, ctx: PrepareContext) -> None:
        self.names = self.config.corruptions
        self.open_examples(ctx)
        self._cache: tuple[tuple[int, int], tuple[torch.Tensor, ...]] | None = None

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {
            "models": self.labels,
            "attacks": list(c.attacks),
            "corruptions": self.names,
            "severities": list(c.severities),
            **self.described_examples(),
            "baseline": c.baseline,
        }

    def parts(self) -> Sequence[str]:
        return self.names

    def grid(self) -> Sequence[float]:
        return self.config.severities

    def _clean(self, mi: int, bi: int) -> tuple[torch.Tensor, ...]:
        if self._cache is None or self._cache[0] != (mi, bi):
            ids = self.ids[self.batches[bi]]
            x, y = self.source.take(ids)
            x, y = x.to(self.device), y.to(self.device)
            model = self.loaded[mi].module.to(self.device).eval()
            with torch.no_grad():
                logits = guard_logits(model(x), len(x), self.classes[mi], x.device)
            self._cache = ((mi, bi), (x, y, ids, logits, predictions(logits) == y))
        return self._cache[1]

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        c, lm = self.config, self.loaded[unit.model]
        x, y, ids, logits, clean_correct = self._clean(unit.model, unit.batch)
        if unit.part == "clean":
            rows = _rows(lm.label, ids, "clean", "clean", 0, x, x, y, logits, clean_correct)
            tick(1)
            return rows
        return corruption_rows(
            lm.module,
            lm.label,
            unit.part,
            c.severities,
            x,
            y,
            ids,
            clean_correct,
            c.seed,
            self.classes[unit.model],
            tick,
        )

    def model_checks(self, model: int) -> list[Check]:
        lm = self.loaded[model]
        x, _ = self.source.take(self.ids[:N_CHECK])
        return _model_checks(
            lm.module.to(self.device).eval(), lm.label, x.to(self.device), self.names, self.config.seed,
            self.classes[model],
        )  # fmt: skip

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        found = (check_image_rows(rows, label), CC.check_corruption_box(rows, label),
                 CC.check_severity_distance(rows, label))  # fmt: skip
        return [ch for ch in found if ch is not None]

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> CorruptionSummary:
        c, labels = self.config, self.labels
        return CorruptionSummary(
            **self.summary_head(), attacks=list(c.attacks), corruptions=self.names, severities=list(c.severities),
            parameters=[p for p in parameter_table() if p["corruption"] in self.names],
            baseline=c.baseline if c.baseline in labels else None, models=summarize_corruption_rows(rows, c.baseline),
            checks=sorted(checks, key=lambda ch: labels.index(ch.model)), checks_summary=ChecksSummary.of(checks),
        )  # fmt: skip
