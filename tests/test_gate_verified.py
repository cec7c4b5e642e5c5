"""The gate's [verified] section: verified robust accuracy (bound propagation) per model and Linf eps, judged like
accuracy (Wilson intervals against thresholds, exact McNemar on the per-example verified outcomes against a
baseline), its soundness check under the spec's ``sanity``, one-line spec errors, and one fresh run through a spec.

The runs judged here are written directly (rows as ``robfilt certify --method crown`` writes them), so each test
states the exact per-example outcomes it judges; the last test makes a real verified run through the gate.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_summaries import checks_part, typed
from test_gate_certify import project

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.crown.run import COLUMNS, per_eps, status_of
from robustbench_filters.gate.run import run_gate
from robustbench_filters.gate.spec import load_spec
from robustbench_filters.gating import read_baseline
from robustbench_filters.gating.metrics import metrics_from_run
from robustbench_filters.runs.folder import RunWriter, load_run
from robustbench_filters.stats.intervals import wilson_interval
from robustbench_filters.summaries.verified import VerifiedSummary

EPS = (1e-4, 3e-4)


def verified_run(
    out: Path, verified: dict[float, np.ndarray], *, refresh: str = "deep", checks: list[dict] | None = None
) -> Path:
    """Model 'deit-at' whose example i is verified at eps when ``verified[eps][i]`` (every example clean-correct and
    robust, so an example not verified is unknown)."""
    frames = []
    for eps, ok in verified.items():
        k = len(ok)
        frames.append(pd.DataFrame({
            "model": "deit-at", "example_id": np.arange(k), "label": 1, "eps": eps, "clean_correct": True,
            "robust": True, "bounded": True, "verified": ok, "status": [status_of(True, True, bool(v)) for v in ok],
            "worst_margin": np.where(ok, 1.0, -1.0), "bound_passes": 2500.0,
        }))  # fmt: skip
    rows = pd.concat(frames, ignore_index=True)[COLUMNS]
    k = len(next(iter(verified.values())))
    grid = sorted(verified)
    summary = typed(VerifiedSummary, {
        "kind": "verified", "family": "image", "data": "fashion-mnist", "n_examples": k, "seed": 0,
        "method": "crown", "refresh": refresh, "min_margin": 1e-4, "attack": "apgd-adaptive", "eps": grid,
        "models": {"deit-at": [e.to_dict() for e in per_eps(rows, tuple(grid))]}, "bound_passes": {"deit-at": 2500.0},
        **checks_part(checks or []),
    })  # fmt: skip
    config = {"models": ["deit-at"], "method": "crown", "refresh": refresh, "min_margin": 1e-4, "eps": grid,
              "data": "fashion-mnist", "data_checksum": "abc", "example_ids_sha256": "ids0", "n_examples": k}  # fmt: skip
    with RunWriter(out, "verified", config, seed=0) as w:
        w.write_part("all", rows)
        w.finish(rows, summary)
    return out


def first(k: int, n: int) -> np.ndarray:
    return np.arange(n) < k


SECTION = '[verified]\nmodels = ["deit-at"]\neps = [1e-4, 3e-4]\n'


@pytest.mark.usefixtures("gate_in_process")
def test_thresholds_on_verified_accuracy_use_wilson_intervals(tmp_path: Path) -> None:
    """10 of 20 verified at 3e-4 (Wilson [0.299, 0.701]): 0.45 passes, 0.65 warns, 0.71 fails."""
    run = verified_run(tmp_path / "run", {1e-4: first(16, 20), 3e-4: first(10, 20)})
    for threshold, status, code in ((0.45, "pass", 0), (0.65, "warn", 0), (0.71, "fail", 1)):
        spec = project(tmp_path, f"{SECTION}[[verified.require]]\neps = [1e-4, 3e-4]\nmin_verified_acc = {threshold}\n")
        result = run_gate(spec, runs=[run], out=tmp_path / f"o{threshold}")
        by = {o.condition: o for o in result.outcomes if o.kind == "threshold"}
        assert set(by) == {"verified@0.0001", "verified@0.0003"}
        o = by["verified@0.0003"]
        assert o.status == status and o.metric == "verified_acc" and result.exit_code == code
        assert (o.value, o.lo, o.hi) == pytest.approx((0.5, *wilson_interval(10, 20)))
        assert by["verified@0.0001"].value == pytest.approx(16 / 20) and "n = 20" in o.mde_text
        assert cli_run(["check", "--spec", str(spec), "--run", str(run), "--out", str(tmp_path / "c"), "-q"]) == code


def test_paired_baseline_is_mcnemar_on_verified_outcomes(tmp_path: Path) -> None:
    """300 of 500 verified at 3e-4 in the baseline; the fresh run loses 25 of them and gains 10 others."""
    base_v = first(300, 500)
    fresh_v = base_v.copy()
    fresh_v[:25] = False
    fresh_v[300:310] = True
    base = verified_run(tmp_path / "base", {3e-4: base_v})
    fresh = verified_run(tmp_path / "fresh", {3e-4: fresh_v})
    baseline = tmp_path / "baseline.json"
    run_gate(runs=[base], write_baseline=baseline, out=tmp_path / "w")
    doc = json.loads(baseline.read_text())
    assert doc["version"] == 2 and set(doc["examples"]) == {"verified"}
    assert {o["condition"]: o["correct"] for o in doc["outcomes"]} == {"verified@0.0003": "1" * 300 + "0" * 200}
    for source in (baseline, base):  # a v2 baseline file, or the baseline run folder itself
        result = run_gate(runs=[fresh], baseline=source, out=tmp_path / "p")
        (worse,) = [o for o in result.outcomes if o.kind == "baseline"]
        assert worse.mode == "paired" and worse.status == "fail" and result.exit_code == 1
        assert worse.p_value == pytest.approx(0.00832, abs=1e-4)  # P(Binomial(35, 1/2) >= 25), exact
        assert "25 lost, 10 gained" in worse.detail and "McNemar" in worse.detail
    assert run_gate(runs=[base], baseline=baseline, out=tmp_path / "s").passed


def test_a_summary_baseline_falls_back_to_the_interval_rule_and_is_checked(tmp_path: Path) -> None:
    run = verified_run(tmp_path / "run", {1e-4: first(14, 20), 3e-4: first(12, 20)})
    summary = json.loads((run / "summary.json").read_text())
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    assert [(m.key, m.lo) for m in read_baseline(path).metrics] == [
        (m.key, m.lo) for m in metrics_from_run(load_run(run))
    ]
    result = run_gate(runs=[run], baseline=path, out=tmp_path / "o")
    checks = [o for o in result.outcomes if o.kind == "baseline"]
    assert len(checks) == 2 and all(o.mode == "interval" and o.status == "pass" for o in checks)
    summary["models"]["deit-at"][1]["verified"] = 21
    path.write_text(json.dumps(summary))
    with pytest.raises(RobfiltError, match=r"verified summary of deit-at is malformed \(verified 21 of 20\)"):
        read_baseline(path)


@pytest.mark.parametrize(("sanity", "status", "passed"), [("fail", "fail", False), ("warn", "warn", True),
                                                           ("ignore", None, True)])  # fmt: skip
def test_a_failed_soundness_check_follows_the_spec_sanity_setting(
    tmp_path: Path, sanity: str, status: str | None, passed: bool
) -> None:
    unsound = {"name": "verified examples survive the default attack", "model": "deit-at", "status": "fail",
               "detail": "1 of 12 verified (example, eps) broken by apgd-adaptive"}  # fmt: skip
    run = verified_run(tmp_path / "run", {3e-4: first(12, 20)}, checks=[unsound])
    spec = project(
        tmp_path, f'sanity = "{sanity}"\n{SECTION}[[verified.require]]\neps = 3e-4\nmin_verified_acc = 0.1\n'
    )
    result = run_gate(spec, runs=[run], out=tmp_path / "o")
    sanity_outcomes = [o for o in result.outcomes if o.kind == "sanity" and o.status != "pass"]
    assert [o.status for o in sanity_outcomes] == ([status] if status else [])
    assert result.passed is passed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{SECTION}[[verified.require]]\neps = 1e-3\nmin_verified_acc = 0.5\n",
         r"\[\[verified.require\]\] #1 eps 0.001 is not in \[verified\] eps = \[0.0001, 0.0003\]"),
        (f"{SECTION}[[verified.require]]\nmin_verified_acc = 0.5\n",
         r"#1 needs eps = \[...\]: the Linf eps its verified accuracy is checked at"),
        (f"{SECTION}[[verified.require]]\neps = 1e-4\nmin_acc = 0.5\n", r"unknown key 'min_acc'"),
        (f"{SECTION}[[verified.require]]\neps = 1e-4\nmin_verified_acc = 1.5\n", r"min_verified_acc"),
        ('[verified]\nmodels = ["deit-at"]\nsigmas = [0.25]\n', r"unknown key 'sigmas' in \[verified\]"),
        ('[verified]\nmodels = ["deit-at"]\nmethod = "smoothing"\n', r"\[verified\] method must be one of ibp"),
        ('[certify]\nmodels = ["deit-at"]\nmethod = "crown"\n',
         r"\[certify\] method = 'crown' verifies the model itself by bound propagation: that is the \[verified\]"),
    ],
)  # fmt: skip
def test_spec_errors_are_one_line_and_name_the_spec(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(RobfiltError, match=message) as info:
        load_spec(project(tmp_path, text))
    assert "\n" not in str(info.value) and str(info.value).startswith("robustness.toml: ")


def test_a_given_run_bounded_otherwise_than_the_spec_says_is_refused(tmp_path: Path) -> None:
    run = verified_run(tmp_path / "run", {3e-4: first(12, 20)}, refresh="inner")
    spec = project(tmp_path, f'{SECTION}refresh = "all"\n[[verified.require]]\neps = 3e-4\nmin_verified_acc = 0.1\n')
    with pytest.raises(RunStateError, match=r"was made with refresh inner, but robustness.toml \[verified\] sets "):
        run_gate(spec, runs=[run], out=tmp_path / "o")


def test_a_fresh_verified_run_through_the_spec(tmp_path: Path) -> None:
    """The gate makes the section's run (IBP: two passes per bound) and judges its verified accuracy: IBP verifies
    nothing on the zoo deit at 0.01 (docs/certify.md), and the default attack breaks what it can."""
    spec = project(
        tmp_path, '[verified]\nmodels = ["deit"]\nmethod = "ibp"\neps = [0.01]\nn_examples = 3\n'
        "[[verified.require]]\neps = 0.01\nmin_verified_acc = 0.0\n",
    )  # fmt: skip
    result = run_gate(spec, out=tmp_path / "o")
    (o,) = [o for o in result.outcomes if o.kind == "threshold"]
    assert (o.condition, o.metric, o.value) == ("verified@0.01", "verified_acc", 0.0) and "n = 3" in o.mde_text
    run = load_run(tmp_path / "o" / "verified")
    assert run.kind == "verified" and run.manifest["config"]["method"] == "ibp"
    assert set(run.rows["status"]) <= {"broken", "unknown"} and result.passed
