"""What CI systems show of a gate: JUnit XML (test results panes) and a Markdown summary (job summaries).

JUnit (:func:`.junit.junit_xml`): one ``<testcase>`` per decision with the check's own wall time, grouped by
family in ``classname`` (``robfilt.image.deit``), plus one ``[run]`` case per run timed from its manifest's
``created`` and ``finished`` stamps. A FAIL is a ``<failure>``; a WARN passes with its reason in
``<system-out>``. The Markdown file can be appended to ``$GITHUB_STEP_SUMMARY`` as is: the diff table with
each check's mode, p-value and minimum detectable effect, the assumptions behind those effects as footnotes,
and the rule.
"""

from __future__ import annotations

from pathlib import Path

from ..core.io import atomic_write_text
from .judge import junit_case
from .junit import RunTime, junit_xml
from .metrics import interval_note
from .outcome import FAIL, PASS, PERCENT, WARN, GateResult, Outcome, footnotes, ordered

STATUS_WORD = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL"}


def measured(o: Outcome) -> str:
    """The measured value with its 95% interval, as a table cell."""
    if o.value is None:
        return "-"
    pct = o.metric in PERCENT
    text = f"{100 * o.value:.1f}%" if pct else f"{o.value:.4g}"
    if o.lo is not None and o.hi is not None and o.lo != o.hi:
        text += f" [{100 * o.lo:.1f}, {100 * o.hi:.1f}]" if pct else f" [{o.lo:.4g}, {o.hi:.4g}]"
    return text


def p_cell(o: Outcome) -> str:
    """The paired test's p-value (Holm-adjusted in brackets when the correction changed it)."""
    if o.p_value is None:
        return "-"
    text = f"{o.p_value:.2g}"
    if o.p_adjusted is not None and o.p_adjusted != o.p_value:
        text += f" (adj. {o.p_adjusted:.2g})"
    return text


def write_junit(result: GateResult, path: Path) -> Path:
    properties = {
        "runs": ", ".join(result.runs),
        "baseline": result.baseline or "-",
        "baseline policy": result.policy.describe() if result.policy and result.baseline else "-",
        "tolerance": f"{result.tolerance:g}",
        "rule": result.rule,
    }
    runs = [RunTime(r, result.run_seconds.get(r)) for r in result.runs]
    text = junit_xml(result.name, [junit_case(o) for o in result.outcomes], runs, properties)
    atomic_write_text(path, text)
    return path


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_summary(result: GateResult) -> str:
    verdict = "passed" if result.passed else f"FAILED ({result.count(FAIL)} regression(s))"
    baseline = ""
    if result.baseline:
        baseline = f" Baseline: `{result.baseline}` ({result.policy.describe() if result.policy else 'defaults'})."
    lines = [
        f"## robfilt check: {result.name} {verdict}",
        "",
        f"{result.count(PASS)} pass, {result.count(WARN)} warn, {result.count(FAIL)} fail. "
        f"Runs: {', '.join(f'`{r}`' for r in result.runs)}.{baseline}",
        "",
        "| status | check | model | condition | metric | mode | expected | measured [95% CI] | p | detects (80% power) "
        "| detail |",
        "|:---|:---|:---|:---|:---|:---|:---|---:|---:|---:|:---|",
    ]
    shown = ordered(result.outcomes)
    index, notes = footnotes(shown)
    for o in shown:
        detects = o.detects + (f" [{index[o.mde_assumption]}]" if o.mde_assumption in index else "")
        lines.append(
            f"| **{STATUS_WORD[o.status]}** | {o.kind} | {_cell(o.model)} | {_cell(o.condition)} | {_cell(o.metric)} | "
            f"{o.mode or '-'} | {_cell(o.expected)} | {measured(o)} | {p_cell(o)} | {detects or '-'} | {_cell(o.detail)} |"
        )
    n_sanity = sum(o.kind == "sanity" and o.status == PASS for o in result.outcomes)
    if n_sanity:
        lines += ["", f"{n_sanity} sanity checks passed (not listed)."]
    if notes:
        lines += ["", "Detectable effects assume:", "", *[f"- {n}" for n in notes]]
    note = interval_note(o.metric for o in shown if o.kind != "sanity")
    if note:
        lines += ["", f"{note}."]
    lines += ["", f"Rule: {result.rule}"]
    lines += [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def write_markdown(result: GateResult, path: Path) -> Path:
    atomic_write_text(path, markdown_summary(result))
    return path


__all__ = ["markdown_summary", "measured", "p_cell", "write_junit", "write_markdown"]
