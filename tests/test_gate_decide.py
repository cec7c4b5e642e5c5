"""Check modes end to end on run folders: paired vs interval vs point, baselines v1/v2, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_summaries import summary_for

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.gating import (
    Mode,
    Status,
    decide_baseline,
    decide_threshold,
    read_baseline,
    write_baseline,
)
from robustbench_filters.gating.metrics import Metric, baseline_document, find, metrics_from_run
from robustbench_filters.runs.folder import Run, RunWriter, load_run

IMAGE_CONFIG = {"data": "fashion-mnist", "data_checksum": "abc", "example_ids_sha256": "ids0", "seed": 0}


def _write(out: Path, rows: pd.DataFrame, family: str, config: dict) -> Run:
    kind = "attack"
    with RunWriter(out, kind, config, seed=0, extra={"family": family}) as w:
        w.write_part("all", rows)
        w.finish(rows, summary_for(kind, family, rows))
    return load_run(out)


def image_run(out: Path, correct: np.ndarray, config: dict | None = None, ids: np.ndarray | None = None) -> Run:
    """One model 'deit' under pgd@0.01 with the given per-example outcomes."""
    ids = np.arange(len(correct)) if ids is None else ids
    rows = pd.DataFrame({"model": "deit", "example_id": ids, "kind": "adversarial", "attack": "pgd", "eps": 0.01,
                         "norm": "linf", "correct": correct, "clean_correct": True})  # fmt: skip
    return _write(out, rows, "image", config or IMAGE_CONFIG)


def lm_run(out: Path, nll: np.ndarray, tok: np.ndarray, config: dict | None = None) -> Run:
    n = len(nll)
    rows = pd.DataFrame({"model": "lm", "example_id": np.arange(n), "kind": "clean", "attack": "clean", "eps": 0.0,
                         "norm": "", "nll_sum": nll, "n_tokens": tok.astype(np.int64),
                         "correct_tokens": (tok * 0.5).astype(np.int64)})  # fmt: skip
    return _write(out, rows, "lm", config or {"data": "austen", "data_checksum": "t", "example_ids_sha256": "s"})


def three_point_drop(n: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Baseline 60% right; the fresh run loses 25 of those and gains 10 others: 57%, a 3-point drop."""
    base = np.zeros(n, dtype=bool)
    base[:300] = True
    fresh = base.copy()
    fresh[:25] = False
    fresh[300:310] = True
    return base, fresh


def _metric(run: Run, metric: str = "acc", cond: str = "pgd@0.01", model: str = "deit") -> Metric:
    m = find(metrics_from_run(run), model, cond, metric)
    assert m is not None
    return m


def test_paired_catches_a_3_point_drop_at_n500_that_the_interval_rule_misses(tmp_path: Path) -> None:
    base_c, fresh_c = three_point_drop()
    base_run = image_run(tmp_path / "base", base_c)
    fresh_run = image_run(tmp_path / "fresh", fresh_c)
    write_baseline(tmp_path / "baseline.json", [base_run])
    baseline = read_baseline(tmp_path / "baseline.json")
    assert baseline.kind == "v2 baseline" and baseline.unpaired_reason == ""
    base_m = find(baseline.metrics, "deit", "pgd@0.01", "acc")
    fresh_m = _metric(fresh_run)
    assert base_m is not None and base_m.value == 0.6 and fresh_m.value == 0.57

    pair, why = baseline.paired(fresh_run, "deit", "pgd@0.01", "acc")
    assert pair is not None and why == "" and (pair.b, pair.c, pair.n) == (25, 10, 500)
    paired = decide_baseline(base_m, fresh_m, mode="paired", pair=pair)
    # one-sided exact McNemar: P(Bin(35, 1/2) >= 25) = 0.0083
    assert paired.status is Status.FAIL and paired.p_value == pytest.approx(0.00832, abs=1e-4)
    assert "25 lost, 10 gained" in paired.detail and "McNemar" in paired.detail
    assert paired.effect == pytest.approx(0.03)
    interval = decide_baseline(base_m, fresh_m, mode="interval")
    assert interval.status is Status.WARN  # the 95% intervals [55.6, 64.2] and [52.6, 61.3] overlap
    assert decide_baseline(base_m, fresh_m, mode="point").status is Status.FAIL
    # the MDE the paired check reports is below the interval rule's
    assert paired.mde is not None and interval.mde is not None and paired.mde < interval.mde / 1.5

    # outcomes that do not reproduce the metric (an edited baseline) are refused
    edited = Metric("deit", "pgd@0.01", "acc", 0.62, 0.57, 0.66, 500)
    with pytest.raises(RobfiltError, match="baseline's per-example outcomes give 60.0% but its metric says 62.0%"):
        decide_baseline(edited, fresh_m, pair=pair)

    # a tolerance of 3 points makes the same drop acceptable (score test against the margin)
    tol = decide_baseline(base_m, fresh_m, mode="paired", pair=pair, tolerance=0.03)
    assert tol.status is Status.PASS and "margin 3.0 pp" in tol.detail


def test_identical_runs_pass_in_every_mode(tmp_path: Path) -> None:
    base_c, _ = three_point_drop()
    a, b = image_run(tmp_path / "a", base_c), image_run(tmp_path / "b", base_c.copy())
    baseline = read_baseline(tmp_path / "a")  # a run folder is a baseline with outcomes too
    pair, _ = baseline.paired(b, "deit", "pgd@0.01", "acc")
    for mode in Mode:
        d = decide_baseline(_metric(a), _metric(b), mode=mode, pair=pair)
        assert d.status is Status.PASS, (mode, d.detail)
    assert decide_baseline(_metric(a), _metric(b), pair=pair).p_value == 1.0


def test_better_fresh_run_suggests_updating_the_baseline(tmp_path: Path) -> None:
    base_c, fresh_c = three_point_drop()
    a, b = image_run(tmp_path / "a", fresh_c), image_run(tmp_path / "b", base_c)
    pair, _ = read_baseline(tmp_path / "a").paired(b, "deit", "pgd@0.01", "acc")
    d = decide_baseline(_metric(a), _metric(b), pair=pair)
    assert d.status is Status.PASS and "consider updating the baseline" in d.detail and d.effect < 0


def test_different_examples_are_refused_in_one_line(tmp_path: Path) -> None:
    base_c, fresh_c = three_point_drop()
    image_run(tmp_path / "base", base_c)
    baseline = read_baseline(tmp_path / "base")
    other_ids = image_run(tmp_path / "ids", fresh_c, ids=np.arange(500) + 7)
    with pytest.raises(RobfiltError, match=r"different examples \(7 ids only in the baseline, 7 only in"):
        baseline.paired(other_ids, "deit", "pgd@0.01", "acc")
    other_data = image_run(tmp_path / "data", fresh_c, config={**IMAGE_CONFIG, "data_checksum": "zzz"})
    with pytest.raises(RobfiltError, match="different examples \\(data checksum abc vs zzz\\)") as err:
        baseline.paired(other_data, "deit", "pgd@0.01", "acc")
    assert "\n" not in str(err.value) and "mode = 'interval'" in str(err.value)
    digest = image_run(tmp_path / "dg", fresh_c, config={**IMAGE_CONFIG, "examples_digest": "d2"})
    image_run(tmp_path / "dg0", base_c, config={**IMAGE_CONFIG, "examples_digest": "d1"})
    with pytest.raises(RobfiltError, match="examples digest d1 vs d2"):
        read_baseline(tmp_path / "dg0").paired(digest, "deit", "pgd@0.01", "acc")


def test_v1_baseline_paired_needs_fallback(tmp_path: Path) -> None:
    base_c, fresh_c = three_point_drop()
    base_run, fresh_run = image_run(tmp_path / "base", base_c), image_run(tmp_path / "fresh", fresh_c)
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps(baseline_document(metrics_from_run(base_run), "x")))
    baseline = read_baseline(v1)
    assert baseline.kind == "v1 baseline" and "aggregate metrics only" in baseline.unpaired_reason
    pair, why = baseline.paired(fresh_run, "deit", "pgd@0.01", "acc")
    assert pair is None
    base_m = find(baseline.metrics, "deit", "pgd@0.01", "acc")
    assert base_m is not None
    with pytest.raises(RobfiltError, match="needs both runs' per-example outcomes, but baseline .* is a v1 baseline"):
        decide_baseline(base_m, _metric(fresh_run), mode="paired", unpaired_reason=why)
    d = decide_baseline(base_m, _metric(fresh_run), mode="paired", unpaired_reason=why, fallback=True)
    assert d.mode is Mode.INTERVAL and d.status is Status.WARN and d.detail.startswith("paired unavailable (")
    # summary.json baselines are aggregate-only too
    (tmp_path / "summary.json").write_bytes((base_run.path / "summary.json").read_bytes())
    from_summary = read_baseline(tmp_path / "summary.json")
    assert "is a summary.json holding aggregate metrics only" in from_summary.unpaired_reason
    assert find(from_summary.metrics, "deit", "pgd@0.01", "acc").value == 0.6


def test_threshold_modes(tmp_path: Path) -> None:
    m = Metric("deit", "clean", "acc", 0.5, 0.299, 0.701, 20, "image")
    assert decide_threshold(m, 0.45, "min").status is Status.PASS
    assert decide_threshold(m, 0.65, "min", "interval").status is Status.WARN
    assert decide_threshold(m, 0.65, "min", "point").status is Status.FAIL
    assert decide_threshold(m, 0.71, "min").status is Status.FAIL
    d = decide_threshold(m, 0.45, "min")
    assert d.mde is not None and "n = 20" in d.mde_text
    # restated from the measured 50%: the MDE below the limit plus the 5-point headroom
    assert f"a change of {100 * (0.05 + d.mde):.1f} pp from the measured 50.0%" in d.mde_text
    with pytest.raises(RobfiltError, match="threshold check has no baseline to pair with"):
        decide_threshold(m, 0.45, "min", "paired")
    with pytest.raises(RobfiltError, match="unknown check mode 'strict'"):
        decide_threshold(m, 0.45, "min", "strict")
    ppl = Metric("lm", "clean", "ppl", 3.6, 3.4, 3.8, 64, "lm")
    assert decide_threshold(ppl, 3.5, "max").status is Status.WARN
    ok = decide_threshold(ppl, 4.0, "max")
    assert ok.status is Status.PASS and ok.mde is not None
    assert f"{100 * (4.0 * (1 + ok.mde) / 3.6 - 1):+.1f}% from the measured 3.6" in ok.mde_text
    assert decide_threshold(ppl, 3.3, "max").status is Status.FAIL
    lip = Metric("deit", "-", "lipschitz_upper", 2e43, 2e43, 2e43, None, "lipschitz")
    assert decide_threshold(lip, 1e43, "max").status is Status.FAIL


def test_deterministic_metrics_compare_exactly_in_every_mode() -> None:
    base = Metric("deit", "-", "lipschitz_upper", 1.0e43, 1.0e43, 1.0e43)
    fresh = Metric("deit", "-", "lipschitz_upper", 1.2e43, 1.2e43, 1.2e43)
    for mode in Mode:
        assert decide_baseline(base, fresh, mode=mode).status is Status.FAIL
        assert decide_baseline(base, fresh, mode=mode, tolerance=0.25).status is Status.PASS


def test_lm_paired_perplexity_detects_a_small_rise(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tok = rng.integers(100, 200, 64).astype(float)
    nll = tok * rng.normal(1.3, 0.15, 64)
    fresh_nll = nll + tok * (0.01 + rng.normal(0, 0.02, 64))  # about +1% perplexity
    base_run, fresh_run = lm_run(tmp_path / "base", nll, tok), lm_run(tmp_path / "fresh", fresh_nll, tok)
    write_baseline(tmp_path / "b.json", [base_run])
    baseline = read_baseline(tmp_path / "b.json")
    base_m = find(baseline.metrics, "lm", "clean", "ppl")
    fresh_m = _metric(fresh_run, "ppl", "clean", "lm")
    assert base_m is not None and fresh_m.value / base_m.value - 1 == pytest.approx(0.01, abs=0.007)
    pair, _ = baseline.paired(fresh_run, "lm", "clean", "ppl")
    paired = decide_baseline(base_m, fresh_m, pair=pair)
    assert paired.status is Status.FAIL and paired.p_value is not None and paired.p_value < 0.01
    assert "sign-flip" in paired.detail and paired.effect == pytest.approx(fresh_m.value / base_m.value - 1)
    assert decide_baseline(base_m, fresh_m, mode="interval").status is not Status.FAIL
    assert decide_baseline(base_m, fresh_m, pair=pair, tolerance=0.05).status is Status.PASS
    # identical LM runs pass with p = 1
    same_run = lm_run(tmp_path / "same", nll.copy(), tok)
    pair, _ = baseline.paired(same_run, "lm", "clean", "ppl")
    same = decide_baseline(base_m, _metric(same_run, "ppl", "clean", "lm"), pair=pair)
    assert same.status is Status.PASS and same.p_value == 1.0
    # token accuracy pairs the correct_tokens column
    tpair, _ = baseline.paired(same_run, "lm", "clean", "token_acc")
    tb, tf = find(baseline.metrics, "lm", "clean", "token_acc"), _metric(same_run, "token_acc", "clean", "lm")
    assert tb is not None and decide_baseline(tb, tf, pair=tpair).status is Status.PASS


def test_baseline_v2_round_trip_and_validation(tmp_path: Path) -> None:
    base_c = np.arange(40) < 24
    run = image_run(tmp_path / "r", base_c)
    path = write_baseline(tmp_path / "b.json", [run])
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and doc["examples"]["image"]["ids"] == list(range(40))
    assert doc["outcomes"][0]["correct"] == "1" * 24 + "0" * 16
    assert doc["examples"]["image"]["identity"] == {"data": "fashion-mnist", "data_checksum": "abc",
                                                    "example_ids_sha256": "ids0"}  # fmt: skip
    back = read_baseline(path)
    series = back.series_for("image", "deit", "pgd@0.01")
    assert series is not None and series.correct.tolist() == base_c.tolist()
    for mutate, message in (
        (lambda d: d["outcomes"][0].update(correct="01"), "must be a string of 40 '0'/'1' characters"),
        (lambda d: d["outcomes"][0].update(colour=1), "unknown key 'colour'"),
        (lambda d: d.update(version=3), "has version 3; this robfilt reads versions 1 and 2"),
        (lambda d: d["outcomes"][0].update(examples="lm"), "names no entry of 'examples'"),
        (lambda d: d["metrics"][0].update(metric="accuracy"), "unknown metric 'accuracy'"),
    ):
        bad = json.loads(path.read_text())
        mutate(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(RobfiltError, match=message):
            read_baseline(tmp_path / "bad.json")


def test_nan_free_perplexity_effect_text() -> None:
    base = Metric("lm", "clean", "ppl", 3.6, 3.5, 3.7, 64)
    worse = Metric("lm", "clean", "ppl", 3.96, 3.85, 4.07, 64)
    d = decide_baseline(base, worse, mode="interval")
    assert d.status is Status.FAIL and d.detail.startswith("+10.0% worse") and math.isfinite(d.mde or math.nan)


def test_judge_baseline_end_to_end_with_timed_junit(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from robustbench_filters.gating.judge import judge_baseline, junit_cases
    from robustbench_filters.gating.junit import junit_xml

    base_c, fresh_c = three_point_drop()
    write_baseline(tmp_path / "b.json", [image_run(tmp_path / "base", base_c)])
    baseline = read_baseline(tmp_path / "b.json")
    fresh = image_run(tmp_path / "fresh", fresh_c)
    (paired,) = judge_baseline(baseline, [fresh])
    assert paired.decision.status is Status.FAIL and paired.seconds > 0 and paired.run == fresh.run_id
    (interval,) = judge_baseline(baseline, [fresh], mode=lambda m: "interval")
    assert interval.decision.status is Status.WARN
    xml = junit_xml("gate", junit_cases([paired]))
    case = ET.fromstring(xml.split("\n", 1)[1]).find("testsuite/testcase")
    assert case is not None and case.get("classname") == "robfilt.image.deit"
    assert case.get("name") == "[baseline] deit pgd@0.01 acc" and case.find("failure") is not None
    other = image_run(tmp_path / "other", fresh_c, config={**IMAGE_CONFIG, "data_checksum": "zzz"})
    with pytest.raises(RobfiltError, match="different examples"):
        judge_baseline(baseline, [other])
    lm = lm_run(tmp_path / "lm", np.ones(4) * 100, np.ones(4) * 50)
    with pytest.raises(RobfiltError, match="metric 'deit/pgd@0.01/acc' of baseline .* is missing .*no run has that"):
        judge_baseline(baseline, [lm])
