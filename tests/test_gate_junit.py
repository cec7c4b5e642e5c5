"""JUnit XML with real times: check wall times, run wall times from manifests, parseable by any JUnit reader."""

from __future__ import annotations

import datetime as dt
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from run_summaries import image_summary

from robustbench_filters.gating import junit
from robustbench_filters.gating.junit import RunTime, Stopwatch, TimedCase, junit_xml, run_wall_seconds, timed
from robustbench_filters.runs import folder as run_folder
from robustbench_filters.runs.folder import RunWriter, load_run


class _Clock:
    """A perf_counter that advances by fixed ticks, so a measured time is exact on a machine of any speed."""

    def __init__(self, *ticks: float) -> None:
        self.now, self.ticks = 100.0, list(ticks)

    def perf_counter(self) -> float:
        self.now += self.ticks.pop(0)
        return self.now


def test_stopwatch_and_timed_measure_the_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    with Stopwatch() as w:
        time.sleep(0.05)
    assert w.seconds >= 0.049  # a real sleep is never shorter than asked (no upper bound: a busy machine is slow)
    monkeypatch.setattr(junit, "time", _Clock(0.0, 0.25, 0.0, 1.5))
    with Stopwatch() as w:
        pass
    assert w.seconds == 0.25
    assert timed(lambda x: x * 2, 21) == (42, 1.5)


def test_run_wall_seconds_from_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_wall_seconds({"created": "2026-12-01T10:00:00+00:00", "finished": "2026-12-01T10:01:05+00:00"}) == 65
    assert run_wall_seconds({"created": "2026-12-01T10:00:00+00:00"}) is None
    assert run_wall_seconds({"created": "yesterday", "finished": "today"}) is None

    stamps = iter([dt.datetime(2026, 12, 1, 10, 0, 0, 700000, tzinfo=dt.UTC), dt.datetime(2026, 12, 1, 10, 0, 42)])

    class Stamps(dt.datetime):
        """The run writer's clock: its created, then its finished stamp."""

        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
            return next(stamps).replace(tzinfo=tz)

    monkeypatch.setattr(run_folder, "_dt", SimpleNamespace(datetime=Stamps, UTC=dt.UTC))
    rows = pd.DataFrame({"model": ["m"], "example_id": [0], "attack": ["clean"], "eps": [0.0], "correct": [True]})
    with RunWriter(tmp_path / "run", "attack", {"x": 1}, seed=0, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        w.finish(rows, image_summary(rows))
    assert run_wall_seconds(load_run(tmp_path / "run").manifest) == 42  # stamps at second resolution


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
