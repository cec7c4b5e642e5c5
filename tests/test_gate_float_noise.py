"""Float noise is no change (issue 41): the same LM run on another machine gives per-document NLL sums that differ in
the last digits (the zoo's word-swap run: at most 1.1e-4 in sums of hundreds, about 1e-7 relative). Against a
baseline, a change within FLOAT_RTOL (1e-4 relative) of a perplexity-like value is equal in every mode: no WARN,
and no evidence for the paired test even when every document moved the same way. A real change still counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from robustbench_filters.cli import run
from robustbench_filters.gating.decide import FLOAT_RTOL, decide_baseline
from robustbench_filters.gating.metrics import Metric
from robustbench_filters.gating.modes import Status
from robustbench_filters.stats.paired import PairedRatio

LM_METRICS = {"ppl": 4.555, "word_perplexity": 4229.6, "byte_perplexity": 4.372, "bits_per_byte": 2.128}


def _metric(metric: str, value: float, width: float = 0.015) -> Metric:
    return Metric("lm", "wordswap@0.1", metric, value, value * (1 - width), value * (1 + width), 256, "lm")


@pytest.mark.parametrize("metric", list(LM_METRICS))
@pytest.mark.parametrize("mode", ["interval", "point"])
def test_a_float_noise_change_is_equal_and_a_real_one_is_not(metric: str, mode: str) -> None:
    base = _metric(metric, LM_METRICS[metric])
    for rel in (2e-7, -2e-7, 0.9 * FLOAT_RTOL):  # the machines' noise, and up to the allowance
        d = decide_baseline(base, _metric(metric, base.value * (1 + rel)), mode=mode)
        assert d.status is Status.PASS and d.detail.startswith("unchanged up to float noise (1e-4 relative)"), d
    worse = decide_baseline(base, _metric(metric, base.value * 1.002), mode=mode)  # 0.2%: a change, within the CIs
    assert worse.status is (Status.FAIL if mode == "point" else Status.WARN) and "+0.2% worse" in worse.detail


def _pair(shift: float, n: int = 40) -> tuple[PairedRatio, Metric, Metric]:
    """Per-document NLL sums of a baseline, and a fresh run whose every document is worse by ``shift`` relative (the
    same direction everywhere: the case a paired test would call significant)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(50, 900, n).astype(np.float64)
    base_nll = tokens * rng.uniform(1.2, 1.6, n)
    fresh_nll = base_nll * (1 + shift)
    pair = PairedRatio(np.arange(n), base_nll, tokens, fresh_nll, tokens)
    ppl = [math.exp(num.sum() / tokens.sum()) for num in (base_nll, fresh_nll)]
    return pair, _metric("ppl", ppl[0]), _metric("ppl", ppl[1])


def test_the_paired_test_finds_no_evidence_in_float_noise() -> None:
    pair, base, fresh = _pair(2e-7)  # every document 2e-7 worse: p = 2^-40 for "worse" with no allowance
    d = decide_baseline(base, fresh, mode="paired", pair=pair)
    assert d.status is Status.PASS and d.p_value > 0.5 and "unchanged up to float noise" in d.detail, d
    pair, base, fresh = _pair(-2e-7)
    better = decide_baseline(base, fresh, mode="paired", pair=pair)
    assert better.status is Status.PASS and "consider updating the baseline" not in better.detail
    pair, base, fresh = _pair(2e-3)  # 0.2% worse on every document: significant
    assert decide_baseline(base, fresh, mode="paired", pair=pair).status is Status.FAIL


def _scaled_baseline(doc: dict, factor: float) -> dict:
    """The baseline as another machine would have written it: every NLL sum times ``factor``, and every perplexity,
    word/byte perplexity and bits per byte (with its interval) moved to match (exp of a mean NLL, or a mean NLL)."""
    doc = json.loads(json.dumps(doc))
    for o in doc["outcomes"]:
        stored = o["nll_sum"]  # a list, or the list as a JSON string
        moved = [v * factor for v in (json.loads(stored) if isinstance(stored, str) else stored)]
        o["nll_sum"] = json.dumps(moved) if isinstance(stored, str) else moved
    for m in doc["metrics"]:
        for key in ("value", "lo", "hi"):
            if m["metric"] in ("ppl", "word_perplexity", "byte_perplexity"):
                m[key] = m[key] ** factor
            elif m["metric"] == "bits_per_byte":
                m[key] = m[key] * factor
    return doc


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child: the child is not the subject
def test_robfilt_check_treats_a_baseline_from_another_machine_as_equal(tmp_path: Path, capsys) -> None:
    """End to end: an LM word-swap run judged against its own baseline with every NLL sum moved by 3e-7 (this
    machine's word-swap noise against the committed baseline was about 1e-7) passes with no warning; moved by
    3e-3 (a real change) it fails."""
    lm = tmp_path / "lm"
    assert run(["attack", "--model", "lm", "--attack", "wordswap", "--rate", "0.1", "-n", "12", "--out", str(lm),
                "-q"]) == 0  # fmt: skip
    own = tmp_path / "own.json"
    assert run(["check", "--run", str(lm), "--write-baseline", str(own), "--out", str(tmp_path / "w"), "-q"]) == 0
    doc = json.loads(own.read_text())
    for factor, code, warns in ((1 - 3e-7, 0, 0), (1 + 3e-7, 0, 0), (1 - 3e-3, 1, None)):
        moved = tmp_path / f"moved{factor}.json"
        moved.write_text(json.dumps(_scaled_baseline(doc, factor)))
        capsys.readouterr()
        got = run(["check", "--run", str(lm), "--baseline", str(moved), "--out", str(tmp_path / f"o{factor}"),
                   "--json", "-q"])  # fmt: skip
        result = json.loads(capsys.readouterr().out)
        statuses = {(o["condition"], o["metric"]): o["status"] for o in result["outcomes"] if o["kind"] == "baseline"}
        assert got == code, statuses
        if warns is not None:
            assert list(statuses.values()).count("warn") == warns and set(statuses.values()) == {"pass"}, statuses
        else:  # the fresh run is 0.3% (log) worse on every document: its perplexities fail
            assert statuses[("clean", "ppl")] == "fail" and statuses[("wordswap@0.1", "ppl")] == "fail", statuses
