"""JUnit XML with real times: check wall times, run wall times from manifests, parseable by any JUnit reader."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from robustbench_filters.gating.junit import RunTime, Stopwatch, TimedCase, junit_xml, run_wall_seconds, timed
from robustbench_filters.runs.folder import RunWriter, load_run


def test_stopwatch_and_timed_measure_wall_time() -> None:
    with Stopwatch() as w:
        time.sleep(0.05)
    assert 0.04 <= w.seconds < 1.0
    result, seconds = timed(lambda x: (time.sleep(0.02), x * 2)[1], 21)
    assert result == 42 and 0.015 <= seconds < 1.0


def test_run_wall_seconds_from_manifest(tmp_path: Path) -> None:
    assert run_wall_seconds({"created": "2026-12-01T10:00:00+00:00", "finished": "2026-12-01T10:01:05+00:00"}) == 65
    assert run_wall_seconds({"created": "2026-12-01T10:00:00+00:00"}) is None
    assert run_wall_seconds({"created": "yesterday", "finished": "today"}) is None
    rows = pd.DataFrame({"model": ["m"], "example_id": [0], "attack": ["clean"], "eps": [0.0], "correct": [True]})
    with RunWriter(tmp_path / "run", "attack", {"x": 1}, seed=0) as w:
        w.write_part("all", rows)
        w.finish(rows, {"kind": "attack"})
    seconds = run_wall_seconds(load_run(tmp_path / "run").manifest)
    assert seconds is not None and 0 <= seconds < 60


def test_junit_xml_parses_with_times_failures_and_warnings() -> None:
    cases = [
        TimedCase(
            "robfilt.image.deit", "[baseline] deit pgd@0.01 acc", "fail", "-3.0 pp: McNemar p = 0.0083", 0.0123, "r1"
        ),
        TimedCase("robfilt.image.deit", "[threshold] deit clean acc", "warn", "within noise", 0.5),
        TimedCase("robfilt.lm.lm", "[baseline] lm clean ppl", "pass", "", 1.25),
    ]
    runs = [RunTime("image@abc", 42.0), RunTime("lm@def", None)]
    text = junit_xml("zoo robustness", cases, runs, {"mode": "paired"}, timestamp="2026-12-01T10:00:00+00:00")
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    root = ET.fromstring(text.split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None
    assert root.get("tests") == "5" and root.get("failures") == "1"
    assert float(suite.get("time", "0")) == pytest.approx(42.0 + 0.0123 + 0.5 + 1.25, abs=1e-3)
    assert suite.get("timestamp") == "2026-12-01T10:00:00+00:00"
    by_name = {c.get("name"): c for c in suite.iter("testcase")}
    assert by_name["[run] image@abc"].get("time") == "42.000"
    assert by_name["[run] lm@def"].findtext("system-out") == "wall time not recorded in the run manifest"
    failed = by_name["[baseline] deit pgd@0.01 acc"]
    assert failed.get("time") == "0.012" and failed.get("classname") == "robfilt.image.deit"
    failure = failed.find("failure")
    assert failure is not None and failure.get("message") == "-3.0 pp: McNemar p = 0.0083"
    assert "(run r1)" in (failure.text or "")
    assert (by_name["[threshold] deit clean acc"].findtext("system-out") or "").startswith("WARN: within noise")
    assert by_name["[baseline] lm clean ppl"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"mode": "paired"}
