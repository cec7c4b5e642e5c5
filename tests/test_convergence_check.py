"""The convergence check with power: the exact finite-population bound, the verdicts, the sample it needs, and that
it fails on a deliberately weakened attack (robust CNN) while the default passes."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
from scipy.stats import hypergeom

from robustbench_filters.checks.convergence import (
    THRESHOLD_POINTS,
    allowed,
    check_convergence,
    needed_fraction,
    overstatement,
    sample_probability,
)
from robustbench_filters.stats.intervals import hypergeom_cdf, hypergeom_upper


@pytest.mark.parametrize(("population", "sample"), [(1, 1), (12, 5), (40, 40), (60, 17), (128, 64), (200, 3)])
def test_the_bound_is_scipys_exact_hypergeometric_inversion(population: int, sample: int) -> None:
    for broken in range(sample + 1):
        upper = hypergeom_upper(broken, sample, population)
        # scipy.stats.hypergeom(M=population, n=marked, N=sample): P(X <= broken) must exceed 5% at the bound ...
        assert hypergeom.cdf(broken, population, upper, sample) > 0.05
        # ... and fall to 5% or below one step above it (unless the bound is every survivor it could be)
        if upper < population - (sample - broken):
            assert hypergeom.cdf(broken, population, upper + 1, sample) <= 0.05
        else:
            assert upper == population - (sample - broken)


def test_the_cdf_matches_scipy() -> None:
    for population, marked, sample in itertools.product((5, 30, 97), (0, 3, 11), (1, 4, 20)):
        if marked > population or sample > population:
            continue
        for k in range(sample + 1):
            assert hypergeom_cdf(k, population, marked, sample) == pytest.approx(
                hypergeom.cdf(k, population, marked, sample), abs=1e-12
            )


def test_checking_every_survivor_gives_the_exact_count() -> None:
    assert [hypergeom_upper(k, 50, 50) for k in (0, 1, 7, 50)] == [0, 1, 7, 50]


def test_the_sample_size_the_bound_needs() -> None:
    assert allowed(256) == 1 and allowed(500) == 2 and allowed(1000) == 5
    assert needed_fraction(256) == pytest.approx(1 - 0.05**0.5)  # 78%: every survivor is checked at n = 256
    assert sample_probability(256) == sample_probability(1280) == 1.0
    for n in (2000, 10_000, 100_000):
        p = sample_probability(n)
        assert needed_fraction(n) < p < 1 and p * n >= 1280 - 1e-9
    # a strong attack (nothing broken) passes with the share the bound needs, and fails with much less
    for survivors in (60, 200, 1000):
        need = int(needed_fraction(256) * survivors) + 1
        assert overstatement(0, need, survivors, 256)[0] <= allowed(256)
        assert overstatement(0, need // 2, survivors, 256)[1] > THRESHOLD_POINTS


def _rows(cells: list[tuple[float, int, int, int, int]]) -> pd.DataFrame:
    """(eps, n, survivors, checked, broken) per eps -> rows as a run writes them."""
    frames = []
    for eps, n, survivors, checked, broken in cells:
        conv = ["broken"] * broken + ["held"] * (checked - broken) + [""] * (n - checked)
        correct = [True] * survivors + [False] * (n - survivors)
        frames.append(pd.DataFrame({"model": "m", "kind": "adversarial", "attack": "a", "eps": eps,
                                    "correct": correct, "convergence": conv}))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize(
    ("cells", "status"),
    [
        ([(0.05, 256, 100, 100, 0)], "pass"),  # nothing broken, every survivor checked: exact 0
        ([(0.05, 256, 100, 100, 1)], "pass"),  # exactly 1 of 256 = 0.39 points
        ([(0.05, 256, 100, 100, 2)], "fail"),  # 0.78 points
        ([(0.05, 256, 100, 50, 0)], "fail"),  # half checked, none broken: up to 4 examples (1.6 points)
        ([(0.05, 256, 1, 1, 1)], "fail"),  # broke everything it checked: never a pass (0.39 points or not)
        ([(0.05, 2000, 400, 300, 2)], "pass"),
        ([(0.02, 256, 80, 80, 0), (0.05, 256, 30, 30, 2)], "fail"),  # any eps fails the attack
        ([(0.05, 256, 0, 0, 0), (0.1, 256, 0, 0, 0)], None),  # no survivor anywhere: nothing checked, no check
    ],
)
def test_verdicts(cells, status) -> None:
    checks = check_convergence(_rows(cells), "m")
    if status is None:
        assert checks == []
        return
    (check,) = checks
    assert check.status == status, check.detail
    assert ("upper bound" in check.detail) == (status == "fail")
    assert "pts" in check.detail


def test_old_rows_without_the_column_have_no_check() -> None:
    assert check_convergence(_rows([(0.05, 256, 10, 10, 0)]).drop(columns="convergence"), "m") == []


@pytest.mark.slow
def test_the_check_fails_on_a_weakened_attack_and_passes_on_the_default(tmp_path) -> None:
    """On the robust CNN (benchmarks/robust_cnn.py) at Linf 0.15, 256 examples (B9's cell): the default with
    --steps 1 leaves examples that its stronger rerun breaks, so the check fails and the CLI exits 3; the default as
    shipped passes."""
    from pathlib import Path

    from robustbench_filters.api.evaluate import evaluate
    from robustbench_filters.cli import run

    cnn = "cnn-at=" + str(Path(__file__).resolve().parents[1] / "benchmarks" / "robust_cnn.py") + ":robust_cnn"
    common = ["attack", "--model", cnn, "--eps", "0.15", "-n", "256", "--batch-size", "256", "-q"]
    assert run([*common, "--steps", "1", "--out", str(tmp_path / "weak")]) == 3
    weak = json.loads((tmp_path / "weak" / "summary.json").read_text())
    strong = evaluate([cnn], eps=[0.15], n_examples=256, batch_size=256, seed=0)
    (w,) = [c for c in weak["checks"] if c["name"].startswith("attack converged")]
    (s,) = [c for c in strong.summary.checks if c.name.startswith("attack converged")]
    assert w["status"] == "fail" and "upper bound" in w["detail"], w
    assert s.status == "pass", s
    assert weak["models"]["cnn-at"]["robust"][0]["correct"] > strong.summary.models["cnn-at"].robust[0].correct


def test_an_escalating_attacks_last_round_counts_its_breaks_among_the_survivors() -> None:
    """The default's last round broke 1 of 98 checked and that example now counts as broken: the round began with
    98 survivors (97 correct + 1; 2 more fell to earlier rounds), every one checked, so the bound is the exact 1
    (0.39 points, a pass); a sampled last round after an escalation is judged at the Bonferroni level of its rounds."""
    n = 256
    conv = ["broken"] + ["held"] * 99 + [""] * (n - 100)
    correct = [False] + [True] * 99 + [False] * (n - 100)
    fooled = ["rerun"] * 3 + [""] * 97 + ["apgd-ce"] * (n - 100)
    fooled[1] = fooled[2] = "rerun"
    correct[1] = correct[2] = False  # broken by an earlier round: no longer survivors, not in the last round
    conv[1] = conv[2] = ""
    rows = pd.DataFrame({"model": "m", "kind": "adversarial", "attack": "a", "eps": 0.1, "correct": correct,
                         "convergence": conv, "fooled_by": fooled})  # fmt: skip
    (check,) = check_convergence(rows, "m")
    assert check.status == "pass", check.detail
    assert "broke 1 of 98 checked (98 survivors, the escalation broke 3)" in check.detail
    # sampling after several looks: a wider bound than one look at the same sample
    assert overstatement(0, 60, 100, 256, looks=3)[0] > overstatement(0, 60, 100, 256)[0]
    assert overstatement(2, 100, 100, 256, looks=3) == overstatement(2, 100, 100, 256)  # a census has no error


def test_each_eps_counts_only_its_own_escalation_and_one_round_needs_no_correction() -> None:
    """A checked attack searches every eps from the clean points (largest eps first), so each eps's rows hold only
    what its own rerun broke: eps 0.2's sampled last round, the only round there (it broke what the escalation
    broke), is judged at the plain 95% level, while eps 0.1's (three broken, one in the last round: several
    rounds) takes the Bonferroni level, and no count goes negative (it did when a smaller eps's breaks were
    subtracted from a larger one's)."""
    n = 2000
    frames = []
    for eps, rerun_broke, last in ((0.1, 3, 1), (0.2, 1, 1)):
        correct = [True] * 300 + [False] * (n - 300)
        fooled = [""] * 300 + ["rerun"] * rerun_broke + ["apgd-ce"] * (n - 300 - rerun_broke)
        conv = ["held"] * 150 + [""] * 150 + ["broken"] * last + [""] * (n - 300 - last)
        frames.append(pd.DataFrame({"model": "m", "kind": "adversarial", "attack": "a", "eps": eps,
                                    "correct": correct, "convergence": conv, "fooled_by": fooled}))  # fmt: skip
    (check,) = check_convergence(pd.concat(frames, ignore_index=True), "m")
    first, second = check.detail.split("; ")
    assert "the escalation broke 3)" in first and "the escalation broke 1)" in second, check.detail
    assert "broke -" not in check.detail
    several = overstatement(1, 151, 301, n, looks=3)[1]
    one = overstatement(1, 151, 301, n)[1]
    assert several > one
    assert f"at most {several:.2g} pts" in first and f"at most {one:.2g} pts" in second, check.detail
