"""The report's verified-robustness section: clean >= robust >= verified accuracy per model and Linf eps, from the
rows of ``robfilt certify --method ibp|crown-ibp|crown`` runs (kind ``verified``), with the share neither verified
nor broken (how far apart the two sides of the evaluation are) and any contradicted example (a wrong bound)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..summaries import VERIFIED

if TYPE_CHECKING:
    from .assembly import ReportBuilder


def verified_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model and eps: n and the percentages (of all examples) clean, robust, verified and unknown."""
    out = []
    for (model, eps), g in rows.groupby(["model", "eps"], sort=True):
        n = len(g)
        robust = int((g["clean_correct"] & g["robust"]).sum())
        out.append({"model": model, "eps": float(eps), "n": n,
                    "clean": 100 * g["clean_correct"].mean(), "robust": 100 * robust / n,
                    "verified": 100 * g["verified"].mean(), "unknown": 100 * (g["status"] == "unknown").mean(),
                    "contradicted": int((g["status"] == "contradicted").sum())})  # fmt: skip
    return pd.DataFrame(out)


def verified_section(b: ReportBuilder) -> None:
    rows = b.rs.rows.get(VERIFIED)
    if rows is None:
        b.skip("verified accuracy", "no verified run (certify --method crown) given")
        return
    table = verified_table(rows)
    layout = table.assign(**{c: table[c].map(lambda v: f"{v:.1f}") for c in ("clean", "robust", "verified",
                                                                            "unknown")})  # fmt: skip
    b.table(
        "verified_accuracy",
        "Verified robust accuracy (bound propagation)",
        "Per Linf eps, % of the test examples: clean-correct, robust under the default attack, verified by bound "
        "propagation (every wrong class's margin lower bound over the box positive), and unknown (clean-correct, "
        "neither verified nor broken). verified <= robust <= clean unless a bound is wrong: contradicted counts "
        "verified examples the attack broke (0 when sound).",
        table,
        layout,
        VERIFIED,
    )
