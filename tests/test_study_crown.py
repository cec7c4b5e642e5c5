"""Claim (c) judged on the certified local bound of linear bound propagation: the study's ``lipschitz-crown`` piece,
its scores and its claim line (issue 43)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from robustbench_filters.study import plan as P
from robustbench_filters.study.claims import CLAIMS, Verdict, evaluate_claims
from robustbench_filters.study.measure import family_models, piece_options
from robustbench_filters.study.scores import crown_scores
from robustbench_filters.summaries.lipschitz import GapMedian

CROWN_CLAIM = next(c for c in CLAIMS if any(x.metric == "lip_log10_crown" for x in c.comparisons))


def test_the_full_plan_bounds_claim_c_s_pair_with_crown_after_the_other_vision_pieces() -> None:
    plan = P.full_plan(3)
    ids = [p.id for p in P.pieces(plan)]
    for s in plan.seeds:
        assert ids.index(f"lipschitz-crown/s{s}") == ids.index(f"certify-vision/s{s}") + 1
    assert family_models(plan, P.LIPSCHITZ_CROWN) == ("deit", "deit-grc")
    cls, values = piece_options(P.Piece(P.LIPSCHITZ_CROWN, 0), plan)
    assert cls.KIND == "lipschitz" and values["gap_crown"] and values["gap_crown_refresh"] == "deep"
    assert values["gap_rhos"] == (1e-3,) and values["n_examples"] == 4 and values["data"] == "fashion-mnist"
    # the claim compares exactly the models the piece bounds, at the piece's radius
    (cmp,) = CROWN_CLAIM.comparisons
    assert (cmp.baseline, cmp.variant) == family_models(plan, P.LIPSCHITZ_CROWN)
    assert cmp.condition == f"rho={plan.lipschitz_crown.gap_rhos[0]:g}" and cmp.direction == -1
    assert not CROWN_CLAIM.primary


@pytest.mark.parametrize(
    "changes", [{"lipschitz_crown": None}, {"vision_models": ("deit-bsa", "deit-bsa-grc")}], ids=["off", "no-pair"]
)
def test_a_plan_without_the_crown_piece_or_its_models_has_no_crown_piece(changes) -> None:
    plan = dataclasses.replace(P.full_plan(1), **changes)
    assert P.LIPSCHITZ_CROWN not in {p.kind for p in P.pieces(plan)}
    assert P.CERTIFY_VISION in {p.kind for p in P.pieces(plan)}


def test_adding_the_piece_left_the_other_lipschitz_piece_s_settings_as_they_were() -> None:
    """``gap_crown_refresh`` at its default is not a setting of the lipschitz-vision piece (ADDED_LATER), so the
    committed study's lipschitz pieces keep their fingerprints and are not measured again."""
    settings = P.template_settings(P.full_plan(1).lipschitz_vision)
    assert "gap_crown_refresh" not in settings and "gap_crown" not in settings
    assert P.template_settings(P.LIPSCHITZ_CROWN_TEMPLATE)["gap_crown_refresh"] == "deep"


class _Summary:
    def __init__(self, medians: list[GapMedian]) -> None:
        self.gap_log10_median = medians


def _median(model: str, crown: float | None, empirical: float = 1.1, layer: str = "model") -> GapMedian:
    return GapMedian(model=model, layer=layer, rho=1e-3, empirical=empirical, layerwise_estimate=1.5,
                     local_upper=38.0, local_first_order=None, local_taylor=None, baseline_local=None,
                     global_upper=41.0, local_crown=crown)  # fmt: skip


def _scores(crowns: dict[int, tuple[float, float]]) -> pd.DataFrame:
    rows = []
    for seed, (deit, grc) in crowns.items():
        rows += crown_scores(_Summary([_median("deit", deit), _median("deit-grc", grc), _median("deit", 9.0, layer="block0")]), seed)  # fmt: skip
    return pd.DataFrame(rows)


def test_crown_scores_are_the_model_rows_median_flagged_when_vacuous() -> None:
    scores = _scores({0: (2.0, 8.0)})
    crown = scores[scores.metric == "lip_log10_crown"].set_index("model")["value"]
    assert crown.to_dict() == {"deit": 2.0, "deit-grc": 8.0}  # the block row is not a model's bound
    flags = scores[scores.metric == "lip_crown_vacuous"].set_index("model")["value"]
    assert flags.to_dict() == {"deit": 0.0, "deit-grc": 1.0}  # 8.0 - 1.1 > 6 decades
    assert set(scores.condition) == {"rho=0.001"} and set(scores.family) == {"image"}


@pytest.mark.parametrize(
    ("crowns", "verdict"),
    [
        ({0: (2.0, 1.5), 1: (2.1, 1.6), 2: (2.2, 1.65)}, Verdict.SUPPORTED),  # deit-grc lower in every seed
        ({0: (1.5, 2.0), 1: (1.6, 2.1), 2: (1.65, 2.2)}, Verdict.NOT_SUPPORTED),
        ({0: (2.0, 2.7), 1: (1.7, 1.9), 2: (3.0, 2.3)}, Verdict.INCONCLUSIVE),
        ({0: (2.0, 7.5), 1: (2.1, 1.6), 2: (2.2, 1.65)}, Verdict.INCONCLUSIVE),  # vacuous in one seed
    ],
    ids=["supported", "not-supported", "inconclusive", "vacuous"],
)
def test_the_claim_line_judges_the_crown_bound_across_seeds(crowns, verdict) -> None:
    (result,) = evaluate_claims(_scores(crowns), [CROWN_CLAIM])
    assert result.verdict is verdict, result.reason
    vacuous = any(v - 1.1 > 6 for pair in crowns.values() for v in pair)
    assert ("vacuous" in result.reason) is vacuous, result.reason


@pytest.mark.slow
def test_a_study_with_the_crown_piece_scores_a_certified_bound_above_the_exact_norm(tmp_path) -> None:
    """End to end on the smoke plan (1 seed, 3 training steps), one image, the cheapest refresh."""
    from robustbench_filters.study import run_study
    from tests.small_study import smoke_plan

    plan = smoke_plan(lipschitz_crown=dataclasses.replace(P.LIPSCHITZ_CROWN_TEMPLATE, n_examples=1,
                                                          gap_crown_refresh="residual"))  # fmt: skip
    result = run_study(plan, tmp_path / "s", report=False)
    scores = pd.read_csv(tmp_path / "s" / "scores.csv")
    crown = scores[(scores.metric == "lip_log10_crown")].set_index("model")["value"]
    assert set(crown.index) == {"deit", "deit-grc"} and all(math.isfinite(v) for v in crown)
    rows = pd.read_parquet(tmp_path / "s" / "runs" / "s0" / "lipschitz-crown" / "rows.parquet")
    model = rows[rows["layer"] == "gap/model"]
    assert len(model) == 2 and (model["local_crown"] >= model["empirical"] - 1e-9).all()
    readme = (tmp_path / "s" / "README.md").read_text()
    assert "linear bound propagation (CROWN, refresh residual" in readme and result.out == tmp_path / "s"
