"""The rows of a Lipschitz run and what is computed from them: column names, definitions, checks, summary.

Kept apart from the measurement (:mod:`.run`) because readers need them without the bound machinery: the summary
is recomputed from the rows alone (plus each model's certified factor table, which depends only on the weights).
Every certified number in it carries a ``*_vacuous`` flag (True, False, or None when it cannot be judged) by the
rule of :mod:`robustbench_filters.stats.vacuity`, which the summary also states under ``vacuity``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..checks import FAIL, PASS, Check, ChecksSummary
from ..stats import vacuity
from ..stats.intervals import NONNEGATIVE, finite_interval
from ..summaries.lipschitz import GapMedian, LipschitzLayer, LipschitzModel, LipschitzSummary
from ..summaries.record import ABSENT

MODEL_LAYER = "model"
GAP = "gap/"  # layer prefix of the rows that show where the certified bounds lose (--gap)
COLUMNS = (
    "model", "example_id", "layer", "method", "lower", "local_upper", "global_upper",
    "radius", "rho", "margin", "pred", "label", "iterations",
)  # fmt: skip
DEFINITIONS: dict[str, str] = {
    "norm": "l2 on the flattened input and on the output vector",
    "image_input": "[0, 1] pixels, flattened (the mean/std normaliser is inside the model)",
    "image_output": "the logit vector",
    "lm_input": "the token-embedding sequence (B, T, d) fed to forward_embeddings",
    "lm_output": "next-token logits at the last position",
    "lower": "rigorous lower bound on the local Lipschitz constant at x0 (Jacobian norm or pair ratio in B(x0, rho))",
    "local_upper": "certified Lipschitz constant on the ball B(x0, rho) (notes/lipschitz.md 1.5)",
    "global_upper": "certified Lipschitz constant on all inputs of the evaluated sequence length (LayerNorm eps > 0 "
    "makes it finite; it grows with the token count n through the attention factor)",
    "radius": "certified l2 radius (<= rho): no perturbation with ||delta|| < radius changes argmax f(x0)",
    "blocks.<i>": "block map h -> block(h) with Y_0 fixed, at the block's actual input h_l(x0)",
    "*_vacuous": vacuity.RULE,
}
SANDWICH_RTOL = 1e-9  # float rounding when a bound is tight (a linear map: lower == upper == sigma_max)


def _finite(values: pd.Series) -> pd.Series:
    return values[np.isfinite(values.to_numpy(dtype=float))]


def _sandwich_ok(group: pd.DataFrame) -> bool:
    """lower <= local_upper <= global_upper on every row (up to float rounding when a bound is tight)."""
    slack = 1 + SANDWICH_RTOL
    ok = (group["lower"] <= group["local_upper"] * slack) & (group["local_upper"] <= group["global_upper"] * slack)
    return bool(ok.all())


def lipschitz_checks(rows: pd.DataFrame, label: str) -> list[Check]:
    """Sandwich checks: every lower bound <= its certified local bound <= the certified global bound."""
    checks = []
    examples = rows[(rows["model"] == label) & (rows["layer"] == MODEL_LAYER)]
    if len(_finite(examples["local_upper"])):
        ok = _sandwich_ok(examples)
        detail = (
            f"{len(examples)} examples: lower <= local <= global" if ok else "a lower bound exceeds a certified one"
        )
        checks.append(Check("lower <= certified local <= global", label, PASS if ok else FAIL, detail))
    gap = rows[(rows["model"] == label) & rows["layer"].astype(str).str.startswith(GAP)]
    if len(gap):
        slack = 1 + SANDWICH_RTOL
        bad = (gap["empirical"] > gap["local_upper"] * slack) | (gap["local_upper"] > gap["global_upper"] * slack)
        if "local_crown" in gap:  # NaN (no CROWN bound on that row) compares False: never out of order
            bad |= gap["empirical"] > gap["local_crown"] * slack
        status = FAIL if bool(bad.any()) else PASS
        checks.append(Check("gap rows: empirical <= certified local <= global", label, status,
                            f"{int(bad.sum())} of {len(gap)} rows out of order"))  # fmt: skip
    return checks


def _mean_ci(lower: pd.Series) -> dict[str, float | None]:
    """95% t-interval of the mean lower bound across examples (how much the mean depends on which examples were
    drawn; the max needs none: every example's value is itself a valid lower bound)."""
    lo, hi = finite_interval([float(v) for v in lower], NONNEGATIVE)  # a bound is >= 0: so is its interval
    return {"lower_mean_lo": lo, "lower_mean_hi": hi}


def summarize(
    rows: pd.DataFrame, factors: dict[str, list[dict]] | None = None, checks: Sequence[Check] = ()
) -> LipschitzSummary:
    """The run's summary, recomputed from the rows: per-model aggregates (``factors`` adds each model's certified
    factor table), the definitions, the vacuity rule, the gap's medians (``--gap``) and the sanity ``checks``."""
    models: dict[str, LipschitzModel] = {}
    gap = rows[rows["layer"].astype(str).str.startswith(GAP)]
    rows = rows[~rows["layer"].astype(str).str.startswith(GAP)]
    examples = rows[rows["layer"] == MODEL_LAYER]
    for name, group in examples.groupby("model", sort=False):
        lower, local, glob = group["lower"], _finite(group["local_upper"]), _finite(group["global_upper"])
        lower_max = float(lower.max())
        upper = float(glob.max()) if len(glob) else None
        layer_rows = rows[(rows["model"] == name) & (rows["layer"] != MODEL_LAYER)]
        layers = [
            LipschitzLayer(
                layer=layer, lower_mean=float(g["lower"].mean()), **_mean_ci(g["lower"]),
                lower_max=float(g["lower"].max()), local_upper_median=float(g["local_upper"].median()),
                global_upper=float(g["global_upper"].max()), **vacuity.block_vacuity(g),
            )
            for layer, g in layer_rows.groupby("layer", sort=False)
        ]  # fmt: skip
        models[str(name)] = LipschitzModel(
            n_examples=int(len(group)), method=str(group["method"].iloc[0]), lower_mean=float(lower.mean()),
            **_mean_ci(lower), lower_max=lower_max,
            local_upper_median=float(local.median()) if len(local) else None, global_upper=upper,
            log10_global_upper=math.log10(upper) if upper else None,
            ratio_upper_lower=upper / lower_max if upper and lower_max > 0 else None,
            ratio_local_lower_median=float((group["local_upper"] / group["lower"]).median()) if len(local) else None,
            radius_mean=float(_finite(group["radius"]).mean()) if len(_finite(group["radius"])) else None,
            sandwich_ok=_sandwich_ok(group) if len(local) else None, **vacuity.model_vacuity(group), layers=layers,
            factors=factors[name] if factors and name in factors else ABSENT,
        )  # fmt: skip
    return LipschitzSummary(
        models=models, definitions=DEFINITIONS, vacuity={"factor": vacuity.FACTOR, "rule": vacuity.RULE},
        gap_log10_median=_gap_medians(gap) if len(gap) else ABSENT, checks=list(checks),
        checks_summary=ChecksSummary.of(checks),
    )  # fmt: skip


def _gap_medians(gap: pd.DataFrame) -> list[GapMedian]:
    """Median log10 of each bound per (model, layer, rho) of the ``--gap`` rows, each flagged vacuous or not."""
    from .research.gap import gap_summary

    med = gap_summary(gap.assign(layer=gap["layer"].str.slice(len(GAP))))
    records = med.replace({np.nan: None}).to_dict(orient="records")
    for r in records:
        for key in ("local_upper", "local_crown", "global_upper"):
            if key not in r:  # rows of a run made before the column existed (local_crown: 2026-12-06)
                continue
            r[f"{key}_vacuous"] = vacuity.log10_vacuous(r.get(key), r.get("empirical"))
    return [GapMedian(**r) for r in records]
