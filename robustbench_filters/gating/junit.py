"""JUnit XML with real times: each check's own wall time, and each run's wall time from its manifest.

CI test panes (GitHub, GitLab, Jenkins) sort and chart by ``time``; a gate that reports 0 s everywhere hides
where its minutes went. Runs appear as their own test cases (``[run] <id>``) timed from the manifest's
``created`` and ``finished`` stamps (second resolution), checks as one case each timed with
:class:`Stopwatch`. A FAIL is a ``<failure>``; a WARN passes with its reason in ``<system-out>`` (JUnit has
no warning state, and "skipped" would hide that the number was measured).
"""

from __future__ import annotations

import datetime as _dt
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class TimedCase:
    """One judged check as JUnit shows it."""

    classname: str  # e.g. "robfilt.image.deit"
    name: str  # e.g. "[baseline] deit pgd@0.01 acc"
    status: str  # "pass" | "warn" | "fail"
    detail: str = ""
    seconds: float = 0.0
    run: str = ""


@dataclass(frozen=True)
class RunTime:
    name: str
    seconds: float | None  # None: the manifest has no finished stamp


class Stopwatch:
    """``with Stopwatch() as w: ...`` then ``w.seconds`` (monotonic clock)."""

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """Call ``fn`` and return (its result, its wall time in seconds)."""
    with Stopwatch() as w:
        result = fn(*args, **kwargs)
    return result, w.seconds


def run_wall_seconds(manifest: Mapping[str, Any]) -> float | None:
    """finished - created of a run manifest in seconds; None when either stamp is missing or unreadable."""
    try:
        start = _dt.datetime.fromisoformat(str(manifest["created"]))
        end = _dt.datetime.fromisoformat(str(manifest["finished"]))
    except (KeyError, ValueError):
        return None
    return max(0.0, (end - start).total_seconds())


def _time(seconds: float | None) -> str:
    return f"{(seconds or 0.0):.3f}"


def junit_xml(
    suite: str,
    cases: Sequence[TimedCase],
    runs: Sequence[RunTime] = (),
    properties: Mapping[str, str] | None = None,
    timestamp: str | None = None,
) -> str:
    """The JUnit XML document (a string, UTF-8 declaration included) for one gate."""
    n_tests = len(cases) + len(runs)
    fails = sum(c.status == "fail" for c in cases)
    total = sum(c.seconds for c in cases) + sum(r.seconds or 0.0 for r in runs)
    root = ET.Element("testsuites", name="robfilt check", tests=str(n_tests), failures=str(fails), time=_time(total))
    stamp = timestamp or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(n_tests), failures=str(fails), errors="0",
                         skipped="0", time=_time(total), timestamp=stamp)  # fmt: skip
    if properties:
        props = ET.SubElement(node, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=key, value=value)
    for r in runs:
        case = ET.SubElement(node, "testcase", classname="robfilt.run", name=f"[run] {r.name}", time=_time(r.seconds))
        if r.seconds is None:
            ET.SubElement(case, "system-out").text = "wall time not recorded in the run manifest"
    for c in cases:
        case = ET.SubElement(node, "testcase", classname=c.classname, name=c.name, time=_time(c.seconds))
        where = f" (run {c.run})" if c.run else ""
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", message=c.detail, type="RobustnessRegression")
            failure.text = f"{c.name}: {c.detail}{where}"
        elif c.status == "warn":
            ET.SubElement(case, "system-out").text = f"WARN: {c.detail}{where}"
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["RunTime", "Stopwatch", "TimedCase", "junit_xml", "run_wall_seconds", "timed"]
