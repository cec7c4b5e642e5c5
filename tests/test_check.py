"""`robfilt check`: noise-aware decisions, exit codes 0/1/2, JUnit XML and Markdown outputs, spec validation."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from run_summaries import summary_for

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RegressionError, RobfiltError
from robustbench_filters.gate.run import run_gate
from robustbench_filters.gate.spec import load_spec
from robustbench_filters.gating import Decision, decide_baseline
from robustbench_filters.gating.metrics import Metric
from robustbench_filters.runs.folder import RunWriter

# `robfilt check` is evaluated in this process (tests/conftest.py::gate_in_process), not in a supervised child
pytestmark = pytest.mark.usefixtures("gate_in_process")


def write_run(out: Path, kind: str, rows: pd.DataFrame, config: dict, family: str | None = None) -> Path:
    extra = {"family": family} if family else None
    with RunWriter(out, kind, config, seed=0, extra=extra) as w:
        w.write_part("all", rows)
        w.finish(rows, summary_for(kind, family, rows))
    return out


def image_run(out: Path, right: dict[tuple[str, str, float], int], n: int = 20) -> Path:
    """A run where model m gets the first k of n examples right under (attack, eps)."""
    recs = [
        {"model": m, "example_id": i, "kind": "adversarial", "attack": a, "eps": e, "norm": "linf", "correct": i < k,
         "clean_correct": True, "pert_norm": e, "margin": 0.0, "loss": 0.0, "in_box": True, "fooled_by": ""}
        for (m, a, e), k in right.items() for i in range(n)
    ]  # fmt: skip
    config = {"data": "fashion-mnist", "data_checksum": "s", "example_ids_sha256": "i", "n_examples": n, "seed": 0}
    return write_run(out, "attack", pd.DataFrame(recs), config, "image")


def project(tmp_path: Path, spec: str, name: str = "robustness.toml") -> Path:
    """A project folder (pyproject.toml marks its root) holding the spec."""
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("")
    path = root / name
    path.write_text(spec)
    return path


BASE = {("deit", "clean", 0.0): 18, ("deit", "pgd", 0.01): 12}


def judge_baseline(base: Metric, fresh: Metric, tolerance: float) -> Decision:
    """The interval rule for aggregate baselines, through the gate's one decision path."""
    return decide_baseline(base, fresh, mode="interval", tolerance=tolerance)


def test_threshold_decisions_on_intervals(tmp_path: Path) -> None:
    """10/20 correct has the 95% Wilson interval [0.299, 0.701]: 0.45 passes, 0.65 warns, 0.71 fails."""
    run = image_run(tmp_path / "run", {("deit", "clean", 0.0): 10})
    for threshold, status, code in ((0.45, "pass", 0), (0.65, "warn", 0), (0.71, "fail", 1)):
        spec = project(tmp_path, f'[image]\nmodels = ["deit"]\n[[image.require]]\nmin_acc = {threshold}\n')
        result = run_gate(spec, runs=[run], out=tmp_path / f"out{threshold}")
        (outcome,) = [o for o in result.outcomes if o.kind == "threshold"]
        assert outcome.status == status and result.exit_code == code
        assert outcome.hi == pytest.approx(0.7007, abs=1e-4)
        assert cli_run(["check", "--spec", str(spec), "--run", str(run), "--out", str(tmp_path / "o"), "-q"]) == code


def test_baseline_unchanged_passes_and_regression_fails(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    base = image_run(tmp_path / "base", BASE)
    same = image_run(tmp_path / "same", BASE)
    noisy = image_run(tmp_path / "noisy", {**BASE, ("deit", "pgd", 0.01): 8})  # 40% vs 60%: CIs overlap
    worse = image_run(tmp_path / "worse", {**BASE, ("deit", "pgd", 0.01): 2})  # 10% [2.8, 30.1] vs [38.7, 78.1]
    out = tmp_path / "out"
    args = ["check", "--baseline", str(base), "--out", str(out), "-q"]
    assert cli_run([*args, "--run", str(same)]) == 0
    assert cli_run([*args, "--run", str(noisy)]) == 0
    capfd.readouterr()
    assert cli_run([*args, "--run", str(worse)]) == 1
    captured = capfd.readouterr()
    assert "FAIL" in captured.out and "regression" in captured.err and len(captured.err.strip().splitlines()) == 1

    result = run_gate(runs=[noisy], baseline=base, out=out)
    (o,) = [o for o in result.outcomes if o.condition == "pgd@0.01"]
    assert o.status == "warn"
    # a tolerance of 20 pp absorbs the drop entirely
    assert run_gate(runs=[noisy], baseline=base, tolerance=0.2, out=out).count("warn") == 0
    with pytest.raises(RegressionError):
        run_gate(runs=[worse], baseline=base, out=out).raise_for_regressions()


def test_baseline_rule_for_lower_is_better_metrics() -> None:
    base = Metric("lm", "clean", "ppl", 20.0, 19.0, 21.0)
    assert judge_baseline(base, Metric("lm", "clean", "ppl", 21.5, 20.5, 22.5), 0.0).status == "warn"
    assert judge_baseline(base, Metric("lm", "clean", "ppl", 23.0, 22.0, 24.0), 0.0).status == "fail"
    assert judge_baseline(base, Metric("lm", "clean", "ppl", 23.0, 22.0, 24.0), 0.1).status == "warn"  # 21 * 1.1
    exact = Metric("deit", "-", "lipschitz_upper", 100.0, 100.0, 100.0)
    assert judge_baseline(exact, Metric("deit", "-", "lipschitz_upper", 100.5, 100.5, 100.5), 0.01).status == "pass"
    assert judge_baseline(exact, Metric("deit", "-", "lipschitz_upper", 102.0, 102.0, 102.0), 0.01).status == "fail"


def test_junit_and_markdown_outputs(tmp_path: Path) -> None:
    base = image_run(tmp_path / "base", BASE)
    worse = image_run(tmp_path / "worse", {**BASE, ("deit", "pgd", 0.01): 2})
    junit, summary = tmp_path / "ci" / "junit.xml", tmp_path / "ci" / "summary.md"
    result = run_gate(runs=[worse], baseline=base, junit=junit, summary=summary, out=tmp_path / "out")
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    cases = [c for c in suite.findall("testcase") if not c.get("name").startswith("[run] ")]
    assert len(cases) == len(result.outcomes) == 2
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures")) == len(failures) == 1
    assert "pgd@0.01" in failures[0].get("name") and failures[0].get("classname") == "robfilt.image.deit"
    text = summary.read_text()
    assert "FAILED" in text and "| **FAIL** |" in text and "Rule:" in text


def test_fresh_run_from_spec_and_summary_baseline(tmp_path: Path) -> None:
    """The gate makes the run itself; an unchanged rerun passes against its own summary.json."""
    spec = project(
        tmp_path,
        'name = "tiny"\nout = "ci-out"\n[image]\nmodels = ["deit"]\nattacks = ["fgsm"]\neps = ["2/255"]\n'
        'n_examples = 8\nsteps = 1\ncheckpoint = "none"\n'
        '[[image.require]]\nmin_acc = 0.0\n[[image.require]]\nattack = "fgsm"\neps = "2/255"\nmin_acc = 0.0\n',
    )
    result = run_gate(spec)
    assert result.passed and result.out == spec.parent / "ci-out"
    assert (spec.parent / "ci-out" / "junit.xml").exists() and (spec.parent / "ci-out" / "summary.md").exists()
    conds = {o.condition for o in result.outcomes if o.kind == "threshold"}
    assert conds == {"clean", "fgsm@2/255"}
    summary = spec.parent / "ci-out" / "image" / "summary.json"
    again = run_gate(runs=[spec.parent / "ci-out" / "image"], baseline=summary, out=tmp_path / "again")
    assert again.passed and again.count("warn") == 0
    assert {o.kind for o in again.outcomes} == {"baseline", "sanity"}


def test_write_baseline_round_trip(tmp_path: Path) -> None:
    run = image_run(tmp_path / "run", BASE)
    path = tmp_path / "baseline.json"
    run_gate(runs=[run], write_baseline=path, out=tmp_path / "out")
    doc = json.loads(path.read_text())
    assert doc["format"] == "robfilt-baseline" and len(doc["metrics"]) == 2
    assert {m["condition"] for m in doc["metrics"]} == {"clean", "pgd@0.01"}
    assert run_gate(runs=[run], baseline=path, out=tmp_path / "out").passed


def test_lm_and_lipschitz_thresholds(tmp_path: Path) -> None:
    lm = pd.DataFrame(
        {
            "model": "lm",
            "example_id": [0, 1, 2, 0, 1, 2],
            "kind": ["clean"] * 3 + ["contamination"] * 3,
            "attack": ["clean"] * 3 + ["wordswap"] * 3,
            "eps": [0.0] * 3 + [0.1] * 3,
            "norm": "",
            "nll_sum": [20.0, 22.0, 24.0, 30.0, 32.0, 34.0],
            "n_tokens": 10,
            "correct_tokens": 4,
            "pert_norm": 0.0,
        }  # fmt: skip
    )
    lm_run = write_run(tmp_path / "lm", "attack", lm, {"data": "austen", "n_examples": 3}, "lm")
    lip = pd.DataFrame(
        {
            "model": ["deit", "deit"],
            "example_id": [0, 1],
            "layer": "model",
            "method": "power",
            "lower": [1.0, 2.0],
            "local_upper": [50.0, 60.0],
            "global_upper": [100.0, 100.0],
            "radius": [0.01, 0.02],
        }  # fmt: skip
    )
    lip_run = write_run(tmp_path / "lip", "lipschitz", lip, {"data": "fashion-mnist", "n_examples": 2})
    spec = project(
        tmp_path,
        '[lm]\nmodels = ["lm"]\nattacks = ["wordswap"]\nrates = [0.1]\n'
        "[[lm.require]]\nmax_ppl = 10.0\n"  # clean ppl = exp(2.2) = 9.03
        '[[lm.require]]\nattack = "wordswap"\neps = 0.1\nmax_ppl = 20.0\n'  # exp(3.2) = 24.5: fails
        '[lipschitz]\nmodels = ["deit"]\n[[lipschitz.require]]\nmax_lipschitz_upper = 99.0\nmin_radius = 0.01\n',
    )
    result = run_gate(spec, runs=[lm_run, lip_run], out=tmp_path / "out")
    status = {(o.model, o.condition, o.metric): o for o in result.outcomes}
    clean = status[("lm", "clean", "ppl")]
    assert clean.status == "pass" and clean.value == pytest.approx(math.exp(2.2))
    assert status[("lm", "wordswap@0.1", "ppl")].status == "fail"
    assert status[("deit", "-", "lipschitz_upper")].status == "fail"  # deterministic: 100 > 99
    assert status[("deit", "-", "radius")].status == "pass"
    assert result.exit_code == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("[image\nmodels = [", "not valid TOML"),
        (
            'tolerence = 0.1\n[image]\nmodels = ["deit"]\n',
            "unknown key 'tolerence' in the top level. Did you mean 'tolerance'",
        ),
        ('[image]\nmodels = ["deit"]\n[[image.require]]\nmin_accuracy = 0.5\n', "Did you mean 'min_acc'"),
        ('[imag]\nmodels = ["deit"]\n', "Did you mean 'image'"),
        ('[image]\nmodels = ["deit"]\nn_examples = "128"\n', "n_examples must be an integer"),
        ('[image]\nmodels = ["deit"]\n[[image.require]]\nattack = "pgd"\nmin_acc = 0.5\n', "needs eps"),
        (
            '[image]\nmodels = ["deit", "deit-grc"]\n[[image.require]]\nmodels = ["deit-gcr"]\nmin_acc = 0.5\n',
            "names model 'deit-gcr', which [image] does not run. Did you mean 'deit-grc'",
        ),
        ('baseline = "../../outside.json"\n[image]\nmodels = ["deit"]\n', "outside the project folder"),
        ('[image]\nmodels = ["deit"]\n', None),  # valid: loads
    ],
)
def test_spec_errors_are_one_line(tmp_path: Path, spec: str, message: str | None) -> None:
    path = project(tmp_path, spec)
    if message is None:
        assert list(load_spec(path).sections["image"].settings["models"]) == ["deit"]
        return
    with pytest.raises(RobfiltError) as exc:
        load_spec(path)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_usage_errors_exit_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = image_run(tmp_path / "run", BASE)
    missing = project(
        tmp_path, '[image]\nmodels = ["deit"]\n[[image.require]]\nattack = "pgd"\neps = 0.05\nmin_acc = 0.1\n'
    )
    unknown = project(tmp_path, '[image]\nmodels = ["deit"]\nattaks = ["pgd"]\n', "unknown.toml")
    outside = project(tmp_path, '[image]\nmodels = ["deit"]\n[[image.require]]\nmin_acc = 0.1\n', "ok.toml")
    plain = tmp_path / "plain"
    plain.mkdir()
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(
        '{"format": "robfilt-baseline", "metrics": [{"model": "deit", "condition": "clean", "metric": "acc"}]}'
    )
    o = ["--out", str(tmp_path / "o")]
    cases = [
        (["--spec", str(missing), "--run", str(run)], "missing from the image run(s)"),
        (["--spec", str(unknown)], "Did you mean 'attacks'"),
        (["--spec", str(tmp_path / "nope.toml")], "does not exist"),
        (["--run", str(plain), "--baseline", str(run)], "not a robfilt run folder"),
        (["--run", str(run)], "needs something to compare with"),
        (["--run", str(run), "--baseline", str(bad_json)], "lacks 'value'"),
        (["--run", str(run), "--baseline", str(run), "--tolerance", "abc"], "not a number"),
    ]
    for args, message in cases:
        assert cli_run(["check", *args, *o, "-q"]) == 2, args
        err = capfd.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    # a baseline outside the project is fine when given on the command line
    outside_base = tmp_path / "base"
    image_run(outside_base, BASE)
    assert cli_run(["check", "--spec", str(outside), "--run", str(run), "--baseline", str(outside_base), *o, "-q"]) == 0


SECTIONS = {
    "image": '[image]\nmodels = ["deit"]\n[[image.require]]\n',
    "lm": '[lm]\nmodels = ["lm"]\n[[lm.require]]\n',
    "lipschitz": '[lipschitz]\nmodels = ["deit"]\n[[lipschitz.require]]\n',
}
OUT_OF_DOMAIN = [  # (section, key, value, what the message says): every threshold key, both sides of its domain
    ("image", "min_acc", "-0.2", "a share of examples in [0, 1]"),
    ("image", "min_acc", "1.5", "a share of examples in [0, 1]"),
    ("image", "min_acc", "nan", "a finite number"),
    ("lm", "max_ppl", "0.5", "a perplexity, at least 1"),
    ("lm", "max_ppl", "inf", "a finite number"),
    ("lm", "min_token_acc", "2", "a share of tokens in [0, 1]"),
    ("lm", "max_word_perplexity", "-1", "a perplexity, at least 1"),
    ("lm", "max_byte_perplexity", "0", "a perplexity, at least 1"),
    ("lm", "max_bits_per_byte", "-0.1", "a number of bits, at least 0"),
    ("lipschitz", "max_lipschitz_upper", "-1", "a Lipschitz constant, at least 0"),
    ("lipschitz", "max_lipschitz_local_upper", "-1e-9", "a Lipschitz constant, at least 0"),
    ("lipschitz", "max_lipschitz_lower", "-inf", "a finite number"),
    ("lipschitz", "min_radius", "-0.5", "a radius, at least 0"),
    ("lipschitz", "min_radius", '"1/0"', "min_radius"),
]


def test_every_threshold_key_has_a_domain() -> None:
    from robustbench_filters.gate.require import DOMAINS, THRESHOLDS

    assert {metric for keys in THRESHOLDS.values() for metric in keys.values()} == set(DOMAINS)


@pytest.mark.parametrize(("section", "key", "value", "message"), OUT_OF_DOMAIN)
def test_a_threshold_outside_its_domain_is_refused_in_one_line(tmp_path: Path, capfd, section, key, value, message):  # noqa: ANN001
    path = project(tmp_path, f"{SECTIONS[section]}{key} = {value}\n")
    with pytest.raises(RobfiltError) as exc:
        load_spec(path)
    assert message in str(exc.value) and key in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    if value == "-0.2":  # the CLI: exit 2, one line, before any run (the supervised child reads the spec)
        assert cli_run(["check", "--spec", str(path), "--out", str(tmp_path / "o")]) == 2
        err = capfd.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and "gate ended" not in err, err
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_tolerance_and_baseline_levels_are_finite(tmp_path: Path, value: str) -> None:
    path = project(tmp_path, f'tolerance = {value}\n[image]\nmodels = ["deit"]\n')
    with pytest.raises(RobfiltError, match="tolerance must be"):
        load_spec(path)
