"""Intervals respect their domain: an interval of a non-negative or bounded quantity never leaves it, and every
table says which interval it shows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from robustbench_filters.gating.metrics import metrics_from_rows
from robustbench_filters.lipschitz.summary import summarize
from robustbench_filters.report import tables as T
from robustbench_filters.stats.intervals import (
    NONNEGATIVE,
    PROPORTION,
    clip,
    difference_domain,
    finite_interval,
    mean_interval,
)
from robustbench_filters.study.claims import Comparison, compare
from robustbench_filters.study.tables import domain, interval_cell, paired_table, seed_table


def _t(values: list[float]) -> tuple[float, float]:
    half = st.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
    return float(np.mean(values) - half), float(np.mean(values) + half)


def test_the_issue_example_two_lipschitz_lower_bounds_never_give_a_negative_interval() -> None:
    """`robfilt lipschitz -n 2`: lower bounds 0.05 and 0.316 gave mean 0.183 with [-1.5, 1.9] (t with 1 df)."""
    lower = [0.05, 0.316]
    assert _t(lower)[0] < 0  # the plain t-interval leaves the domain
    rows = pd.DataFrame([{"model": "deit", "layer": layer, "example_id": i, "method": "power", "lower": v * scale,
                          "local_upper": np.nan, "global_upper": np.nan, "radius": np.nan}
                         for layer, scale in (("model", 1.0), ("blocks.0", 0.5)) for i, v in enumerate(lower)])  # fmt: skip
    model = summarize(rows).models["deit"]
    assert model.lower_mean == pytest.approx(0.183)
    assert model.lower_mean_lo == 0.0 and model.lower_mean_hi == pytest.approx(_t(lower)[1])
    assert model.layers[0].lower_mean_lo == 0.0


def test_a_clipped_interval_keeps_its_coverage_and_its_estimand() -> None:
    """Clipping to the domain only removes impossible values: the mean is unchanged, inside values unchanged."""
    values = [0.4, 0.6, 0.5, 0.55]
    assert mean_interval(values, PROPORTION) == pytest.approx((0.5125, *_t(values)))  # inside: untouched
    near_one = [1.0, 1.0, 0.9, 1.0, 0.6]
    mean, lo, hi = mean_interval(near_one, PROPORTION)
    assert _t(near_one)[1] > 1 and hi == 1.0 and lo == pytest.approx(_t(near_one)[0]) and mean == pytest.approx(0.9)
    assert clip(-3.0, -1.0, NONNEGATIVE) == (0.0, 0.0)  # an interval entirely outside collapses onto the bound
    assert difference_domain(PROPORTION) == (-1.0, 1.0) and difference_domain(NONNEGATIVE) == (None, None)
    assert finite_interval([0.1], NONNEGATIVE) == (None, None)


def _scores(metric: str, values: dict[str, list[float]], family: str = "image") -> pd.DataFrame:
    return pd.DataFrame([{"family": family, "model": m, "seed": s, "metric": metric, "condition": "c", "value": v}
                         for m, vs in values.items() for s, v in enumerate(vs)])  # fmt: skip


@pytest.mark.parametrize(
    ("metric", "values", "low", "high"),
    [
        ("acc", [1.0, 0.94, 1.0], 0.0, 1.0),
        ("certified_acc", [0.0, 0.06, 0.0], 0.0, 1.0),
        ("certified_radius_mean", [0.01, 0.3, 0.02], 0.0, math.inf),
        ("lip_lower_mean", [0.05, 0.316, 0.01], 0.0, math.inf),
        ("seqlen_gain", [0.1, 9.0, 0.2], 0.0, math.inf),
    ],
)
def test_study_seed_intervals_stay_in_the_metrics_domain(metric, values, low, high) -> None:
    assert _t(values)[0] < low or _t(values)[1] > high  # the plain t-interval would leave it
    table = seed_table(_scores(metric, {"deit": values}), "image", metric)
    cell = table["deit"].iloc[0]
    lo, hi = (float(x) for x in cell.split("[")[1].rstrip("]").split(","))
    scale = 100 if high == 1.0 else 1  # accuracies print in %
    assert low * scale <= lo <= hi <= high * scale, cell


def test_paired_accuracy_differences_and_claims_stay_within_minus_one_to_one() -> None:
    scores = _scores("acc", {"deit": [0.0, 0.9, 0.0], "deit-grc": [1.0, 0.95, 1.0]})
    diff = paired_table(scores, "image", "acc", "deit")["diff vs deit"].iloc[0]
    hi = float(diff.split("[")[1].rstrip("]").split(",")[1])
    assert hi <= 100.0, diff
    result = compare(scores, Comparison("image", "acc", "c", "deit", "deit-grc", 1, 0.01))
    assert -1.0 <= result.lo <= result.hi <= 1.0
    assert domain("lip_log10_upper", difference=True) == (None, None)  # log10 bounds: no domain to respect
    assert interval_cell([0.2, 0.4], lambda x: f"{x:.2f}", domain("acc")) == "0.30 [0.00, 1.00]"


def test_token_accuracy_gets_a_bootstrap_interval_inside_zero_one() -> None:
    rows = pd.DataFrame({"model": "lm", "example_id": range(8), "kind": "clean", "attack": "clean", "eps": 0.0,
                         "nll_sum": [20.0 + i for i in range(8)], "n_tokens": 10, "correct_tokens": [10] * 7 + [4]})  # fmt: skip
    table = T.perplexity_table(rows)
    r = table.iloc[0]
    assert 0.0 <= r.token_acc_lo <= r.token_acc <= r.token_acc_hi <= 1.0 and r.token_acc_hi == 1.0
    m = next(m for m in metrics_from_rows(rows, "lm") if m.metric == "token_acc")
    assert m.has_interval and (m.lo, m.hi) == (r.token_acc_lo, r.token_acc_hi) and m.n is None


def test_every_table_names_its_interval(tmp_path, capsys) -> None:
    from robustbench_filters.cli.lipschitz import render_lipschitz_summary
    from robustbench_filters.gating.outcome import GateResult, Outcome
    from robustbench_filters.gating.output import markdown_summary

    rows = pd.DataFrame([{"model": "deit", "layer": "model", "example_id": i, "method": "power", "lower": v,
                          "local_upper": np.nan, "global_upper": np.nan, "radius": np.nan}
                         for i, v in enumerate([0.05, 0.316])])  # fmt: skip
    render_lipschitz_summary(summarize(rows), "power", per_layer=False, gap=False)
    assert "lower mean [95% t-CI, clipped at 0]" in capsys.readouterr().out
    outcome = Outcome("threshold", "image", "deit", "clean", "acc", ">= 50.0", 0.6, 0.5, 0.7, "pass", "ok", "run")
    text = markdown_summary(GateResult(name="g", outcomes=[outcome], runs=["run"], out=tmp_path))
    assert "measured [95% CI]" in text and "95% CI: acc: Wilson score interval over examples" in text
