"""The report's bound sections: Lipschitz bounds and per-block profiles, where the certified bounds lose, the
perturbation-vs-sequence-length study, and randomized-smoothing certified accuracy.

A certified number that is vacuous is labelled so in its table, and the caption states the rule
(:mod:`robustbench_filters.stats.vacuity`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..stats import vacuity
from ..summaries import CERTIFY, IMAGE, LIPSCHITZ, SEQLEN
from . import context as C
from . import figures as F
from . import render as R
from . import tables as T

if TYPE_CHECKING:
    from .assembly import ReportBuilder


def _vacuous_note(table: pd.DataFrame) -> str:
    """The vacuity rule, appended to a caption whose table labels a certified number vacuous."""
    cols = [c for c in table.columns if c.endswith("_vacuous")]
    if not cols or not table[cols].fillna(False).to_numpy().any():
        return ""
    return f" {vacuity.SHORT}."


def lipschitz_section(b: ReportBuilder) -> None:
    rows = b.rs.rows.get(LIPSCHITZ)
    if rows is None:
        b.skip("Lipschitz table and per-layer profile", "no Lipschitz run given")
    else:
        table = T.lipschitz_table(rows)
        b.table(
            "lipschitz_bounds",
            "Lipschitz bounds",
            "Per-example lower bounds on the local l2 Lipschitz constant (mean, max), certified local constant "
            "(median), certified global constant, and the certified l2 radius (mean)." + _vacuous_note(table),
            table,
            R.lipschitz_layout(table),
            LIPSCHITZ,
        )
        layers = T.lipschitz_layer_table(rows)
        if layers.empty:
            b.skip("per-layer Lipschitz profile", "the Lipschitz runs have no per-layer rows (--per-layer)")
        else:
            b.table(
                "lipschitz_layers",
                "Per-block Lipschitz profile",
                "Per block: empirical gain at the hidden states (mean, max) and certified block constants."
                + _vacuous_note(layers),
                layers,
                R.lipschitz_layer_layout(layers),
                LIPSCHITZ,
            )
            b.family_figure(LIPSCHITZ, "lipschitz_profile", "Per-layer Lipschitz profile", F.lipschitz_profile_caption,
                            F.lipschitz_profile_figure, layers, C.lipschitz_subtitle(rows))  # fmt: skip
        lipschitz_gap_section(b, rows)
    rows = b.rs.rows.get(SEQLEN)
    if rows is None:
        b.skip("perturbation vs sequence length", "no sequence-length study run given")
        return
    study = T.seqlen_table(rows)
    b.table(
        "seqlen",
        "Perturbation vs sequence length",
        "RMS output change of one attention layer for a fixed input noise, per sequence length and kind.",
        study,
        R.seqlen_layout(study),
        SEQLEN,
    )
    b.family_figure(SEQLEN, "perturbation_vs_seqlen", "Perturbation vs sequence length (figure)", F.seqlen_caption,
                    F.seqlen_figure, study, C.seqlen_subtitle(study))  # fmt: skip


def lipschitz_gap_section(b: ReportBuilder, rows: pd.DataFrame) -> None:
    """Where the certified bounds lose (rows of ``robfilt lipschitz --gap``): table and figure."""
    from . import lipschitz_gap as G

    gap = G.gap_rows_of(rows)
    if gap.empty:
        b.skip("Lipschitz gap", "no gap rows (robfilt lipschitz --gap)")
        return
    table = G.gap_table(gap)
    caption = (
        "log10 of the median over examples, per model, block and ball radius rho: empirical gain (a lower "
        "bound), the product of exact per-sublayer norms (layerwise estimate, not certified), the certified "
        "local and global bounds, linear bound propagation's certified local bound on the ball cut to [0, 1] "
        "(CROWN, whole model), and the decades lost to composition and to the layer bounds."
    )
    if table[["local_upper_vacuous", "local_crown_vacuous", "global_upper_vacuous"]].fillna(False).to_numpy().any():
        caption += " vacuous = a certified median more than 6 decades (1e6 ×) above the empirical one."
    b.table("lipschitz_gap", "Where the certified Lipschitz bounds lose", caption, table, G.gap_layout(table),
               LIPSCHITZ)  # fmt: skip
    caption = (
        "Per block and for the whole model (medians over examples, log axis): the vertical segments are the losses."
    )
    b.family_figure(LIPSCHITZ, "lipschitz_gap", "Where the certified Lipschitz bounds lose (figure)", caption,
                    lambda data, src, sub, paper: G.lipschitz_gap_figure(data, sources=src, subtitle=sub, paper=paper),
                    gap, G.gap_subtitle(gap))  # fmt: skip


def certify_section(b: ReportBuilder) -> None:
    from . import certified as CT

    runs = b.rs.families.get(CERTIFY, [])
    rows = b.rs.rows.get(CERTIFY)
    if not runs or rows is None:
        b.skip("certified accuracy", "no certify run given")
        return
    table, largest = CT.certified_table(rows), CT.largest_certified_radius(rows)
    b.table(
        "certified_accuracy",
        "Certified accuracy of the smoothed classifiers",
        "Fraction of examples whose true class is certified at L2 radius r by randomized smoothing (Cohen et "
        "al. 2019), with exact 95% Clopper-Pearson intervals over examples; abstain = CERTIFY abstained."
        + CT.beyond_note(table, largest),
        table,
        CT.certified_layout(table, largest),
        CERTIFY,
    )
    curve, smoothed = CT.certified_curve(rows), CT.smoothed_attack_table(rows)
    base = CT.base_l2_table(runs, b.rs.families.get(IMAGE, []))
    c = runs[0].manifest["config"]
    subtitle = (
        f"n = {int(table['n'].iloc[0])} test images · certified L2 radius, n0 = {c.get('n0')}, n = {c.get('n')}, "
        f"α = {c.get('alpha')} · empirical: SmoothAdv PGD on the smoothed classifier"
        + (" and L2 PGD on the base model" if len(base) else "")
    )
    base_runs = [r for r in b.rs.families.get(IMAGE, []) if len(base) and r.run_id in set(base["run"])]
    src = b.rs.ids(CERTIFY) + [r.run_id for r in base_runs]
    b.figure(
        "certified_accuracy_vs_radius",
        "Certified vs empirical robust accuracy",
        CT.certified_caption,
        lambda paper: CT.certified_figure(curve, smoothed, base, src, subtitle, paper=paper),
        src,
        subtitle,
        [*runs, *base_runs],
    )
