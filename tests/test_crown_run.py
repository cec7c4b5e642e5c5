"""Verified robust accuracy through the command line and the API: ``robfilt certify --method ibp|crown-ibp|crown``.

The verdict of one example at one eps, the counts behind verified <= robust <= clean, the soundness check (a
verified example the default attack breaks fails the run: exit 3, shown as failing), the refusal of the other
method's options in one line, and one end-to-end CROWN run on a zoo DeiT.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_filters.checks import FAIL, PASS
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.names import BOUND_METHODS, BOUND_REFRESH
from robustbench_filters.crown.run import (
    BROKEN,
    CONTRADICTED,
    UNKNOWN,
    VERIFIED,
    check_verified_survive,
    per_eps,
    status_of,
)

QUIET = ["--workers", "1", "-q"]


def test_the_vocabulary_is_the_engines() -> None:
    from robustbench_filters.crown import METHODS
    from robustbench_filters.crown.propagate import REFRESH_SUFFIXES

    assert METHODS == BOUND_METHODS and set(BOUND_REFRESH) == set(REFRESH_SUFFIXES)


def test_status_of_each_case() -> None:
    assert status_of(True, True, True) == VERIFIED
    assert status_of(True, True, False) == UNKNOWN
    assert status_of(True, False, False) == BROKEN
    assert status_of(False, False, False) == BROKEN
    assert status_of(False, True, False) == BROKEN  # misclassified: broken at every eps
    assert status_of(True, False, True) == CONTRADICTED  # a wrong bound
    assert status_of(False, False, True) == CONTRADICTED


def _rows(cases: list[tuple[bool, bool, bool]], eps: float = 0.01) -> pd.DataFrame:
    return pd.DataFrame([
        {"model": "m", "example_id": i, "eps": eps, "clean_correct": c, "robust": r, "verified": v,
         "status": status_of(c, r, v)}
        for i, (c, r, v) in enumerate(cases)
    ])  # fmt: skip


def test_counts_order_verified_robust_clean_and_the_unknown_share() -> None:
    rows = _rows([(True, True, True), (True, True, False), (True, False, False), (False, False, False)])
    (at,) = per_eps(rows, (0.01,))
    assert (at.clean, at.robust, at.verified, at.unknown, at.contradicted) == (3, 2, 1, 1, 0)
    assert at.verified_acc <= at.robust_acc <= at.clean_acc
    assert at.unknown_share == 0.25 and at.verified_of_clean == pytest.approx(1 / 3)
    assert check_verified_survive(rows, "m").status == PASS


def test_a_verified_example_the_attack_breaks_fails_the_soundness_check() -> None:
    rows = _rows([(True, True, True), (True, False, True)])
    check = check_verified_survive(rows, "m")
    assert check.status == FAIL and "example 1 at eps 0.01" in check.detail and "\n" not in check.detail
    (at,) = per_eps(rows, (0.01,))
    assert at.contradicted == 1 and at.verified > at.robust  # what the check exists to catch


def test_the_other_methods_options_are_refused_in_one_line(capsys) -> None:
    cases = {
        ("--method", "crown", "--n0", "5"): "--n0 is an option of randomized smoothing (--method smoothing), not of "
        "--method crown",
        ("--eps", "0.01"): "--eps is an option of --method ibp/crown-ibp/crown, not of --method smoothing",
        ("--method", "ibp", "--refresh", "inner"): "--refresh is read by --method crown only",
        ("--method", "beta-crown"): "--method must be one of smoothing, ibp, crown-ibp, crown",
        ("--method", "crown", "--refresh", "deeper"): "--refresh must be one of all, full, deep, inner, residual, none",
    }
    for argv, message in cases.items():
        assert run(["certify", *argv, *QUIET]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_the_api_refuses_them_too_runs_ibp_and_the_report_shows_it(tmp_path: Path) -> None:
    from robustbench_filters.api.evaluate import certify
    from robustbench_filters.summaries import VerifiedSummary

    with pytest.raises(RobfiltError, match="sigmas is an option of randomized smoothing"):
        certify(["deit"], [0.25], method="crown")
    res = certify(["deit"], method="ibp", eps=[1e-4], n_examples=2, out=tmp_path / "ibp")
    assert isinstance(res.summary, VerifiedSummary) and res.summary.method == "ibp"
    (at,) = res.summary.models["deit"]
    assert at.verified == 0 and at.robust <= at.clean == 2  # IBP is vacuous on the zoo DeiTs (docs/certify.md)
    assert set(res.rows["status"]) <= {UNKNOWN, BROKEN}
    from robustbench_filters.report import build_report

    build_report([tmp_path / "ibp"], tmp_path / "report", figures=())
    table = pd.read_csv(tmp_path / "report" / "tables" / "verified_accuracy.csv")
    assert table[["model", "n", "clean", "verified", "contradicted"]].values.tolist() == [["deit", 2, 100.0, 0.0, 0]]


def test_a_verifier_that_claims_too_much_is_caught_and_exits_3(tmp_path: Path, monkeypatch, capsys) -> None:
    """Every bound claims verified; at eps 0.2 the default attack breaks the zoo deit, so the check must fail."""
    from robustbench_filters.crown.verify import Verifier

    real = Verifier.verify

    def claims(self, *args, **kwargs):
        return [dataclasses.replace(v, verified=True) for v in real(self, *args, **kwargs)]

    monkeypatch.setattr(Verifier, "verify", claims)
    argv = ["certify", "--method", "ibp", "-m", "deit", "--eps", "0.2", "-n", "4", "--out", str(tmp_path / "r")]
    assert run([*argv, *QUIET]) == 3
    assert "FAIL" in capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    (check,) = doc["checks"]
    assert check["status"] == FAIL and "a bound is wrong" in check["detail"]
    (at,) = doc["models"]["deit"]
    assert at["contradicted"] >= 1 and at["verified"] == at["clean"]


def test_crown_verifies_a_zoo_deit_end_to_end(tmp_path: Path, capsys) -> None:
    """One example at eps 1e-4 (refresh inner, ~2,600 passes): verified, and the attack does not break it."""
    out = tmp_path / "crown"
    argv = ["certify", "--method", "crown", "--refresh", "inner", "-m", "deit", "--eps", "1e-4", "-n", "1"]
    assert run([*argv, "--out", str(out), "--workers", "1"]) == 0
    shown = capsys.readouterr().out
    assert "verified robust accuracy" in shown and "crown, refresh inner" in shown
    doc = json.loads((out / "summary.json").read_text())
    (at,) = doc["models"]["deit"]
    assert (at["clean"], at["robust"], at["verified"], at["contradicted"]) == (1, 1, 1, 0)
    assert doc["checks"][0]["status"] == PASS and doc["bound_passes"]["deit"] > 100
