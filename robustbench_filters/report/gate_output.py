"""What CI systems show of a gate: JUnit XML (test results panes) and a Markdown summary (job summaries).

JUnit: one ``<testcase>`` per decision, grouped by family in ``classname`` (``robfilt.image.deit``); a FAIL
is a ``<failure>``, a WARN passes with its reason in ``<system-out>`` (JUnit has no warning state, and a
skipped test would hide that the number was measured). The Markdown file can be appended to
``$GITHUB_STEP_SUMMARY`` as is.
"""

from __future__ import annotations

import datetime as _dt
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from ..io import atomic_write, atomic_write_text

if TYPE_CHECKING:
    from .judge import GateResult

STATUS_WORD = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}


def write_junit(result: GateResult, path: Path) -> Path:
    fails = result.count("fail")
    suites = ET.Element("testsuites", name="robfilt check", tests=str(len(result.outcomes)), failures=str(fails))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=result.name,
        tests=str(len(result.outcomes)),
        failures=str(fails),
        errors="0",
        skipped="0",
        timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("runs", ", ".join(result.runs)), ("baseline", result.baseline or "-"),
                       ("tolerance", f"{result.tolerance:g}"), ("rule", result.rule)):  # fmt: skip
        ET.SubElement(props, "property", name=key, value=value)
    for o in result.outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"robfilt.{o.family}.{o.model}".rstrip("."),
            name=f"[{o.kind}] {o.name}",
            time="0",
        )
        if o.status == "fail":
            failure = ET.SubElement(case, "failure", message=o.detail, type="RobustnessRegression")
            failure.text = f"{o.name}: {o.detail} (run {o.run})"
        elif o.status == "warn":
            ET.SubElement(case, "system-out").text = f"WARN: {o.detail} (run {o.run})"
    tree = ET.ElementTree(suites)
    ET.indent(tree)
    atomic_write(path, lambda tmp: tree.write(tmp, encoding="utf-8", xml_declaration=True))
    return path


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_summary(result: GateResult) -> str:
    verdict = "passed" if result.passed else f"FAILED ({result.count('fail')} regression(s))"
    lines = [
        f"## robfilt check: {result.name} {verdict}",
        "",
        f"{result.count('pass')} pass, {result.count('warn')} warn, {result.count('fail')} fail. "
        f"Runs: {', '.join(f'`{r}`' for r in result.runs)}."
        + (f" Baseline: `{result.baseline}` (tolerance {result.tolerance:g})." if result.baseline else ""),
        "",
        "| status | check | model | condition | metric | expected | measured | detail |",
        "|:---|:---|:---|:---|:---|:---|---:|:---|",
    ]
    order = {"fail": 0, "warn": 1, "pass": 2}
    shown = [o for o in result.outcomes if o.kind != "sanity" or o.status != "pass"]
    for o in sorted(shown, key=lambda o: order[o.status]):
        value = (
            "-"
            if o.value is None
            else (f"{100 * o.value:.1f}%" if o.metric in ("acc", "token_acc") else f"{o.value:.4g}")
        )
        lines.append(
            f"| **{STATUS_WORD[o.status]}** | {o.kind} | {_cell(o.model)} | {_cell(o.condition)} | {_cell(o.metric)} | "
            f"{_cell(o.expected)} | {value} | {_cell(o.detail)} |"
        )
    n_sanity = sum(o.kind == "sanity" and o.status == "pass" for o in result.outcomes)
    if n_sanity:
        lines += ["", f"{n_sanity} sanity checks passed (not listed)."]
    lines += ["", f"Rule: {result.rule}"]
    lines += [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def write_markdown(result: GateResult, path: Path) -> Path:
    atomic_write_text(path, markdown_summary(result))
    return path
