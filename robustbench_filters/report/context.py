"""One line per figure stating what was measured: sample size and threat model, from the runs themselves.

A robustness number means nothing without its n and its threat model (norm, budget scale, attack and steps),
so every figure carries this line (:func:`.style.add_subtitle`). It is written from the run manifests and the
per-example rows, never typed by hand, so it cannot drift from the numbers drawn under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..runs.folder import Run
from .tables import CLEAN, MODEL_LAYER, is_corruption

EPS = "\u03b5"
NORMS: dict[str, str] = {"linf": "L\u221e", "l2": "L2", "l1": "L1"}
SEP = " \u00b7 "  # middle dot between the parts of a subtitle


def _config(runs: Sequence[Run], key: str) -> list:
    values = [r.manifest.get("config", {}).get(key) for r in runs]
    return list(dict.fromkeys(v for v in values if v is not None))


def _attack_names(attacks: Sequence[str], steps: Sequence[int]) -> str:
    step = f"-{steps[0]}" if len(steps) == 1 else ""
    return ", ".join(a.upper() + (step if a in ("pgd", "apgd", "apgd-ce") else "") for a in attacks)


def _adversarial(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["attack"] != CLEAN) & ~is_corruption(rows["attack"])]


def image_subtitle(runs: Sequence[Run], rows: pd.DataFrame, n: int) -> str:
    """'n = 500 test images · white-box L∞, ε on the [0, 1] pixel scale · FGSM, PGD-20'."""
    adv = _adversarial(rows)
    norms = [NORMS.get(str(v), str(v)) for v in dict.fromkeys(adv.get("norm", pd.Series(dtype=str))) if v]
    parts = [f"n = {n} test images"]
    if not adv.empty:
        parts.append(f"white-box {'/'.join(norms) or 'norm-bounded'}, {EPS} on the [0, 1] pixel scale")
        parts.append(_attack_names(list(dict.fromkeys(adv["attack"])), _config(runs, "steps")))
    if is_corruption(rows["attack"]).any():
        parts.append("common corruptions (severity 1-5)")
    return SEP.join(parts)


def lm_subtitle(runs: Sequence[Run], rows: pd.DataFrame, n: int) -> str:
    """'n = 64 documents · FGSM, PGD-20 on embeddings: per-token L2, ε × mean embedding norm · word swap ...'."""
    adv = _adversarial(rows)
    kinds = adv.groupby("attack", sort=False)["kind"].first() if "kind" in adv.columns else pd.Series(dtype=str)
    embedding = [a for a, k in kinds.items() if k != "contamination"]
    text = [a for a, k in kinds.items() if k == "contamination"]
    unit = "documents" if "n_windows" in rows.columns else "sequences"  # runs from before documents: chunks
    parts = [f"n = {n} {unit}"]
    if embedding:
        norms = [NORMS.get(str(v), str(v)) for v in dict.fromkeys(adv.loc[adv["attack"].isin(embedding), "norm"])]
        relative = "relative" in _config(runs, "eps_mode")
        scale = f"{EPS} \u00d7 mean embedding norm" if relative else f"{EPS} in embedding units"
        parts.append(
            f"{_attack_names(embedding, _config(runs, 'steps'))} on input embeddings: per-token "
            f"{'/'.join(n for n in norms if n) or 'norm'} ball, {scale}"
        )
    for attack in text:
        repl = _config(runs, "replacement")
        parts.append(f"{attack}: share of words replaced" + (f" by '{repl[0]}'" if len(repl) == 1 else ""))
    return SEP.join(parts)


def lipschitz_subtitle(rows: pd.DataFrame) -> str:
    """'n = 32 images (deit, ...), 16 text windows (lm, ...) · local l2 Lipschitz constant of the logits'."""
    examples = rows[rows["layer"] == MODEL_LAYER] if "layer" in rows.columns else rows
    counts = examples.groupby("model", sort=False)["example_id"].nunique()
    groups: dict[tuple[str, int], list[str]] = {}
    for model, count in counts.items():
        unit = "text windows" if str(model).split(" [", 1)[0].partition("-")[0] == "lm" else "images"
        groups.setdefault((unit, int(count)), []).append(str(model))
    sizes = ", ".join(f"{c} {u} per model" for (u, c) in groups)
    methods = ", ".join(str(m) for m in dict.fromkeys(examples.get("method", pd.Series(dtype=str))) if m)
    return SEP.join(
        [f"n = {sizes}" if sizes else "n not recorded", "no attack: l2 Lipschitz constant of the logits"]
        + ([f"method: {methods}"] if methods else [])
    )


def seqlen_subtitle(rows: pd.DataFrame) -> str:
    """'n = 8 trials per N · random input noise of l2 norm 0.001 per token, one attention layer'."""
    trials = int(rows["trials"].max()) if "trials" in rows.columns and len(rows) else 0
    parts = [f"n = {trials} trials per N" if trials else "n not recorded"]
    if "noise" in rows.columns and len(rows):
        parts.append(f"random input noise of l2 norm {float(rows['noise'].iloc[0]):g} per token, one attention layer")
    return SEP.join(parts)
