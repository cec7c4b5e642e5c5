"""The report's image sections: clean and robust accuracy (table and figure), the compute ledger, the paired
comparison with the baseline, corruption tables (shared with the LM section) and the softmax-vs-BSA attention maps.

Each section reads the run set's rows and adds tables and figures through the builder, or records why it is
skipped, so a report over any subset of runs still renders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..core.errors import unknown
from ..summaries import IMAGE
from ..summaries.image import ImageAttackSummary
from . import context as C
from . import figures as F
from . import render as R
from . import tables as T

if TYPE_CHECKING:
    from .assembly import ReportBuilder

ATTENTION_MODELS: tuple[str, str] = ("deit", "deit-bsa")


def image_section(b: ReportBuilder, baseline: str | None, attention: bool | None) -> None:
    rows = b.rs.rows.get(IMAGE)
    if rows is None:
        for item in ("robust accuracy table and figure", "paired comparison", "corruption accuracy"):
            b.skip(item, "no image attack run given")
        if attention:
            b.skip("attention maps", "no image run given (the maps use the run's weights)")
        return
    acc = T.accuracy_table(rows)
    if acc.empty:
        b.skip("robust accuracy table", "the image runs hold no attack rows")
    else:
        n = int(acc["n"].max())
        b.table(
            "robust_accuracy",
            "Clean and robust accuracy",
            f"Accuracy (%) with 95% Wilson intervals on {n} examples; eps on the [0, 1] pixel scale.",
            acc,
            R.accuracy_layout(acc),
            IMAGE,
        )
        if (acc["attack"] != T.CLEAN).any():
            sub = C.image_subtitle(b.rs.families[IMAGE], rows, n)
            b.family_figure(IMAGE, "robust_accuracy_vs_eps", "Robust accuracy vs eps", F.robust_accuracy_caption,
                            F.robust_accuracy_figure, acc, sub)  # fmt: skip
        else:
            b.skip("robust accuracy figure", "only clean rows")
    ledger = T.ledger_table(rows)
    if not ledger.empty:
        b.table(
            "compute_ledger",
            "Compute ledger",
            "Model passes (forward + backward) per example and in total, and the share of the examples each "
            "stage broke (clean: misclassified unattacked); exact = counted per example.",
            ledger,
            R.generic_layout(ledger),
            IMAGE,
        )
    names = list(dict.fromkeys(m.split(" [", 1)[0] for m in T.model_order(rows)))
    if baseline is not None and baseline not in names:
        raise unknown("baseline model", baseline, names)
    paired = T.paired_table(rows, baseline)
    if paired.empty:
        b.skip("paired comparison", "needs a baseline and at least one variant on the same examples")
    else:
        base = ", ".join(dict.fromkeys(paired["baseline"]))
        b.table(
            "paired_vs_baseline",
            f"Variants vs {base} (paired)",
            f"Paired difference in accuracy vs {base} on the same examples; b = only {base} right, "
            "c = only the variant right; McNemar's exact two-sided p-value.",
            paired,
            R.paired_layout(paired),
            IMAGE,
        )
    corruption_section(b, rows, IMAGE, baseline)
    models = set(T.model_order(rows))
    if attention is None:
        attention = all(m in models for m in ATTENTION_MODELS)
        if not attention:
            b.skip("attention maps", "the image runs do not include both deit and deit-bsa")
    if attention:
        attention_section(b)


def corruption_section(b: ReportBuilder, rows: pd.DataFrame, family: str, baseline: str | None = None) -> None:
    table = T.corruption_table(rows)
    if table.empty:
        b.skip(f"corruption table ({family})", "no corruption rows")
        return
    means = T.corruption_means(table)
    what = "perplexity [95% bootstrap CI]" if "ppl" in table.columns else "accuracy (%) [95% Wilson CI]"
    b.table(
        f"corruption_{family}",
        f"Corruptions ({family})",
        f"{what} per corruption and severity; 'mean' averages the corruptions at each severity.",
        pd.concat([table, means], ignore_index=True),
        R.corruption_layout(table, means),
        family,
    )
    errors = T.corruption_error_table(table, baseline)
    if not errors.empty:
        base = errors["baseline"].iloc[0]
        b.table(
            f"corruption_error_{family}",
            f"Corruption error vs {base}",
            f"CE per corruption = sum over severities of the model's error / {base}'s error (Hendrycks & "
            f"Dietterich 2019, {base} in AlexNet's place); mCE = mean over corruptions; lower is better.",
            errors,
            R.corruption_error_layout(errors),
            family,
        )


def attention_section(b: ReportBuilder) -> None:
    from .attention import maps_from_run

    for run in b.rs.families.get(IMAGE, []):
        summary = run.summary
        if isinstance(summary, ImageAttackSummary) and set(ATTENTION_MODELS) <= set(summary.recorded_attention().maps):
            break
    else:
        b.skip("attention maps", "no image run recorded CLS attention maps for deit and deit-bsa")
        return
    maps, image = maps_from_run(run, ATTENTION_MODELS)
    if image is None:
        b.skip("attention maps", "the run recorded no input image (only images up to 64x64 are stored)")
        return
    example = summary.recorded_attention().example_id
    sources = [m.source for m in maps] + [f"image: {summary.data} test[{example}]"]
    grid = "x".join(str(d) for d in maps[0].maps.shape[1:])
    b.figure(
        "attention_maps",
        "Attention maps: softmax vs BSA",
        f"CLS-token attention per layer (mean over heads) on the {grid} patch grid, for one bundled test image.",
        lambda paper: F.attention_figure(maps, image, sources, F.ATTENTION_SUBTITLE, paper=paper),
        sources,
        F.ATTENTION_SUBTITLE,
        [run],
    )
