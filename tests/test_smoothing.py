"""Randomized smoothing: CERTIFY/PREDICT against closed forms and independent statistics, determinism, batching."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from _smoothing_models import Linear3, TinyMLP, exact_p_top, linear_examples
from scipy import stats

import robustbench_filters as rf
from robustbench_filters.checks import FAIL, PASS, WARN
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.smoothing import (
    ABSTAIN,
    accuracy_curve,
    attack_rows,
    certificate_rows,
    certified_accuracy,
    certify,
    check_abstention,
    check_certified_below_attack,
    check_determinism,
    clopper_pearson_interval,
    clopper_pearson_lower,
    max_certifiable_radius,
    predict,
    sample_counts,
    smooth_adv_pgd,
    summarize,
)
from robustbench_filters.smoothing import Sampling as S
from robustbench_filters.smoothing.bounds import binom_test_half, radius_from_lower
from robustbench_filters.smoothing.sampler import BLOCK, example_noise, noise_block

SIGMA = 0.25
DISTANCES = [0.05, -0.1, 0.2, -0.3, 0.4, 0.5]  # signed distances to the linear boundary


# --- statistics against independent implementations -------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 10, 100, 1000])
@pytest.mark.parametrize("alpha", [0.001, 0.05])
def test_clopper_pearson_lower_matches_scipy_binomtest(n: int, alpha: float) -> None:
    ks = sorted({0, 1, n // 3, n // 2, n - 1, n})
    ours = clopper_pearson_lower(np.array(ks), n, alpha)
    for k, value in zip(ks, ours, strict=True):
        # one-sided (1 - alpha) lower bound == lower end of the two-sided (1 - 2 alpha) exact interval
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact").low
        assert value == pytest.approx(ref, abs=1e-12), (k, n)


def test_clopper_pearson_interval_matches_scipy_binomtest() -> None:
    for k, n in [(0, 10), (3, 10), (10, 10), (57, 100), (999, 1000)]:
        low, high = clopper_pearson_interval(k, n, 0.95)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_binomial_test_at_one_half_matches_scipy() -> None:
    for a, b in [(50, 50), (60, 40), (10, 0), (0, 10), (520, 480), (1, 2), (900, 3)]:
        assert binom_test_half(a, b) == pytest.approx(stats.binomtest(a, a + b, 0.5).pvalue, rel=1e-9, abs=1e-300)


def test_radius_and_its_cap() -> None:
    assert radius_from_lower(0.5, SIGMA) == 0.0 and radius_from_lower(0.3, SIGMA) == 0.0
    assert radius_from_lower(stats.norm.cdf(1.0), SIGMA) == pytest.approx(SIGMA)
    cap = max_certifiable_radius(SIGMA, 1000, 0.001)
    assert cap == pytest.approx(SIGMA * stats.norm.ppf(0.001 ** (1 / 1000)))
    assert 0.5 < cap < 0.62  # n = 1000 reaches r = 0.5 at sigma 0.25, and no further than 0.62


# --- the sampler --------------------------------------------------------------------------------------------------


def test_noise_stream_is_a_pure_function_of_its_identity() -> None:
    a = example_noise((1, 4, 4), SIGMA, 250, seed=3, example_id=7, phase="estimate")
    b = example_noise((1, 4, 4), SIGMA, 120, seed=3, example_id=7, phase="estimate", start=130)
    assert torch.equal(a[130:], b[:120])
    assert torch.equal(a[:BLOCK], noise_block((1, 4, 4), SIGMA, seed=3, example_id=7, phase="estimate", block=0))
    others = [
        example_noise((1, 4, 4), SIGMA, 50, seed=4, example_id=7, phase="estimate"),
        example_noise((1, 4, 4), SIGMA, 50, seed=3, example_id=8, phase="estimate"),
        example_noise((1, 4, 4), SIGMA, 50, seed=3, example_id=7, phase="select"),
        example_noise((1, 4, 4), 0.5, 50, seed=3, example_id=7, phase="estimate") / 2,
    ]
    assert all(not torch.allclose(a[:50], o) for o in others)
    big = example_noise((1, 28, 28), SIGMA, 1000, seed=0, example_id=0, phase="estimate")
    assert big.std().item() == pytest.approx(SIGMA, rel=0.01) and abs(big.mean().item()) < 0.002


def test_counts_match_a_per_example_reference_loop() -> None:
    model = TinyMLP().eval()
    x = torch.rand(3, 1, 28, 28)
    ids = [11, 4, 30]
    counts = sample_counts(model, x, ids, SIGMA, 230, "estimate", S.defaults(seed=5, batch=64))
    assert counts.shape == (3, 10) and (counts.sum(1) == 230).all()
    for slot, i in enumerate(ids):
        noise = example_noise((1, 28, 28), SIGMA, 230, seed=5, example_id=i, phase="estimate")
        with torch.no_grad():
            pred = model(x[slot] + noise).argmax(-1)
        assert np.array_equal(counts[slot], np.bincount(pred.numpy(), minlength=10))


def test_rows_do_not_depend_on_batch_size_order_or_slicing() -> None:
    model = TinyMLP().eval()
    x = torch.rand(5, 1, 28, 28)
    y = torch.randint(0, 10, (5,))
    ids = [3, 8, 1, 20, 6]
    s = S.defaults(n0=30, n=150, alpha=0.01, seed=2)
    ref = certificate_rows(model, x, y, ids, SIGMA, s.replace(batch=1))
    for bs in (7, 1000):
        assert ref.equals(certificate_rows(model, x, y, ids, SIGMA, s.replace(batch=bs))), bs
    perm = [4, 2, 0, 3, 1]
    shuffled = certificate_rows(model, x[perm], y[perm], [ids[i] for i in perm], SIGMA, s.replace(batch=7))
    assert (
        shuffled.sort_values("example_id")
        .reset_index(drop=True)
        .equals(ref.sort_values("example_id").reset_index(drop=True))
    )
    part = certificate_rows(model, x[1:3], y[1:3], ids[1:3], SIGMA, s.replace(batch=7))
    assert part.reset_index(drop=True).equals(ref.iloc[1:3].reset_index(drop=True))


def test_zoo_deit_rows_are_the_same_for_batch_sizes_1_and_7() -> None:
    from robustbench_filters import create_model
    from robustbench_filters.data import load_images

    model = create_model("deit", "micro", checkpoint="zoo")
    x, y = load_images("fashion-mnist", split="test").take(torch.tensor([0, 7]))
    s = S.defaults(n0=10, n=40, alpha=0.05, seed=0)
    a = certificate_rows(model, x, y, [0, 7], SIGMA, s.replace(batch=1), "deit")
    b = certificate_rows(model, x, y, [0, 7], SIGMA, s.replace(batch=7), "deit")
    assert a.equals(b)


# --- CERTIFY and PREDICT against the closed form --------------------------------------------------------------------


def _band(p: float, n: int, alpha: float, z: float = 4.5) -> tuple[float, float]:
    """Radii CERTIFY returns when the top-class count lies within z standard deviations of its mean n p."""
    sd = math.sqrt(n * p * (1 - p))
    lo_k, hi_k = max(0, math.floor(n * p - z * sd)), min(n, math.ceil(n * p + z * sd))
    return tuple(float(radius_from_lower(clopper_pearson_lower(k, n, alpha), SIGMA)) for k in (lo_k, hi_k))


def test_certify_on_a_linear_model_is_sound_and_within_monte_carlo_error() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, DISTANCES)
    n, alpha = 2000, 0.001
    cert = certify(model, x, list(range(len(y))), SIGMA, S.defaults(n0=100, n=n, alpha=alpha, batch=500, seed=0))
    for i, d in enumerate(DISTANCES):
        p = exact_p_top(d, SIGMA)
        true_radius = abs(d)  # the exact radius of the smoothed linear classifier: distance to the boundary
        assert SIGMA * stats.norm.ppf(p) == pytest.approx(true_radius)
        lo, hi = _band(p, n, alpha)
        assert cert.radius[i] <= true_radius, (d, cert.radius[i])
        assert lo <= cert.radius[i] <= hi, (d, lo, cert.radius[i], hi)
        if cert.radius[i] > 0:
            assert cert.prediction[i] == y[i]
        assert abs(cert.count_top[i] / n - p) < 4.5 * math.sqrt(p * (1 - p) / n)
    # far from the boundary the certificate is nearly tight; at d = 0.05 (pA = 0.58) it must not abstain
    assert cert.radius[DISTANCES.index(0.4)] > 0.3 and cert.prediction[0] == 0


def test_certify_abstains_on_the_boundary_and_never_predicts_the_dead_class() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, [1e-6, -1e-6])
    cert = certify(model, x, [0, 1], SIGMA, S.defaults(n0=100, n=500, alpha=0.001, batch=256, seed=1))
    assert (cert.prediction == ABSTAIN).all() and (cert.radius == 0).all()
    assert (cert.top_class_n0 != 2).all()
    pred, p_values = predict(model, x, [0, 1], SIGMA, S.defaults(n=500, alpha=0.001, seed=1))
    assert (pred == ABSTAIN).all() and (p_values > 0.001).all()


def test_predict_returns_the_smoothed_class_away_from_the_boundary() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, [0.3, -0.3, 0.6])
    pred, p_values = predict(model, x, [0, 1, 2], SIGMA, S.defaults(n=400, alpha=0.001, seed=0))
    assert np.array_equal(pred, y.numpy()) and (p_values <= 0.001).all()


# --- rows and summary -----------------------------------------------------------------------------------------------


def test_rows_columns_and_certified_accuracy() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, DISTANCES + [1e-6])
    y[1] = 0  # a wrong label: prediction 1 is confidently wrong, so no certificate for the label
    rows = certificate_rows(model, x, y, list(range(len(y))), [SIGMA, 0.5], S.defaults(n0=50, n=500), "lin")
    assert len(rows) == 2 * len(y) and set(rows.model) == {"lin"}
    one = rows[rows.sigma == SIGMA].set_index("example_id")
    assert not one.loc[1, "correct"] and one.loc[1, "certified_radius"] > 0
    assert math.isnan(one.loc[1, "certified_correct_radius"])
    last = one.loc[len(y) - 1]
    assert last.abstain and last.prediction == ABSTAIN and not last.correct and last.certified_radius == 0.0
    assert math.isnan(last.certified_correct_radius)
    ok = one[one.correct]
    assert (ok.certified_correct_radius == ok.certified_radius).all()
    sub = rows[rows.sigma == SIGMA]
    expected = float(((sub.correct) & (sub.certified_radius >= 0.25)).mean())
    assert certified_accuracy(sub, 0.25) == pytest.approx(expected)
    summary = summarize(rows, radii=(0.0, 0.25))
    s0 = summary[(summary.sigma == SIGMA) & (summary.radius == 0.0)].iloc[0]
    assert s0.certified_acc == pytest.approx(sub.correct.mean())
    assert s0.abstain_rate == pytest.approx(1 / len(y)) and s0.ci_low <= s0.certified_acc <= s0.ci_high
    curve = accuracy_curve(rows)
    assert (curve.groupby("sigma").certified_acc.apply(lambda s: (s.diff().dropna() <= 0).all())).all()


# --- the API and its checks -----------------------------------------------------------------------------------------


def test_certify_on_tensors_returns_rows_summary_and_passing_checks() -> None:
    """Tensors are data like any other: certify(model, data=(x, y)) certifies each example, noise seeded by its
    position."""
    model = Linear3()
    x, y = linear_examples(model, DISTANCES)
    res = rf.certify(model, [SIGMA], data=(x, y), n_examples=None, n0=50, n=500, noise_batch=300, attack_examples=0)
    certs = res.rows[res.rows.kind == "certificate"]
    assert len(certs) == len(y) and certs.example_id.tolist() == list(range(len(y)))
    direct = certificate_rows(model, x, y, list(range(len(y))), SIGMA, S.defaults(n0=50, n=500, batch=300), "model0")
    pd.testing.assert_frame_equal(certs[direct.columns].reset_index(drop=True), direct)
    table = res.summary.models["model0"][f"{SIGMA:g}"].certified
    assert [c.radius for c in table] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert {c.name: c.status for c in res.summary.checks} == {
        "model outputs finite on every noise draw": PASS,
        "abstention rate": PASS,
        "same seed, same certificates": PASS,
    }
    assert res.summary.n == 500 and res.summary.max_certifiable_radius[f"{SIGMA:g}"] > 0


def test_certify_on_tensors_with_the_attack_adds_robust_accuracy_and_the_soundness_check() -> None:
    model = Linear3()
    x, y = linear_examples(model, DISTANCES)
    res = rf.certify(
        model, SIGMA, data=(x, y), n_examples=None, n0=50, n=500, attack_examples=len(y),
        attack_radii=(0.25,), attack_steps=8, attack_draws=8,
    )  # fmt: skip
    check = next(c for c in res.summary.checks if c.name.startswith("certified <= robust"))
    assert check.status == PASS, check.detail
    (at,) = res.summary.empirical_l2
    assert at["radius"] == 0.25 and at["certified_acc"] <= at["smoothed_robust_acc"] < 1.0  # |d| < 0.25 are beaten
    assert len(res.rows[res.rows.kind == "attack"]) == len(y)


def test_abstention_check_warns_when_most_examples_abstain() -> None:
    rows = pd.DataFrame({"model": "m", "sigma": 0.5, "abstain": [True, True, False, False, False]})
    assert check_abstention(rows, "m").status == WARN
    assert "40.0%" in check_abstention(rows, "m").detail


class _Noisy(torch.nn.Module):
    """A model whose output depends on the global RNG: certificates cannot be reproduced."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn(x.shape[0], 3)


def test_determinism_check_fails_for_a_nondeterministic_model() -> None:
    model = _Noisy()
    x = torch.rand(3, 1, 28, 28)
    y = torch.zeros(3, dtype=torch.long)
    s = S.defaults(n0=20, n=100, batch=1000)
    rows = certificate_rows(model, x, y, [0, 1, 2], SIGMA, s, "noisy")
    check = check_determinism(model, x, y, rows, s)
    assert check.status == FAIL


def test_smooth_adv_pgd_reaches_the_boundary_of_a_linear_model_and_stays_in_the_ball() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, [0.2, -0.2])
    ids = [0, 1]
    for eps, flips in [(0.1, False), (0.35, True)]:
        x_adv = smooth_adv_pgd(model, x, y, ids, SIGMA, eps, S.defaults(attack_steps=10, attack_draws=8))
        assert ((x_adv - x).flatten(1).norm(dim=1) <= eps + 1e-5).all()
        assert x_adv.min() >= 0 and x_adv.max() <= 1
        pred, _ = predict(model, x_adv, ids, SIGMA, S.defaults(n=500, alpha=0.001), phase="adv")
        assert (pred != y.numpy()).all() if flips else (pred == y.numpy()).all(), (eps, pred)


def test_certified_accuracy_is_below_robust_accuracy_and_the_check_can_fail() -> None:
    model = Linear3().eval()
    x, y = linear_examples(model, [0.1, -0.2, 0.3, -0.45])
    s = S.defaults(n0=50, n=500, attack_steps=10, attack_draws=8)
    rows = certificate_rows(model, x, y, [0, 1, 2, 3], SIGMA, s, "lin")
    attacks = attack_rows(model, x, y, rows, (0.15, 0.25), s)
    check = check_certified_below_attack(attacks, "lin")
    assert check.status == PASS, check.detail
    for r, grp in attacks.groupby("radius"):
        assert grp.certified.mean() <= grp.robust.mean()
        assert not grp.robust.all(), r  # the attack does beat examples closer than r to the boundary
    inflated = rows.assign(certified_correct_radius=rows.certified_correct_radius * 10)
    bad = attack_rows(model, x, y, inflated, (0.25,), s)
    assert check_certified_below_attack(bad, "lin").status == FAIL


# --- bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"sigmas": [0.0]}, "sigmas needs positive noise levels"),
        ({"sigmas": [float("nan")]}, "sigmas must be a finite number"),
        ({"sigmas": []}, "sigmas needs positive noise levels"),
        ({"n0": 0}, "n0 must be positive"),
        ({"n": 0}, "n must be positive"),
        ({"alpha": 0.7}, "alpha must be in (0, 0.5)"),
        ({"batch_size": 0}, "batch_size must be positive"),
        ({"noise_batch": 0}, "noise_batch must be positive"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs: dict, needle: str) -> None:
    """The certify config is where every setting is checked (the engine functions take its settings record)."""
    model = Linear3()
    x, y = linear_examples(model, [0.1, 0.2])
    args = {"sigmas": [SIGMA], "n0": 10, "n": 20, **kwargs}
    with pytest.raises(RobfiltError) as info:
        rf.certify(model, args.pop("sigmas"), data=(x, y), n_examples=None, attack_examples=0, **args)
    assert needle in str(info.value) and "\n" not in str(info.value) and "--" not in str(info.value)


def test_the_settings_record_takes_the_configs_defaults() -> None:
    from robustbench_filters.configs import CertifyConfig

    config = CertifyConfig(models=("deit",), n0=7, seed=3, noise_batch=99)
    assert S.of(config, num_classes=10) == S.defaults(n0=7, seed=3, batch=99, num_classes=10)
    assert S.defaults().n0 == CertifyConfig(models=("deit",)).n0
