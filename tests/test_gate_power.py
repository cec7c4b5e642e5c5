"""Minimum detectable effects: the printed figures against hand computations and against exact power."""

from __future__ import annotations

import math

import pytest

from robustbench_filters.gating.modes import Mode
from robustbench_filters.gating.power import (
    CheckPlan,
    accuracy_baseline_mde,
    accuracy_threshold_mde,
    log_ratio_mde,
    minimum_detectable,
    wilson_bound,
)
from robustbench_filters.gating.power_exact import baseline_power, exact_mde, threshold_power


def test_paired_mde_matches_hand_computation() -> None:
    """n = 500, one-sided alpha 0.05, power 0.8, discordance pi = 0.20, no tolerance.

    Connor's formula solved for the drop D:  D = (z_a sqrt(pi) + z_b sqrt(pi - D^2)) / sqrt(n)
      z_a = z_0.95 = 1.6448536, z_b = z_0.80 = 0.8416212, sqrt(500) = 22.3606798
      first term:  1.6448536 * sqrt(0.2) = 1.6448536 * 0.4472136 = 0.7356070;  / 22.3606798 = 0.0328973
      start at D = 0.05:      sqrt(0.2 - 0.0025)    = 0.4444097; * 0.8416212 = 0.3740248; / 22.36068 = 0.0167268
                              D = 0.0328973 + 0.0167268 = 0.0496241
      again, D^2 = 0.0024625: sqrt(0.1975375)       = 0.4444519; * 0.8416212 = 0.3740603; / 22.36068 = 0.0167284
                              D = 0.0328973 + 0.0167284 = 0.0496257   (converged: 4.96 points)
    """
    mde = accuracy_baseline_mde(Mode.PAIRED, 500, 0.6, discordance=0.2)
    assert mde == pytest.approx(0.0496257, abs=2e-6)
    plan = CheckPlan("acc", Mode.PAIRED, 500, 0.6, baseline=True)
    assert minimum_detectable(plan).effect == pytest.approx(0.0496257, abs=2e-6)
    text = minimum_detectable(plan).text()
    assert "detects 5.0 pp worse than the baseline with 80% power" in text and "20% of examples" in text


def test_interval_mdes_match_hand_computation() -> None:
    """Threshold min_acc = 0.70 at n = 128 (robustness.toml's clean check), interval mode:

    Wilson upper end < t  <=>  p^ < t - z sqrt(t (1 - t) / n):
      1.959964 * sqrt(0.7 * 0.3 / 128) = 1.959964 * 0.0405046 = 0.0793876
    then D = 0.0793876 + z_b sqrt(p (1 - p) / 128) with p = 0.7 - D:
      D = 0.115: p = 0.585, sqrt(0.242775 / 128) = 0.0435511, * 0.8416212 = 0.0366535 -> D = 0.1160411
      p = 0.5839589: sqrt(0.2429495 / 128) = 0.0435667, * 0.8416212 = 0.0366666 -> D = 0.1160542
    """
    assert accuracy_threshold_mde(Mode.INTERVAL, 128, 0.70) == pytest.approx(0.116054, abs=5e-6)
    # point mode: D = z_b sqrt(p (1 - p) / n) alone, smaller than the interval rule's
    assert accuracy_threshold_mde(Mode.POINT, 128, 0.70) < 0.04

    """Baseline at 60% with n = 500, interval mode, pi = 0.20:
      Wilson lower end of 0.6: centre = (0.6 + 3.841459/1000) / 1.0076829 = 0.5992382
                               half = 1.959964 * sqrt(0.00048 + 3.841459/1e6) / 1.0076829 = 0.0427835
                               lo = 0.5564547
      the fresh upper end falls below it when p^ < c = lo - z sqrt(lo (1 - lo) / 500)
                               = 0.5564547 - 1.959964 * 0.0222176 = 0.5129086,  i.e. a drop of 0.0870914
      D = 0.0870914 + 0.8416212 sqrt((0.2 - D^2) / 500):
        D = 0.1039: sqrt(0.1892048 / 500) = 0.0194527, * 0.8416212 = 0.0163718 -> D = 0.1034632
        D^2 = 0.0107046: sqrt(0.1892954 / 500) = 0.0194574 -> 0.0163757 -> D = 0.1034671
    """
    assert wilson_bound(0.6, 500, upper=False) == pytest.approx(0.5564547, abs=1e-6)
    assert accuracy_baseline_mde(Mode.INTERVAL, 500, 0.6, discordance=0.2) == pytest.approx(0.1034671, abs=5e-6)


def test_ratio_mde_matches_hand_computation() -> None:
    """Perplexity with log-se s = 0.02, paired, per-sequence correlation 0.5 between the runs: s_D = sqrt(2 * 0.5) * 0.02 = 0.02;
    delta = (1.6448536 + 0.8416212) * 0.02 = 0.0497295; exp(delta) - 1 = 0.0509866 (+5.1%)."""
    assert log_ratio_mde(Mode.PAIRED, 0.02, baseline=True, correlation=0.5) == pytest.approx(0.0509866, abs=1e-6)
    # interval baseline: 2 * 1.959964 * 0.02 + 0.8416212 * 0.02 = 0.0952318 -> +9.99%
    assert log_ratio_mde(Mode.INTERVAL, 0.02, True, correlation=0.5) == pytest.approx(math.expm1(0.0952318), abs=1e-6)
    # tolerance 5%: delta = log(1.05) + 0.0497295
    assert log_ratio_mde(Mode.PAIRED, 0.02, True, tolerance=0.05, correlation=0.5) == pytest.approx(
        math.expm1(math.log(1.05) + 0.0497295), abs=1e-6
    )
    # the default correlation 0.85: s_D = sqrt(0.3) * 0.02 = 0.0109545; delta = 2.4864748 * 0.0109545 = 0.0272381
    assert log_ratio_mde(Mode.PAIRED, 0.02, baseline=True) == pytest.approx(math.expm1(0.0272381), abs=1e-6)


@pytest.mark.parametrize("mode", [Mode.PAIRED, Mode.INTERVAL, Mode.POINT])
def test_planning_mde_has_about_80_percent_exact_power(mode: Mode) -> None:
    """The exact power of the real decision rule at the printed MDE (n = 500) is within 5 points of 80%."""
    mde = accuracy_baseline_mde(mode, 500, 0.6, discordance=0.2)
    assert mde is not None
    assert 0.75 <= baseline_power(mode, 500, 0.6, mde, 0.2) <= 0.85
    # and a drop of half the MDE is caught clearly less often (point mode fails half the time at no drop)
    assert baseline_power(mode, 500, 0.6, mde / 2, 0.2) < 0.7


def test_exact_paired_power_with_margin_and_threshold_power() -> None:
    mde = accuracy_baseline_mde(Mode.PAIRED, 500, 0.6, tolerance=0.02, discordance=0.2)
    assert mde is not None and mde > 0.02 + 0.04
    assert 0.72 <= baseline_power(Mode.PAIRED, 500, 0.6, mde, 0.2, tolerance=0.02) <= 0.88
    thr = accuracy_threshold_mde(Mode.INTERVAL, 500, 0.7)
    assert thr is not None and 0.75 <= threshold_power(Mode.INTERVAL, 500, 0.7, 0.7 - thr) <= 0.85
    # the exact MDE scan agrees with the planning figure within a point
    exact = exact_mde(lambda x: baseline_power(Mode.PAIRED, 500, 0.6, x, 0.2), 0.6, step=0.0025)
    assert exact is not None and abs(exact - 0.0496) < 0.01


def test_paired_beats_interval_at_every_n() -> None:
    for n in (64, 128, 256, 500, 1000):
        paired = accuracy_baseline_mde(Mode.PAIRED, n, 0.5, discordance=0.2)
        interval = accuracy_baseline_mde(Mode.INTERVAL, n, 0.5, discordance=0.2)
        assert paired is not None and interval is not None and paired < 0.7 * interval


def test_mde_for_metrics_without_sampling_error_or_interval() -> None:
    assert minimum_detectable(CheckPlan("lipschitz_upper", Mode.PAIRED, None, 1e43, True)).effect == 0.0
    unknown = minimum_detectable(CheckPlan("ppl", Mode.PAIRED, 64, 3.6, True))
    assert unknown.effect is None and "no interval" in unknown.text()
    assert minimum_detectable(CheckPlan("token_acc", Mode.INTERVAL, 64, 0.5, False)).effect is None
