"""The study write-up draws its own figures from every seed: the claims forest plot first, then the curves."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from figure_checks import assert_print_ready
from matplotlib.colors import to_hex
from report_synthetic import DEIT, LMS, synthetic_scores

from robustbench_filters.study import evaluate_claims, full_plan
from robustbench_filters.study.curves import accuracy_seeds_figure, perplexity_seeds_figure
from robustbench_filters.study.forest import VERDICT_STYLE, claims_frame, forest_figure
from robustbench_filters.study.scores import StudyScores
from robustbench_filters.study.writeup import write_outputs


def test_write_up_regenerates_the_all_seed_figures(tmp_path: Path) -> None:
    scores = synthetic_scores()
    data = StudyScores.from_records(scores.to_dict("records"))
    claims = evaluate_claims(scores)
    result = types.SimpleNamespace(claims=claims, unavailable={})
    manifest = {"pieces": {}, "plan_fingerprint": "abc123"}
    readme = write_outputs(full_plan(3), tmp_path, manifest, data, result, report=True).read_text()
    stems = ("claims_forest", "accuracy_seeds", "perplexity_seeds", "lipschitz_seeds", "seqlen_seeds")
    for stem in stems:
        assert (tmp_path / "figures" / f"{stem}.png").exists() and (tmp_path / "figures" / f"{stem}.pdf").exists()
        assert f"(figures/{stem}.png)" in readme
    # the forest plot is the headline: shown with the claims, before the secondary evidence
    assert readme.index("figures/claims_forest.png") < readme.index("Secondary evidence")
    assert "Drawn from all 3 training seed(s)" in readme
    assert "no finished measurement of the first seed" in readme  # the reporter's part says why it is missing
    assert_print_ready(sorted((tmp_path / "figures").iterdir()))


def test_forest_plot_with_one_seed_shows_points_without_intervals() -> None:
    scores = synthetic_scores(seeds=(0,))
    frame = claims_frame(evaluate_claims(scores))
    assert frame["lo"].isna().all() and frame["diff"].notna().all()
    fig = forest_figure(frame, ["study"], "n = 1 seed")
    assert sum(len(ax.get_yticks()) for ax in fig.axes) == frame["row"].nunique()


def test_unmeasured_comparisons_stay_visible() -> None:
    scores = synthetic_scores()
    scores = scores[scores["family"] != "layer"]  # the synthetic layer study was not run
    frame = claims_frame(evaluate_claims(scores))
    missing = frame[frame["baseline"] == "softmax+pos"]
    assert len(missing) == 1 and missing["diff"].isna().all() and missing["verdict"].iloc[0].startswith("inconclusive")
    fig = forest_figure(frame, ["study"], "n = 3 seeds")
    assert any(t.get_text() == "not measured" for ax in fig.axes for t in ax.texts)


@pytest.fixture(scope="module")
def claims():
    return evaluate_claims(synthetic_scores())


def test_claims_frame_orients_and_scales_the_paired_differences(claims) -> None:
    frame = claims_frame(claims)
    a = frame[(frame["claim_id"] == "a") & frame["primary"]]
    assert list(a["seed"]) == [0, 1, 2] and (a["diff"] > 3).all()  # +5 pp per seed, in percentage points
    d = frame[(frame["claim_id"] == "d") & frame["primary"]]
    assert (d["diff"] > 0).all()  # lower perplexity is the claimed direction: flipped to positive
    assert set(d["unit"]) == {"perplexity: 100 \u00d7 log ratio (\u2248 % change)"}
    assert (frame.groupby("row").first().eval("lo <= mean <= hi")).all()
    assert frame.loc[frame["claim_id"] == "e", "verdict"].tolist()[-1] == "not supported"


def test_forest_plot_draws_every_comparison_with_its_verdict(claims) -> None:
    frame = claims_frame(claims)
    fig = forest_figure(frame, ["study"], "n = 3 seeds")
    n_rows = sum(len(ax.get_yticks()) for ax in fig.axes)
    assert n_rows == frame["row"].nunique() == sum(len(c.results) for c in claims)
    for ax in fig.axes:
        assert any(list(line.get_xdata()) == [0, 0] for line in ax.lines)  # the zero line
    supported = to_hex(VERDICT_STYLE[claims[0].verdict]["color"])
    means = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert to_hex(means[0].get_markeredgecolor()) == supported
    dots = sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections)
    assert dots == int(frame["diff"].notna().sum())  # one dot per seed and comparison


def test_study_curves_use_every_seed() -> None:
    scores = synthetic_scores()
    fig = accuracy_seeds_figure(scores, DEIT, ["r"], "n = 24")
    ax = fig.axes[0]
    thin = [line for line in ax.lines if line.get_alpha() is not None and line.get_alpha() < 1]
    assert len(thin) == 3 * len(DEIT) and len(ax.lines) == 4 * len(DEIT)
    ppl = perplexity_seeds_figure(scores, LMS, ["r"], "n = 10")
    assert [ax.get_yscale() for ax in ppl.axes] == ["log", "log", "linear"]  # e^4 = 55x; word swap e^0.8
