"""`robfilt check` on the gating path: paired vs interval through the whole gate, Holm across paired checks, the
planned and reported minimum detectable effects, v2 baselines, different examples refused, JSON and JUnit shapes,
and the spec keys of modes and baselines."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_summaries import image_summary

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.gate.run import run_gate
from robustbench_filters.gate.spec import load_spec
from robustbench_filters.gating import Correction, Mode, read_baseline, run_wall_seconds
from robustbench_filters.gating.metrics import baseline_document, metrics_from_run
from robustbench_filters.runs.folder import RunWriter, load_run

CONFIG = {"data": "fashion-mnist", "data_checksum": "abc", "example_ids_sha256": "ids0", "n_examples": 500}


def image_run(out: Path, outcomes: dict[tuple[str, float], np.ndarray], config: dict | None = None) -> Path:
    """Model 'deit' with the given per-example outcomes under each (attack, eps)."""
    frames = [
        pd.DataFrame(
            {
                "model": "deit",
                "example_id": np.arange(len(c)),
                "kind": "adversarial",
                "attack": a,
                "eps": e,
                "norm": "linf",
                "correct": c,
                "clean_correct": True,
            }
        )  # fmt: skip
        for (a, e), c in outcomes.items()
    ]
    rows = pd.concat(frames, ignore_index=True)
    with RunWriter(out, "attack", config or CONFIG, seed=0, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        w.finish(rows, image_summary(rows))
    return out


def drop(n: int = 500, lost: int = 25, gained: int = 10, right: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Baseline `right` of n correct; the fresh run loses `lost` of those and gains `gained` others."""
    base = np.arange(n) < right
    fresh = base.copy()
    fresh[:lost] = False
    fresh[right : right + gained] = True
    return base, fresh


def project(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("")
    (root / "robustness.toml").write_text(text)
    return root / "robustness.toml"


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
def test_paired_gate_catches_a_3_point_drop_that_the_interval_rule_misses(tmp_path: Path) -> None:
    base_c, fresh_c = drop()  # 60.0% -> 57.0% on the same 500 examples: 25 lost, 10 gained
    base = image_run(tmp_path / "base", {("pgd", 0.01): base_c})
    fresh = image_run(tmp_path / "fresh", {("pgd", 0.01): fresh_c})
    baseline = tmp_path / "baseline.json"
    run_gate(runs=[base], write_baseline=baseline, out=tmp_path / "w")
    assert json.loads(baseline.read_text())["version"] == 2

    paired = run_gate(runs=[fresh], baseline=baseline, out=tmp_path / "p")
    (o,) = [o for o in paired.outcomes if o.kind == "baseline"]
    assert o.status == "fail" and o.mode == "paired" and paired.exit_code == 1
    assert o.p_value == pytest.approx(0.00832, abs=1e-4)  # P(Binomial(35, 1/2) >= 25), exact
    assert "25 lost, 10 gained" in o.detail and "McNemar" in o.detail
    interval = run_gate(runs=[fresh], baseline=baseline, out=tmp_path / "i", mode="interval")
    (o,) = [o for o in interval.outcomes if o.kind == "baseline"]
    assert o.status == "warn" and o.mode == "interval" and interval.exit_code == 0
    # the same drop through the CLI: exit 1 paired, 0 with --mode interval
    args = ["check", "--run", str(fresh), "--baseline", str(baseline), "--out", str(tmp_path / "c"), "-q"]
    assert cli_run(args) == 1
    assert cli_run([*args, "--mode", "interval"]) == 0


def test_two_identical_runs_pass_with_p_1(tmp_path: Path) -> None:
    base_c, _ = drop()
    a = image_run(tmp_path / "a", {("clean", 0.0): base_c, ("pgd", 0.01): base_c[::-1].copy()})
    b = image_run(tmp_path / "b", {("clean", 0.0): base_c.copy(), ("pgd", 0.01): base_c[::-1].copy()})
    result = run_gate(runs=[b], baseline=a, out=tmp_path / "o")
    checks = [o for o in result.outcomes if o.kind == "baseline"]
    assert len(checks) == 2 and result.passed and result.count("warn") == 0
    assert all(o.p_value == 1.0 and o.p_adjusted == 1.0 and "0 lost, 0 gained" in o.detail for o in checks)


def test_reported_mde_matches_a_hand_computation(tmp_path: Path) -> None:
    """Two paired checks at n = 500 (Holm family of 2), one-sided alpha 0.05, power 0.8, discordance 0.20.

    One regressed check among two is compared with alpha / 2 = 0.025 (Holm's first step), so Connor's formula
    D = (z_a sqrt(pi) + z_b sqrt(pi - D^2)) / sqrt(n) takes z_a = z_0.975 = 1.9599640, z_b = 0.8416212:
      z_a sqrt(0.2) / sqrt(500) = 1.9599640 * 0.4472136 / 22.3606798 = 0.8765225 / 22.3606798 = 0.0391993
      D = 0.0559:    sqrt(0.2 - 0.0031248) = 0.4437062; * 0.8416212 / 22.3606798 = 0.0167004 -> D = 0.0558997
    (the observed discordance, 35/500 = 0.07 and 0, is below the assumed 0.20, so 0.20 is used).
    """
    base_c, fresh_c = drop()
    base = image_run(tmp_path / "base", {("clean", 0.0): base_c, ("pgd", 0.01): base_c})
    fresh = image_run(tmp_path / "fresh", {("clean", 0.0): base_c, ("pgd", 0.01): fresh_c})
    result = run_gate(runs=[fresh], baseline=base, out=tmp_path / "o")
    assert result.paired_checks == 2
    pgd = next(o for o in result.outcomes if o.condition == "pgd@0.01")
    assert pgd.mde == pytest.approx(0.0558997, abs=2e-6)
    assert "detects 5.6 pp worse than the baseline with 80% power" in pgd.mde_text
    assert "Holm-adjusted over 2 paired checks (0.025 each)" in pgd.mde_assumption
    assert "20% of examples assumed to change outcome" in pgd.mde_assumption
    # Holm: p = 0.0083 and 1.0 -> adjusted 2 * 0.0083 = 0.0166, still below 0.05
    assert pgd.p_adjusted == pytest.approx(2 * pgd.p_value) and pgd.status == "fail"


def test_holm_keeps_two_borderline_checks_from_failing(tmp_path: Path) -> None:
    """Each check loses 5 examples and gains none: exact one-sided p = 2^-5 = 0.031 < 0.05 on its own; two such
    checks together are not evidence enough for a family-wise alpha of 0.05 (Holm: both adjusted to 0.0625)."""
    base_c, fresh_c = drop(lost=5, gained=0)
    cases = {("pgd", 0.01): base_c, ("pgd", 0.02): base_c}
    base = image_run(tmp_path / "base", cases)
    fresh = image_run(tmp_path / "fresh", {k: fresh_c for k in cases})
    holm = run_gate(runs=[fresh], baseline=base, out=tmp_path / "h")
    checks = [o for o in holm.outcomes if o.kind == "baseline"]
    assert [o.status for o in checks] == ["warn", "warn"] and holm.passed
    assert all(o.p_value == pytest.approx(1 / 32) and o.p_adjusted == pytest.approx(1 / 16) for o in checks)
    spec = project(tmp_path, '[baseline]\ncorrection = "none"\n[image]\nmodels = ["deit"]\n')
    none = run_gate(spec, runs=[fresh], baseline=base, out=tmp_path / "n")
    assert [o.status for o in none.outcomes if o.kind == "baseline"] == ["fail", "fail"]


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
def test_different_examples_are_refused_in_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    base_c, fresh_c = drop()
    selection = {"examples": {"ids": "ids0", "data": "d1"}}
    base = image_run(tmp_path / "base", {("pgd", 0.01): base_c}, {**CONFIG, "examples": selection})
    other = {"examples": {"ids": "ids0", "data": "d2"}}  # same ids, other contents (e.g. other preprocessing)
    fresh = image_run(tmp_path / "fresh", {("pgd", 0.01): fresh_c}, {**CONFIG, "examples": other})
    baseline = tmp_path / "b.json"
    run_gate(runs=[base], write_baseline=baseline, out=tmp_path / "w")
    ident = json.loads(baseline.read_text())["examples"]["image"]["identity"]
    assert len(ident["examples_digest"]) == 16  # the runner's selection record, digested
    with pytest.raises(RobfiltError, match=r"different examples \(examples digest"):
        run_gate(runs=[fresh], baseline=baseline, out=tmp_path / "o")
    assert cli_run(["check", "--run", str(fresh), "--baseline", str(baseline), "--out", str(tmp_path / "c")]) == 2
    err = capfd.readouterr().err.strip()
    assert "different examples" in err and "--write-baseline" in err and len(err.splitlines()) == 1
    # the interval rule does not pair, so it compares the two samples as independent
    assert run_gate(runs=[fresh], baseline=baseline, out=tmp_path / "o", mode="interval").passed


def test_json_output_shape(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    base_c, fresh_c = drop()
    base = image_run(tmp_path / "base", {("clean", 0.0): base_c, ("pgd", 0.01): base_c})
    fresh = image_run(tmp_path / "fresh", {("clean", 0.0): base_c, ("pgd", 0.01): fresh_c})
    spec = project(tmp_path, '[image]\nmodels = ["deit"]\n[[image.require]]\nmin_acc = 0.5\nmode = "point"\n')
    capfd.readouterr()
    code = cli_run(["check", "--spec", str(spec), "--run", str(fresh), "--baseline", str(base), "--json",
                    "--out", str(tmp_path / "o")])  # fmt: skip
    doc = json.loads(capfd.readouterr().out)
    assert code == 1 and doc["passed"] is False and doc["counts"] == {"pass": 2, "warn": 0, "fail": 1}
    assert set(doc) >= {"name", "runs", "run_seconds", "baseline", "policy", "paired_checks", "plan", "outcomes"}
    assert doc["policy"] == {"mode": "paired", "alpha": 0.05, "tolerance": 0.0, "interval_fallback": True,
                             "discordance": 0.2, "correction": "holm"}  # fmt: skip
    assert doc["paired_checks"] == 2 and list(doc["run_seconds"]) == doc["runs"]
    keys = {"name", "kind", "model", "condition", "metric", "expected", "value", "lo", "hi", "status", "detail",
            "run", "mode", "p_value", "p_adjusted", "mde", "mde_text", "mde_assumption", "seconds"}  # fmt: skip
    by_kind = {o["kind"]: o for o in doc["outcomes"] if o["status"] != "pass" or o["kind"] == "threshold"}
    assert all(set(o) == keys | {"family"} for o in doc["outcomes"])
    thr, fail = by_kind["threshold"], by_kind["baseline"]
    assert thr["mode"] == "point" and thr["p_value"] is None and thr["mde"] > 0 and "n = 500" in thr["mde_text"]
    assert fail["mode"] == "paired" and fail["condition"] == "pgd@0.01" and 0 < fail["p_value"] < 0.01
    assert fail["seconds"] > 0 and "Holm-adjusted over 2" in fail["mde_assumption"]
    plan = {(p["kind"], p["condition"]): p for p in doc["plan"]}
    assert set(plan) == {("threshold", "clean"), ("baseline", "clean"), ("baseline", "pgd@0.01")}
    assert plan[("baseline", "pgd@0.01")]["mode"] == "paired" and plan[("baseline", "pgd@0.01")]["n"] == 500


def test_junit_times_checks_and_runs(tmp_path: Path) -> None:
    base_c, fresh_c = drop()
    base = image_run(tmp_path / "base", {("pgd", 0.01): base_c})
    fresh = image_run(tmp_path / "fresh", {("pgd", 0.01): fresh_c})
    result = run_gate(runs=[fresh], baseline=base, out=tmp_path / "o")
    suite = ET.parse(result.junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    run_case = cases[f"[run] {result.runs[0]}"]
    assert float(run_case.get("time", "-1")) == pytest.approx(run_wall_seconds(load_run(fresh).manifest))
    check = cases["[baseline] deit pgd@0.01 acc"]
    (outcome,) = [o for o in result.outcomes if o.kind == "baseline"]
    assert check.find("failure") is not None and float(check.get("time", "0")) == pytest.approx(
        outcome.seconds, abs=1e-3
    )
    assert outcome.seconds > 0
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert "paired mode, one-sided alpha 0.05, Holm" in props["baseline policy"]
    text = result.summary.read_text() if result.summary else ""
    assert "| p | detects (80% power) |" in text and "Detectable effects assume:" in text


def test_aggregate_baselines_fall_back_to_the_interval_rule_unless_refused(tmp_path: Path) -> None:
    base_c, fresh_c = drop()
    base = image_run(tmp_path / "base", {("pgd", 0.01): base_c})
    fresh = image_run(tmp_path / "fresh", {("pgd", 0.01): fresh_c})
    summary = tmp_path / "v1.json"  # a version 1 baseline: aggregate metrics only
    summary.write_text(json.dumps(baseline_document(metrics_from_run(load_run(base)), "base")))
    result = run_gate(runs=[fresh], baseline=summary, out=tmp_path / "o")
    (o,) = [o for o in result.outcomes if o.kind == "baseline"]
    assert o.mode == "interval" and o.detail.startswith("paired unavailable (") and o.status == "warn"
    assert any("used the interval rule" in n for n in result.notes)
    spec = project(tmp_path, '[baseline]\ninterval_fallback = false\n[image]\nmodels = ["deit"]\n')
    with pytest.raises(RobfiltError, match="needs both runs' per-example outcomes.*is a v1 baseline"):
        run_gate(spec, runs=[fresh], baseline=summary, out=tmp_path / "o")


def test_deterministic_metrics_allow_float_noise_only(tmp_path: Path) -> None:
    from robustbench_filters.gating import decide_baseline
    from robustbench_filters.gating.metrics import Metric

    base = Metric("deit", "-", "lipschitz_lower", 56.35, 56.35, 56.35)
    for value, status in ((56.35 * (1 + 5e-5), "pass"), (56.35 * (1 + 5e-4), "fail"), (50.0, "pass")):
        assert decide_baseline(base, Metric("deit", "-", "lipschitz_lower", value, value, value)).status == status


def test_plan_is_reported_before_the_fresh_runs(tmp_path: Path) -> None:
    spec = project(
        tmp_path,
        'out = "ci"\n[image]\nmodels = ["deit"]\nattacks = ["fgsm"]\neps = [0.01]\nn_examples = 8\nsteps = 1\n'
        'checkpoint = "none"\n[[image.require]]\nmin_acc = 0.0\n[[image.require]]\nattack = "fgsm"\neps = 0.01\n'
        'min_acc = 0.0\nmode = "point"\n',
    )
    seen: list[tuple[list, bool]] = []
    result = run_gate(spec, on_plan=lambda plan: seen.append((plan, (spec.parent / "ci" / "image").exists())))
    ((plan, existed),) = seen
    assert not existed and [(p.condition, p.mode, p.n) for p in plan] == [
        ("clean", "interval", 8),
        ("fgsm@0.01", "point", 8),
    ]
    # the planned figure is the one the verdict reports (same n, same threshold)
    outcome = {o.condition: o for o in result.outcomes if o.kind == "threshold"}
    assert [outcome[p.condition].mde for p in plan] == [p.mde for p in plan]


def test_write_baseline_from_fresh_spec_runs_is_v2_and_pairs_with_a_rerun(tmp_path: Path) -> None:
    spec = project(
        tmp_path,
        'out = "ci"\nbaseline = "b.json"\n[image]\nmodels = ["deit"]\nattacks = ["fgsm"]\neps = [0.01]\n'
        'n_examples = 8\nsteps = 1\ncheckpoint = "none"\n[[image.require]]\nmin_acc = 0.0\n',
    )
    path = spec.parent / "b.json"
    with pytest.raises(RobfiltError, match="does not exist"):
        run_gate(spec)
    first = run_gate(spec, write_baseline=path)  # the first baseline: written from the spec's runs
    assert not [o for o in first.outcomes if o.kind == "baseline"] and any(
        "does not exist yet" in n for n in first.notes
    )
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and {o["condition"] for o in doc["outcomes"]} == {"clean", "fgsm@0.01"}
    assert "examples_digest" in doc["examples"]["image"]["identity"]
    assert read_baseline(path).unpaired_reason == ""
    again = run_gate(spec)
    paired = [o for o in again.outcomes if o.kind == "baseline"]
    assert again.passed and paired and all(o.mode == "paired" and o.p_value == 1.0 for o in paired)


def test_rewriting_the_baseline_after_a_change_of_attacks_replaces_it(tmp_path: Path) -> None:
    """--write-baseline onto the spec's own baseline is the documented step after an intentional change: the old
    file names conditions the new runs no longer measure, so it is replaced, not judged against."""
    head = 'out = "ci"\nbaseline = "b.json"\n[image]\nmodels = ["deit"]\neps = [0.01]\nn_examples = 8\nsteps = 1\n'
    spec = project(tmp_path, head + 'attacks = ["fgsm"]\ncheckpoint = "none"\n')
    path = spec.parent / "b.json"
    run_gate(spec, write_baseline=path)
    spec.write_text(spec.read_text().replace('attacks = ["fgsm"]', 'attacks = ["pgd"]'))
    with pytest.raises(RobfiltError, match="fgsm@0.01"):
        run_gate(spec)  # judged against the old baseline, the change is refused: the runs lack its condition
    again = run_gate(spec, write_baseline=path)
    assert not [o for o in again.outcomes if o.kind == "baseline"] and any("is replaced" in n for n in again.notes)
    doc = json.loads(path.read_text())
    assert {o["condition"] for o in doc["outcomes"]} == {"clean", "pgd@0.01"}
    assert run_gate(spec).passed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[image.require]]\nmin_acc = 0.5\nmode = "paired"\n', "mode = 'paired' needs a baseline to pair with"),
        ('[[image.require]]\nmin_acc = 0.5\nmode = "strict"\n', "mode must be 'interval', 'point', got 'strict'"),
        ('[baseline]\nmode = "pairwise"\n', "[baseline] mode must be 'paired', 'interval' or 'point'"),
        ("[baseline]\nalpha = 0.7\n", "[baseline] alpha must be in (0, 0.5]"),
        ("[baseline]\nalpha = 0\n", "[baseline] alpha must be in (0, 0.5]"),
        ("[baseline]\ndiscordance = 1.5\n", "[baseline] discordance must be in (0, 1]"),
        ('[baseline]\ninterval_fallback = "yes"\n', "interval_fallback must be true or false"),
        ('[baseline]\ncorrection = "bonferroni"\n', "correction must be 'holm' or 'none'"),
        ("[baseline]\nalfa = 0.01\n", "unknown key 'alfa' in [baseline]. Did you mean 'alpha'"),
        ("tolerance = 0.0\n[baseline]\ntolerance = 0.01\n", "tolerance is set twice"),
        ("baseline = 3\n", "baseline must be a path string or a [baseline] table"),
    ],
)
def test_spec_mode_and_baseline_keys_are_validated_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    head, _, require = text.partition("[[image.require]]")
    body = f'{head}\n[image]\nmodels = ["deit"]\n' + (f"[[image.require]]{require}" if require else "")
    path = project(tmp_path, body)
    with pytest.raises(RobfiltError) as err:
        load_spec(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_spec_mode_and_baseline_keys_load(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "base.json").write_text("{}")
    path = project(
        tmp_path,
        '[baseline]\npath = "base.json"\nmode = "interval"\nalpha = 0.01\ncorrection = "none"\n'
        "interval_fallback = false\ndiscordance = 0.1\ntolerance = 0.02\n"
        '[image]\nmodels = ["deit"]\n[[image.require]]\nmin_acc = 0.5\nmode = "point"\n[[image.require]]\nmin_acc = 0.4\n',
    )
    spec = load_spec(path)
    assert spec.baseline == path.parent / "base.json" and spec.tolerance == 0.02
    p = spec.policy
    assert (p.mode, p.alpha, p.correction, p.interval_fallback, p.discordance) == (
        Mode.INTERVAL, 0.01, Correction.NONE, False, 0.1)  # fmt: skip
    assert [r.mode for r in spec.sections["image"].requirements] == [Mode.POINT, Mode.INTERVAL]
    defaults = load_spec(project(tmp_path, 'baseline = "base.json"\ntolerance = 0.01\n[image]\nmodels = ["deit"]\n'))
    assert defaults.policy.mode is Mode.PAIRED and defaults.policy.alpha == 0.05 and defaults.tolerance == 0.01
    assert defaults.policy.interval_fallback and defaults.policy.discordance == 0.2
