"""The gate's [certify] section: certified accuracy per model, sigma and radius, judged like accuracy (Wilson
intervals against thresholds, exact McNemar on the per-example certified outcomes against a baseline), vacuous
values that never pass silently, the run's sanity checks under the spec's ``sanity``, and one-line spec errors.

The runs here are written directly (certificate rows as ``robfilt certify`` writes them), so each test states the
exact per-example outcomes it judges; tests/test_bound_run_surfaces.py makes real certify runs through a spec.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_summaries import certify_summary

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.gate.run import run_gate
from robustbench_filters.gate.spec import load_spec
from robustbench_filters.gating import read_baseline
from robustbench_filters.gating.metrics import metrics_from_run
from robustbench_filters.runs.folder import RunWriter, load_run
from robustbench_filters.stats.intervals import max_certifiable_radius, wilson_interval

SIGMA, N_DRAWS, ALPHA = 0.25, 1000, 0.001
NAN = math.nan


def certify_run(
    out: Path,
    radii_by_sigma: dict[float, np.ndarray],
    *,
    radii: tuple[float, ...] = (0.0, 0.25, 0.5),
    n: int = N_DRAWS,
    abstain: bool = False,
    checks: list[dict] | None = None,
) -> Path:
    """Model 'deit' whose certified-correct radius of example i at each sigma is ``radii_by_sigma[sigma][i]``
    (NaN: wrong or abstaining, so certified at no radius)."""
    frames = []
    for sigma, correct_radius in radii_by_sigma.items():
        k = len(correct_radius)
        ok = ~np.isnan(correct_radius)
        frames.append(pd.DataFrame({
            "model": "deit", "example_id": np.arange(k), "label": 1, "sigma": sigma,
            "prediction": np.where(ok, 1, -1 if abstain else 2), "correct": ok, "abstain": abstain & ~ok,
            "count_top": n, "p_lower": 0.9, "certified_radius": np.where(ok, correct_radius, 0.0),
            "certified_correct_radius": correct_radius, "n0": 100, "n": n, "alpha": ALPHA, "seed": 0,
            "nonfinite_draws": 0, "kind": "certificate",
        }))  # fmt: skip
    rows = pd.concat(frames, ignore_index=True)
    k = len(next(iter(radii_by_sigma.values())))
    config = {"models": ["deit"], "sigmas": list(radii_by_sigma), "n0": 100, "n": n, "alpha": ALPHA,
              "radii": list(radii), "data": "fashion-mnist", "data_checksum": "abc", "example_ids_sha256": "ids0",
              "n_examples": k}  # fmt: skip
    summary = certify_summary(rows, radii, checks or [])
    with RunWriter(out, "certify", config, seed=0, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        w.finish(rows, summary)
    return out


def first(k: int, n: int, radius: float = 0.6) -> np.ndarray:
    """The first k of n examples certified correct up to ``radius``, the others not at all."""
    return np.where(np.arange(n) < k, radius, NAN)


def project(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("")
    (root / "robustness.toml").write_text(text)
    return root / "robustness.toml"


SECTION = '[certify]\nmodels = ["deit"]\nradii = [0, 0.25, 0.5]\n'


@pytest.mark.usefixtures("gate_in_process")
def test_thresholds_on_certified_accuracy_use_wilson_intervals(tmp_path: Path) -> None:
    """10 of 20 certified at radius 0.5 (Wilson [0.299, 0.701]): 0.45 passes, 0.65 warns, 0.71 fails; radius 0
    also counts the 4 examples certified only below 0.5."""
    run = certify_run(tmp_path / "run", {SIGMA: np.r_[first(10, 16), [0.1, 0.2, 0.3, 0.4]]})
    for threshold, status, code in ((0.45, "pass", 0), (0.65, "warn", 0), (0.71, "fail", 1)):
        spec = project(tmp_path, f"{SECTION}[[certify.require]]\nradius = [0, 0.5]\nmin_certified_acc = {threshold}\n")
        result = run_gate(spec, runs=[run], out=tmp_path / f"o{threshold}")
        by = {o.condition: o for o in result.outcomes if o.kind == "threshold"}
        assert set(by) == {"certified:sigma0.25@0", "certified:sigma0.25@0.5"}
        at_half = by["certified:sigma0.25@0.5"]
        assert at_half.status == status and at_half.metric == "certified_acc" and result.exit_code == code
        assert (at_half.value, at_half.lo, at_half.hi) == pytest.approx((0.5, *wilson_interval(10, 20)))
        assert at_half.hi == pytest.approx(0.7007, abs=1e-4) and "n = 20" in at_half.mde_text
        assert by["certified:sigma0.25@0"].value == pytest.approx(14 / 20)  # also those certified below 0.5
        assert cli_run(["check", "--spec", str(spec), "--run", str(run), "--out", str(tmp_path / "c"), "-q"]) == code
    plan = {p.condition: p for p in result.plan}
    assert plan["certified:sigma0.25@0.5"].n == 20 and plan["certified:sigma0.25@0.5"].mde == at_half.mde


def test_each_sigma_is_its_own_classifier(tmp_path: Path) -> None:
    run = certify_run(tmp_path / "run", {0.12: first(18, 20), 0.5: first(6, 20)})
    spec = project(
        tmp_path,
        '[certify]\nmodels = ["deit"]\nsigmas = [0.12, 0.5]\nradii = [0, 0.25, 0.5]\n'
        "[[certify.require]]\nsigma = 0.12\nradius = 0.25\nmin_certified_acc = 0.6\n"
        '[[certify.require]]\nsigma = ["1/2"]\nradius = [0.25, 0.5]\nmin_certified_acc = 0.6\n',
    )
    result = run_gate(spec, runs=[run], out=tmp_path / "o")
    got = {o.condition: o.status for o in result.outcomes if o.kind == "threshold"}
    assert got == {"certified:sigma0.12@0.25": "pass", "certified:sigma0.5@0.25": "fail",
                   "certified:sigma0.5@0.5": "fail"}  # fmt: skip


def test_paired_baseline_is_mcnemar_on_certified_outcomes(tmp_path: Path) -> None:
    """300 of 500 certified at 0.25 in the baseline; the fresh run loses 25 of them and gains 10 others."""
    base_r = first(300, 500)
    fresh_r = base_r.copy()
    fresh_r[:25] = NAN
    fresh_r[300:310] = 0.3
    base = certify_run(tmp_path / "base", {SIGMA: base_r})
    fresh = certify_run(tmp_path / "fresh", {SIGMA: fresh_r})
    baseline = tmp_path / "baseline.json"
    run_gate(runs=[base], write_baseline=baseline, out=tmp_path / "w")
    doc = json.loads(baseline.read_text())
    assert doc["version"] == 2 and set(doc["examples"]) == {"certify"}
    outcomes = {o["condition"]: o["correct"] for o in doc["outcomes"]}
    assert set(outcomes) == {"certified:sigma0.25@0", "certified:sigma0.25@0.25", "certified:sigma0.25@0.5"}
    assert outcomes["certified:sigma0.25@0.25"] == "1" * 300 + "0" * 200
    assert outcomes["certified:sigma0.25@0.5"] == "1" * 300 + "0" * 200  # certified up to 0.6
    assert read_baseline(baseline).unpaired_reason == ""

    for source in (baseline, base):  # a v2 baseline file, or the baseline run folder itself
        result = run_gate(runs=[fresh], baseline=source, out=tmp_path / "p")
        by = {o.condition: o for o in result.outcomes if o.kind == "baseline"}
        worse = by["certified:sigma0.25@0.25"]
        assert worse.mode == "paired" and worse.status == "fail" and result.exit_code == 1
        assert worse.p_value == pytest.approx(0.00832, abs=1e-4)  # P(Binomial(35, 1/2) >= 25), exact
        assert "25 lost, 10 gained" in worse.detail and "McNemar" in worse.detail
        assert "25 lost, 0 gained" in by["certified:sigma0.25@0.5"].detail  # 0.3 < 0.5: the gains do not count
    interval = run_gate(runs=[fresh], baseline=baseline, out=tmp_path / "i", mode="interval")
    (o,) = [o for o in interval.outcomes if o.condition == "certified:sigma0.25@0.25" and o.kind == "baseline"]
    assert o.mode == "interval" and o.status == "warn" and interval.passed
    same = run_gate(runs=[base], baseline=baseline, out=tmp_path / "s")
    assert same.passed and same.count("warn") == 0


def test_a_summary_baseline_falls_back_to_the_interval_rule(tmp_path: Path) -> None:
    """A committed summary.json of a certify run holds counts per radius: the same metrics, no per-example outcomes."""
    run = certify_run(tmp_path / "run", {SIGMA: first(12, 20)})
    summary = json.loads((run / "summary.json").read_text())
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    base = read_baseline(path)
    assert [(m.key, m.lo) for m in base.metrics] == [(m.key, m.lo) for m in metrics_from_run(load_run(run))]
    result = run_gate(runs=[run], baseline=path, out=tmp_path / "o")
    checks = [o for o in result.outcomes if o.kind == "baseline"]
    assert len(checks) == 3 and all(o.mode == "interval" and o.status == "pass" for o in checks)
    summary["models"]["deit"]["0.25"]["certified"][0]["certified"] = 21
    path.write_text(json.dumps(summary))
    with pytest.raises(
        RobfiltError, match=r"summary.json: certify summary of deit is malformed \(certified 21 of 20\)"
    ):
        read_baseline(path)


def test_vacuous_certified_accuracy_never_passes_silently(tmp_path: Path) -> None:
    """Every example abstained: 0% certified, which a limit of 0 and an unchanged baseline would both 'pass'."""
    silent = certify_run(tmp_path / "silent", {SIGMA: np.full(20, NAN)}, abstain=True)
    spec = project(tmp_path, f"{SECTION}[[certify.require]]\nradius = 0\nmin_certified_acc = 0.0\n")
    result = run_gate(spec, runs=[silent], out=tmp_path / "o")
    (o,) = [o for o in result.outcomes if o.kind == "threshold"]
    assert o.status == "warn" and "every example abstained" in o.detail and "met, but" in o.detail
    again = certify_run(tmp_path / "again", {SIGMA: np.full(20, NAN)}, abstain=True)
    paired = run_gate(runs=[again], baseline=silent, out=tmp_path / "b")
    assert {o.status for o in paired.outcomes if o.kind == "baseline"} == {"warn"}
    assert all(o.mode == "paired" and "vacuous" in o.detail for o in paired.outcomes if o.kind == "baseline")
    # a radius past what n = 50 draws certify (0.283 at sigma 0.25): 0% by construction, also vacuous
    top = max_certifiable_radius(SIGMA, 50, ALPHA)
    assert 0.25 < top < 0.5
    few = certify_run(tmp_path / "few", {SIGMA: first(10, 20, radius=0.28)}, n=50)
    fewer = certify_run(tmp_path / "fewer", {SIGMA: first(10, 20, radius=0.27)}, n=50)
    judged = {o.condition: o for o in run_gate(runs=[fewer], baseline=few, out=tmp_path / "f").outcomes}
    assert (
        judged["certified:sigma0.25@0.5"].status == "warn"
        and "radius lies past" in judged["certified:sigma0.25@0.5"].detail
    )
    assert judged["certified:sigma0.25@0.25"].status == "pass"


@pytest.mark.parametrize(("sanity", "status", "passed"), [("fail", "fail", False), ("warn", "warn", True),
                                                           ("ignore", None, True)])  # fmt: skip
def test_failed_soundness_checks_follow_the_spec_sanity_setting(
    tmp_path: Path, sanity: str, status: str | None, passed: bool
) -> None:
    unsound = {"name": "certified <= robust accuracy (SmoothAdv PGD)", "model": "deit", "status": "fail",
               "detail": "s=0.25 r=0.25: certified 60.0% vs robust 40.0% (2 certified examples confidently "
                         "misclassified)"}  # fmt: skip
    run = certify_run(tmp_path / "run", {SIGMA: first(12, 20)}, checks=[unsound])
    spec = project(
        tmp_path, f'sanity = "{sanity}"\n{SECTION}[[certify.require]]\nradius = 0.25\nmin_certified_acc = 0.3\n'
    )
    result = run_gate(spec, runs=[run], out=tmp_path / "o")
    sane = [o for o in result.outcomes if o.kind == "sanity"]
    assert [o.status for o in sane] == ([status] if status else [])
    assert result.passed is passed and all(o.family == "certify" and "SmoothAdv" in o.metric for o in sane)


def test_given_runs_must_be_made_with_the_sections_draws(tmp_path: Path) -> None:
    run = certify_run(tmp_path / "run", {SIGMA: first(12, 20)})
    spec = project(tmp_path, f"{SECTION}n = 100\n[[certify.require]]\nradius = 0.25\nmin_certified_acc = 0.3\n")
    with pytest.raises(RunStateError) as err:
        run_gate(spec, runs=[run], out=tmp_path / "o")
    assert "made with n 1000, but robustness.toml [certify] sets n = 100" in str(err.value)


def test_requirements_load_with_the_sections_sigma_and_radii(tmp_path: Path) -> None:
    spec = load_spec(
        project(tmp_path, f"{SECTION}[[certify.require]]\nradius = [0.25, 0.5]\nmin_certified_acc = 0.3\n")
    )
    reqs = spec.sections["certify"].requirements
    assert [(r.condition, r.metric, r.bound, r.threshold) for r in reqs] == [
        ("certified:sigma0.25@0.25", "certified_acc", "min", 0.3),
        ("certified:sigma0.25@0.5", "certified_acc", "min", 0.3),
    ]
    config = spec.sections["certify"].config
    assert config.radii == (0.0, 0.25, 0.5) and config.sigmas == (0.25,)


BAD = [
    ("[[certify.require]]\nmin_certified_acc = 0.3\n", "#1 needs radius = [...]"),
    ("[[certify.require]]\nradius = 0.3\nmin_certified_acc = 0.3\n",
     "radius 0.3 is not in [certify] radii = [0, 0.25, 0.5]"),
    ("[[certify.require]]\nradius = [0.25, 0.25]\nmin_certified_acc = 0.3\n", "radius lists 0.25 twice"),
    ("[[certify.require]]\nradius = 0.25\nsigma = 0.5\nmin_certified_acc = 0.3\n",
     "sigma 0.5 is not in [certify] sigmas = [0.25]"),
    ("[[certify.require]]\nradius = 0.25\nmin_certified_acc = 1.5\n", "must be a share of examples in [0, 1]"),
    ("[[certify.require]]\nradius = 0.25\neps = 0.25\nmin_certified_acc = 0.3\n",
     "unknown key 'eps' in [[certify.require]] #1"),
    ("[[certify.require]]\nradius = 0.25\nmin_acc = 0.3\n", "Did you mean 'min_certified_acc'"),
    ("[[certify.require]]\nradius = 0.25\nmin_certified_acc = 0.3\n[[certify.require]]\nradius = 0.25\n"
     "min_certified_acc = 0.3\n", "#2 requires min_certified_acc of deit under certified:sigma0.25@0.25 again"),
    ("sigma = 0.25\n", "unknown key 'sigma' in [certify]. Did you mean 'sigmas'"),
    ("sigmas = [0.25, 0.25]\n", "sigmas lists 0.25 twice"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_certify_spec_errors_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    head, sep, require = text.partition("[[certify.require]]")
    path = project(tmp_path, SECTION + head + sep + require)
    with pytest.raises(RobfiltError) as err:
        load_spec(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('sigmas = [0.12, 0.25]\n', "#1 names no sigma, but [certify] runs sigmas = [0.12, 0.25]; add sigma = 0.12"),
        ("n = 50\n", "radius 0.5 cannot be certified at sigma 0.25: with n = 50 noise draws and alpha = 0.001 no "
                     "radius past 0.283 can be; raise n"),
    ],
)  # fmt: skip
def test_ambiguous_or_uncertifiable_requirements_are_refused(tmp_path: Path, section: str, message: str) -> None:
    path = project(tmp_path, f"{SECTION}{section}[[certify.require]]\nradius = 0.5\nmin_certified_acc = 0.1\n")
    with pytest.raises(RobfiltError) as err:
        load_spec(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
