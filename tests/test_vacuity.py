"""A vacuous certified Lipschitz number never reads like a result: the rule, the summary JSON, the terminal table,
the report tables, the gate and the study write-up all say so (no model is built here: rows are enough)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from robustbench_filters.gating.decide import baseline_check, decide_threshold
from robustbench_filters.gating.metrics import Metric, find, metrics_from_rows
from robustbench_filters.gating.modes import Status
from robustbench_filters.report import render as R
from robustbench_filters.report import tables as T
from robustbench_filters.report.latex import latex_table
from robustbench_filters.stats import vacuity

LOWER = [10.0, 20.0, 30.0, 40.0]


def rows(global_upper: float, local: list[float], radius: list[float], model: str = "deit") -> pd.DataFrame:
    """Model rows of one model plus one block, with margins 1.0 and rho 0.1."""
    model_rows = [
        {"model": model, "example_id": i, "layer": "model", "method": "exact", "lower": lo, "local_upper": lu,
         "global_upper": global_upper, "radius": r, "rho": 0.1, "margin": 1.0, "pred": 0, "label": 0, "iterations": 0}
        for i, (lo, lu, r) in enumerate(zip(LOWER, local, radius, strict=True))
    ]  # fmt: skip
    block_rows = [
        {**r, "layer": "blocks.0", "lower": r["lower"] / 10, "local_upper": 1e9, "global_upper": 1e9, "radius": np.nan,
         "margin": np.nan}
        for r in model_rows
    ]  # fmt: skip
    return pd.DataFrame(model_rows + block_rows)


VACUOUS = rows(3e91, [1e20, 1e20, 1e20, 50.0], [1e-18, 1e-18, 1e-18, 0.01])
TIGHT = rows(400.0, [20.0, 30.0, 60.0, 80.0], [0.02, 0.01, 0.01, 0.005], model="deit-grc")


# ---------------------------------------------------------------- the rule


def test_upper_bounds_are_vacuous_beyond_a_million_times_the_lower_bound() -> None:
    flags = vacuity.upper_flags([1e7 + 1, 1e7, math.inf, 5.0, 5.0, math.nan], [10.0, 10.0, 1.0, 0.0, math.nan, 1.0])
    assert flags[:3].tolist() == [1.0, 0.0, 1.0]
    assert np.isnan(flags[3:]).all()  # no positive lower bound, or no bound: not judged


def test_a_radius_is_judged_against_the_one_the_lower_bound_gives() -> None:
    # reference min(rho, margin / (sqrt 2 lower)): 0.1 (capped by rho), then 1 / (sqrt 2 * 100) = 7.07e-3
    ref = vacuity.radius_reference([1.0, 1.0], [1.0, 100.0], 0.1)
    assert ref == pytest.approx([0.1, 1 / (math.sqrt(2) * 100)])
    flags = vacuity.radius_flags([0.99e-7, 1.01e-7, 1e-12, 0.0], [1.0, 1.0, 1e-9, 0.0], [1.0, 1.0, 1.0, 1.0], 0.1)
    # an honest tiny radius (tiny margin) is a finding, not a vacuous certificate; a zero margin gives radius 0
    assert flags.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_an_aggregate_is_vacuous_when_at_least_half_its_examples_are() -> None:
    assert vacuity.aggregate(np.array([1.0, 1.0, 0.0, 0.0])) is True
    assert vacuity.aggregate(np.array([1.0, 0.0, 0.0, np.nan])) is False
    assert vacuity.aggregate(np.array([np.nan])) is None
    assert vacuity.model_vacuity(VACUOUS[VACUOUS["layer"] == "model"]) == {
        "global_upper_vacuous": True, "local_upper_vacuous": True, "radius_vacuous": True,
    }  # fmt: skip
    assert set(vacuity.model_vacuity(TIGHT[TIGHT["layer"] == "model"]).values()) == {False}


def test_labels_never_show_a_vacuous_number_bare() -> None:
    assert vacuity.label("3e+91", True) == "vacuous (3e+91 > 1e6 × lower)"
    assert vacuity.label("1e-18", True, "radius") == "vacuous (1e-18; < 1e-6 × empirical radius)"
    assert vacuity.label("37.29", True, "log") == "vacuous (37.29)"
    assert vacuity.label("400", False) == "400" and vacuity.label("400", None) == "400"
    assert vacuity.log10_vacuous(41.4, 1.4) is True and vacuity.log10_vacuous(6.9, 1.0) is False
    assert vacuity.log10_vacuous(None, 1.0) is None


# ---------------------------------------------------------------- summary JSON and terminal


def test_summary_json_carries_the_flags_and_the_rule() -> None:
    from robustbench_filters.lipschitz.summary import summarize

    summary = summarize(pd.concat([VACUOUS, TIGHT], ignore_index=True))
    deit, grc = summary.models["deit"], summary.models["deit-grc"]
    assert (deit.global_upper_vacuous, deit.local_upper_vacuous, deit.radius_vacuous) == (True, True, True)
    assert (grc.global_upper_vacuous, grc.local_upper_vacuous, grc.radius_vacuous) == (False, False, False)
    assert deit.layers[0].global_upper_vacuous is True  # 1e9 vs a gain of at most 4
    assert summary.vacuity == {"factor": 1e6, "rule": vacuity.RULE}


def test_terminal_table_labels_vacuous_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    from robustbench_filters.cli.lipschitz import render_lipschitz_summary
    from robustbench_filters.lipschitz.summary import summarize

    summary = summarize(pd.concat([VACUOUS, TIGHT], ignore_index=True))
    render_lipschitz_summary(summary, "exact, l2, rho=0.1", per_layer=True, gap=False)
    out = capsys.readouterr().out
    assert "vacuous (3.00e+91 > 1e6 × lower)" in out  # the certified upper of deit
    assert "vacuous (1.00e+09 > 1e6 × lower)" in out  # its block constant
    assert "3.00e+91 " not in out.replace("vacuous (3.00e+91", "")  # never bare
    assert " 400 " in out  # deit-grc's bound is a result and reads like one
    assert "vacuous = a certified bound more than 1e6" in out


# ---------------------------------------------------------------- report tables (Markdown, CSV, LaTeX)


def test_report_tables_label_vacuous_cells_in_every_format() -> None:
    rows_ = pd.concat([VACUOUS, TIGHT], ignore_index=True)
    table = T.lipschitz_table(rows_)
    assert table.set_index("model").loc["deit", ["global_upper_vacuous", "radius_vacuous"]].tolist() == [True, True]
    layout = R.lipschitz_layout(table).set_index("model")
    assert layout.loc["deit", "certified upper"] == "vacuous (3.00e+91 > 1e6 × lower)"
    assert (
        layout.loc["deit", "radius (mean)"].startswith("vacuous (")
        and "empirical radius" in layout.loc["deit", "radius (mean)"]
    )
    assert layout.loc["deit-grc", "certified upper"] == "400"
    tex = latex_table(R.lipschitz_layout(table), "caption", "tab:x")
    assert r"vacuous ($3.00 \times 10^{91}$ $>1 \times 10^{6}$ $\times$ lower)" in tex
    layers = T.lipschitz_layer_table(rows_)
    assert R.lipschitz_layer_layout(layers)["certified block constant"].str.startswith("vacuous").all()


def test_the_per_block_table_leaves_gap_rows_to_the_gap_table() -> None:
    gap = VACUOUS.iloc[:2].assign(layer=["gap/model", "gap/blocks.0"])
    layers = T.lipschitz_layer_table(pd.concat([VACUOUS, gap], ignore_index=True))
    assert layers["layer"].tolist() == ["blocks.0"]


def test_the_gap_table_labels_vacuous_medians() -> None:
    from robustbench_filters.report.lipschitz_gap import gap_layout, gap_table

    gap = pd.DataFrame({"model": "deit", "layer": ["model", "blocks.0"], "rho": 1e-3, "empirical": [30.0, 10.0],
                        "layerwise_estimate": [1e5, 20.0], "local_upper": [1e37, 1e4], "global_upper": [1e41, 1e8]})  # fmt: skip
    table = gap_table(gap)
    layout = gap_layout(table).set_index("layer")
    assert layout.loc["model", "certified local"] == "vacuous (37.00)"
    assert layout.loc["blocks.0", "certified local"] == "4.00"  # three decades: loose, not vacuous
    assert layout.loc["blocks.0", "certified global"] == "vacuous (8.00)"


# ---------------------------------------------------------------- the gate


def _metric(name: str, value: float, vacuous: bool | None) -> Metric:
    return Metric("deit", "-", name, value, value, value, None, "lipschitz", "run", vacuous)


def test_metrics_from_rows_carry_vacuity_and_baselines_do_not_store_it() -> None:
    metrics = metrics_from_rows(pd.concat([VACUOUS, TIGHT], ignore_index=True), "lipschitz", "run")
    assert find(metrics, "deit", "-", "lipschitz_upper").vacuous is True
    assert find(metrics, "deit", "-", "radius").vacuous is True
    assert find(metrics, "deit", "-", "lipschitz_lower").vacuous is None  # an empirical number: never vacuous
    assert find(metrics, "deit-grc", "-", "lipschitz_upper").vacuous is False
    assert "vacuous" not in find(metrics, "deit", "-", "lipschitz_upper").to_dict()


def test_the_gate_never_passes_silently_on_a_vacuous_value() -> None:
    passed = decide_threshold(_metric("lipschitz_upper", 3e91, True), 1e95, "max", "point")
    assert passed.status is Status.WARN and "vacuous" in passed.detail
    failed = decide_threshold(_metric("lipschitz_upper", 3e91, True), 99.0, "max", "point")
    assert failed.status is Status.FAIL and "vacuous" in failed.detail
    radius = decide_threshold(_metric("radius", 1e-18, True), 0.01, "min", "point")
    assert radius.status is Status.FAIL and "vacuous" in radius.detail
    fine = decide_threshold(_metric("lipschitz_upper", 400.0, False), 1e3, "max", "point")
    assert fine.status is Status.PASS and "vacuous" not in fine.detail
    same = baseline_check(_metric("lipschitz_upper", 3e91, None), _metric("lipschitz_upper", 3e91, True), mode="point")
    assert same.status is Status.WARN and "vacuous" in same.detail


# ---------------------------------------------------------------- the study write-up


def test_study_claims_and_tables_on_vacuous_bounds() -> None:
    from robustbench_filters.study.claims import Comparison, Verdict, compare
    from robustbench_filters.study.readme import _labelled

    scores = pd.DataFrame(
        [{"family": "image", "model": m, "seed": s, "metric": metric, "condition": "model", "value": v}
         for s in (0, 1, 2) for m, base in (("deit", 41.4), ("deit-grc", 41.2))
         for metric, v in (("lip_log10_upper", base + 0.01 * s), ("lip_upper_vacuous", 1.0))]
    )  # fmt: skip
    result = compare(scores, Comparison("image", "lip_log10_upper", "model", "deit", "deit-grc", -1, 0.05))
    assert result.verdict is Verdict.INCONCLUSIVE and "vacuous" in result.reason
    table, caption = _labelled(scores, "image", "lip_log10_upper", ["deit", "deit-grc"], "condition")
    assert table["deit"].iloc[0].startswith("vacuous (41.4") and "1e6" in caption
    tight = scores.assign(value=np.where(scores["metric"] == "lip_upper_vacuous", 0.0, scores["value"]))
    assert compare(tight, result.comparison).verdict is Verdict.SUPPORTED  # a real difference stays one


def test_study_scores_judge_run_folders_written_before_the_flags_existed() -> None:
    from run_summaries import lipschitz_summary

    from robustbench_filters.study.scores import lipschitz_scores
    from robustbench_filters.summaries import LipschitzSummary

    doc = lipschitz_summary(VACUOUS).to_dict()  # a document to edit as older writers wrote it
    for key in ("global_upper_vacuous", "local_upper_vacuous", "radius_vacuous"):
        doc["models"]["deit"].pop(key)
    for layer in doc["models"]["deit"]["layers"]:
        layer.pop("global_upper_vacuous")
    summary = LipschitzSummary.from_dict({"format_version": 2, "fingerprint": "f", **doc}, "a summary of 2025")
    old = pd.DataFrame(lipschitz_scores(summary, "image", 0))
    assert "lip_upper_vacuous" not in set(old["metric"])  # the summary alone cannot say
    new = pd.DataFrame(lipschitz_scores(summary, "image", 0, VACUOUS)).set_index(["metric", "condition"])
    assert new.loc[("lip_upper_vacuous", "model"), "value"] == 1.0
    assert new.loc[("lip_layer_upper_vacuous", "blocks.0"), "value"] == 1.0
