"""Terminal output: tables carry intervals (perplexity: the report's bootstrap CI; corruption accuracy: Wilson CIs),
and a closed pipe ends robfilt quietly."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from run_summaries import typed

from robustbench_filters.attacks.corruption import summarize_corruption_rows
from robustbench_filters.attacks.lm import summarize_lm_rows
from robustbench_filters.cli._render import render_corruption_summary, render_lm_summary
from robustbench_filters.report.tables import perplexity_table
from robustbench_filters.stats.intervals import wilson_interval
from robustbench_filters.summaries import CorruptionSummary, LMAttackSummary

CHECKS = {"checks": [], "checks_summary": {"passed": True, "pass": 0, "warn": 0, "fail": 0}}


def _lm_rows() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    records = []
    for model, shift in (("lm", 0.0), ("lm-grc", 0.2)):
        for i in range(12):
            tok = int(rng.integers(20, 40))
            base = {"model": model, "example_id": i, "n_tokens": tok}
            nll = tok * (1.2 + shift + 0.3 * rng.random())
            records.append({**base, "kind": "clean", "attack": "clean", "eps": 0.0, "nll_sum": nll,
                            "correct_tokens": tok // 2, "eps_abs": 0.0, "n_swapped": 0, "n_eligible": 0})  # fmt: skip
            for eps in (0.05, 0.1):
                records.append({**base, "kind": "adversarial", "attack": "pgd", "eps": eps, "nll_sum": nll * (1 + 4 * eps),
                                "correct_tokens": tok // 3, "eps_abs": eps * 0.02, "n_swapped": 0, "n_eligible": 0})  # fmt: skip
            records.append({**base, "kind": "contamination", "attack": "wordswap", "eps": 0.1, "nll_sum": nll * 1.1,
                            "correct_tokens": tok // 3, "eps_abs": 0.0, "n_swapped": 1, "n_eligible": 8})  # fmt: skip
    return pd.DataFrame(records)


def test_lm_summary_adds_the_reports_perplexity_interval_and_keeps_its_numbers() -> None:
    rows = _lm_rows()
    summary = _docs(summarize_lm_rows(rows))
    report = perplexity_table(rows).set_index(["model", "attack", "eps"])
    for model, m in summary.items():
        clean = rows[(rows.model == model) & (rows.kind == "clean")]
        assert m["clean"]["ppl"] == pytest.approx(math.exp(clean.nll_sum.sum() / clean.n_tokens.sum()))
        for entry in [{"attack": "clean", "eps": 0.0, **m["clean"]}, *m["results"]]:
            ref = report.loc[(model, entry["attack"], entry["eps"])]
            assert (entry["ppl_lo"], entry["ppl_hi"]) == (ref.ppl_lo, ref.ppl_hi)  # the same bootstrap, same seed
            assert entry["ppl_lo"] < entry["ppl"] < entry["ppl_hi"]
            assert entry["ppl"] == pytest.approx(ref.ppl)


def _docs(models: dict) -> dict:
    """Per-model records as the documents summary.json holds (these tests edit and index them)."""
    return {label: record.to_dict() for label, record in models.items()}


def _lm_summary(models: dict) -> LMAttackSummary:
    return typed(LMAttackSummary, {
        "kind": "attack", "family": "lm", "data": "austen", "n_examples": 12, "seed": 0, "attacks": ["pgd", "wordswap"],
        "eps": [0.05, 0.1], "rates": [0.1], "norm": "linf", "eps_mode": "relative", "eps_scale": {},
        "eps_scale_definition": "", "steps": 3, "step_size": None, "seq_chars": 128, "replacement": "AAA",
        "models": models, **CHECKS,
    })  # fmt: skip


def test_lm_table_shows_perplexity_with_its_interval(capsys: pytest.CaptureFixture[str]) -> None:
    models = _docs(summarize_lm_rows(_lm_rows()))
    render_lm_summary(_lm_summary(models))
    out = capsys.readouterr().out
    assert "perplexity [95% bootstrap CI over sequences]" in out
    clean = models["lm"]["clean"]
    assert f"{clean['ppl']:.2f} [{clean['ppl_lo']:.2f}, {clean['ppl_hi']:.2f}] ({100 * clean['acc']:.1f}%)" in out
    pgd = next(r for r in models["lm-grc"]["results"] if r["attack"] == "pgd" and r["eps"] == 0.1)
    ratio = pgd["ppl"] / models["lm-grc"]["clean"]["ppl"]
    assert f"{pgd['ppl']:.2f} [{pgd['ppl_lo']:.2f}, {pgd['ppl_hi']:.2f}] x{ratio:.2f}" in out


def test_lm_table_of_a_summary_without_intervals_shows_the_point(capsys: pytest.CaptureFixture[str]) -> None:
    models = _docs(summarize_lm_rows(_lm_rows()))
    for m in models.values():  # too few sequences for a bootstrap interval
        for entry in [m["clean"], *m["results"]]:
            entry["ppl_lo"] = entry["ppl_hi"] = math.nan
    render_lm_summary(_lm_summary(models))
    clean = models["lm"]["clean"]
    assert f"{clean['ppl']:.2f} ({100 * clean['acc']:.1f}%)" in capsys.readouterr().out


def test_corruption_tables_show_accuracy_with_wilson_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for model in ("deit", "deit-grc"):
        for i in range(20):
            rows.append({"model": model, "example_id": i, "kind": "clean", "attack": "clean", "eps": 0.0,
                         "correct": i < 18})  # fmt: skip
            for s in (1, 2):
                rows.append({"model": model, "example_id": i, "kind": "contamination",
                             "attack": "corruption:contrast", "eps": float(s), "correct": i < 18 - 5 * s})  # fmt: skip
    models = summarize_corruption_rows(pd.DataFrame(rows))
    summary = typed(CorruptionSummary, {
        "kind": "corruption", "family": "image", "data": "fashion-mnist", "n_examples": 20, "seed": 0,
        "attacks": ["corruption:contrast"], "corruptions": ["contrast"], "severities": [1, 2], "parameters": [],
        "baseline": "deit", "models": {k: v.to_dict() for k, v in models.items()}, **CHECKS,
    })  # fmt: skip
    render_corruption_summary(summary)
    out = capsys.readouterr().out
    assert "accuracy % [95% Wilson CI] under corruptions" in out and "clean % [95% Wilson CI]" in out
    for k in (13, 8, 18):  # severity 1, severity 2, clean: k of 20 correct
        lo, hi = wilson_interval(k, 20)
        assert f"{100 * k / 20:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" in out
    # mean corrupted accuracy: each example scored over its two corrupted copies (1, 0.5 or 0), t-interval over 20
    scores = [(float(i < 13) + float(i < 8)) / 2 for i in range(20)]
    mean, lo, hi = np.mean(scores), *stats_t_interval(scores)
    assert models["deit"].mean_acc == pytest.approx(mean)
    assert (models["deit"].mean_acc_lo, models["deit"].mean_acc_hi) == pytest.approx((lo, hi), rel=1e-3)
    assert "mean corrupted % [95% t-CI, clipped to [0, 100]]" in out
    assert f"{100 * mean:.1f} [{100 * models['deit'].mean_acc_lo:.1f}, {100 * models['deit'].mean_acc_hi:.1f}]" in out


def stats_t_interval(values: list[float]) -> tuple[float, float]:
    """The 95% Student-t interval of a mean, from scipy (the hand reference for the summaries' intervals)."""
    from scipy import stats as st

    half = st.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
    return float(np.mean(values) - half), float(np.mean(values) + half)


def test_lipschitz_tables_show_the_mean_lower_bound_with_its_t_interval(capsys: pytest.CaptureFixture[str]) -> None:
    from scipy import stats as st

    from robustbench_filters.cli.lipschitz import render_lipschitz_summary
    from robustbench_filters.lipschitz.summary import summarize

    lower = [1.0, 2.0, 4.0, 3.0, 5.0]
    rows = [{"model": "deit", "layer": layer, "example_id": i, "method": "pgd", "lower": v * scale,
             "local_upper": 1e6, "global_upper": 1e9, "radius": 1e-9}
            for layer, scale in (("model", 1.0), ("blocks.0", 0.5)) for i, v in enumerate(lower)]  # fmt: skip
    summary = summarize(pd.DataFrame(rows))
    half = st.t.ppf(0.975, 4) * np.std(lower, ddof=1) / math.sqrt(5)  # by hand: mean 3.0, t(4) = 2.776
    model = summary.models["deit"]
    assert (model.lower_mean_lo, model.lower_mean_hi) == pytest.approx((3.0 - half, 3.0 + half), rel=1e-3)
    block = model.layers[0]
    assert (block.lower_mean_lo, block.lower_mean_hi) == pytest.approx((1.5 - half / 2, 1.5 + half / 2), rel=1e-3)
    render_lipschitz_summary(summary, "pgd, l2, rho=0.1", per_layer=True, gap=False)
    out = capsys.readouterr().out
    assert "lower mean [95% t-CI, clipped at 0]" in out and "gain mean [95% t-CI, clipped at 0]" in out
    for entry, mean in ((model, "3"), (block, "1.5")):
        assert f"{mean} [{entry.lower_mean_lo:.3g}, {entry.lower_mean_hi:.3g}]" in out


def test_the_gap_table_shows_crowns_bound_and_checks_it_against_the_lower_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from robustbench_filters.cli.lipschitz import render_lipschitz_summary
    from robustbench_filters.lipschitz.summary import lipschitz_checks, summarize

    main = [{"model": "deit", "layer": "model", "example_id": i, "method": "exact", "lower": 2.0, "local_upper": 1e9,
             "global_upper": 1e12, "radius": 1e-9} for i in range(2)]  # fmt: skip

    def gap(crown: float) -> list[dict]:
        return [{"model": "deit", "layer": f"gap/{layer}", "example_id": i, "rho": 1e-3, "empirical": 2.0,
                 "layerwise_estimate": 50.0, "local_upper": 1e9, "local_first_order": 1e9, "local_taylor": np.nan,
                 "local_crown": crown if layer == "model" else np.nan, "baseline_local": 1e10, "global_upper": 1e12}
                for layer in ("model", "blocks.0") for i in range(2)]  # fmt: skip

    rows = pd.DataFrame(main + gap(20.0))
    summary = summarize(rows, checks=lipschitz_checks(rows, "deit"))
    (model,) = [r for r in summary.gap_log10_median if r.layer == "model"]
    assert model.local_crown == pytest.approx(math.log10(20.0)) and model.local_crown_vacuous is False
    assert model.local_upper_vacuous is True  # 1e9 over 2: nine decades
    check = next(c for c in summary.checks if c.name.startswith("gap rows"))
    assert check.status == "pass"
    render_lipschitz_summary(summary, "exact", per_layer=False, gap=True)
    out = capsys.readouterr().out
    assert "certified local (CROWN)" in out and "1.30" in out and "vacuous" in out
    # a CROWN bound below the exact Jacobian norm at the centre would be a soundness bug: the check fails
    broken = lipschitz_checks(pd.DataFrame(main + gap(1.0)), "deit")
    assert next(c for c in broken if c.name.startswith("gap rows")).status == "fail"


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_stops_reading_ends_robfilt_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from robustbench_filters.cli import SIGPIPE_EXIT, _common, run

    monkeypatch.setattr(_common, "_stdout", _common._Stdout(file=_ClosedPipe(), width=160))
    assert run(["models", "list"]) == SIGPIPE_EXIT  # `robfilt models list | head -1`
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert run(["models", "list", "--json"]) == SIGPIPE_EXIT
    assert capsys.readouterr().err == ""  # not "ended by SystemExit(1) from code it ran"


@pytest.mark.parametrize("argv", [["--help"], ["attack", "--help"], ["models", "list"], ["models", "list", "--json"]])
def test_output_into_a_closed_pipe_ends_quietly_with_141(argv: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before robfilt writes a byte: `robfilt ... | head -0`
    try:
        done = subprocess.run([sys.executable, "-m", "robustbench_filters.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
