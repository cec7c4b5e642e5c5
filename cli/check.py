"""robfilt check: the CI gate (exit 0 pass, 1 regression, 2 usage error or nothing checked).

The gate runs users' model code, which may end the process (``sys.exit(0)``, ``os._exit(0)``, a crash). A CI gate
must never pass without checking, so ``robfilt check`` runs the gate in a child process and exits 0 only when
the child reports, through a result file tagged with a fresh nonce, that it evaluated every check and passed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from rich.table import Table

from robustbench_filters.configs.options import Bool, Declared, Number, Paths, Text, cli_only
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.surface import Surface

if TYPE_CHECKING:
    from robustbench_filters.gating.outcome import GateResult, PlannedCheck

from ._common import (
    JsonOpt,
    QuietOpt,
    ThreadsOpt,
    WorkersOpt,
    console,
    print_json,
    progress_bar,
    setup_logging,
    setup_threads,
    setup_workers,
    worker_pool,
)
from ._options import config_options

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        console().print(note, style="dim", markup=False, highlight=False)


def render_plan(plan: list[PlannedCheck]) -> None:
    """Before the runs: the smallest change each check can detect at the spec's n, to size n_examples."""
    if not plan:
        return
    out = console()
    table = Table(title="planned checks: the smallest change each detects with 80% power at the spec's n")
    for col, justify in (("check", "left"), ("model", "left"), ("condition", "left"), ("metric", "left"),
                         ("mode", "left"), ("n", "right"), ("detects", "right")):  # fmt: skip
        table.add_column(col, justify=justify)
    from robustbench_filters.gating.outcome import footnotes

    index, notes = footnotes(plan)
    for p in plan:
        mark = f" [{index[p.mde_assumption]}]" if p.mde_assumption in index else ""
        detects = p.detects + mark
        table.add_row(p.kind, p.model, p.condition, p.metric, p.mode, str(p.n or "-"), detects)
    out.print(table)
    _print_notes([*notes, "Too coarse? Raise n_examples (scripts/gate_mde_table.py prints the effect for any n)."])


def render_gate(result: GateResult) -> None:
    """The diff table: expected, measured (95% CI), mode, p-value, what the check detects, and the decision."""
    out = console()
    table = Table(title=f"robfilt check: {result.name}")
    for col, justify in (("status", "left"), ("check", "left"), ("model", "left"), ("condition", "left"),
                         ("metric", "left"), ("mode", "left"), ("expected", "left"), ("measured [95% CI]", "right"),
                         ("p", "right"), ("detects", "right"), ("detail", "left")):  # fmt: skip
        table.add_column(col, justify=justify)
    from robustbench_filters.gating.outcome import footnotes, ordered
    from robustbench_filters.gating.output import measured, p_cell

    shown = ordered(result.outcomes)
    index, notes = footnotes(shown)
    for o in shown:
        detects = o.detects + (f" [{index[o.mde_assumption]}]" if o.mde_assumption in index else "")
        table.add_row(f"[{STYLE[o.status]}]{o.status.upper()}[/]", o.kind, o.model, o.condition, o.metric,
                      o.mode or "-", o.expected, measured(o), p_cell(o), detects or "-", o.detail)  # fmt: skip
    out.print(table)
    n_sanity = sum(o.kind == "sanity" and o.status == "pass" for o in result.outcomes)
    if n_sanity:
        out.print(f"{n_sanity} sanity checks passed (not listed)", style="dim", markup=False)
    if notes:
        _print_notes(["detects = the smallest change that fails the check with 80% power, assuming:", *notes])
    from robustbench_filters.gating.metrics import interval_note

    note = interval_note(o.metric for o in shown if o.kind != "sanity")
    _print_notes([note, *result.notes] if note else result.notes)
    verdict = "passed" if result.passed else f"FAILED: {result.count('fail')} regression(s)"
    style = "green" if result.passed else "bold red"
    out.print(
        f"[{style}]{verdict}[/] ({result.count('pass')} pass, {result.count('warn')} warn, {result.count('fail')} fail)"
    )
    out.print(f"junit: {result.junit}  summary: {result.summary}", style="dim", markup=False)


CHILD_ENV = "ROBFILT_GATE_CHILD"  # "<nonce>:<result file>" in the supervised child


def supervise(argv: list[str]) -> int:
    """Run ``robfilt check ARGV`` in a child process; trust its exit code only with a matching result record.

    Under ``--json`` the child's stdout is collected and exactly one JSON object reaches ours on every path: the
    child's own (its result, or its one-line error), else the gate's error when the child ended before it
    evaluated its checks or was interrupted.
    """

    json_mode = "--json" in argv
    with tempfile.TemporaryDirectory(prefix="robfilt-gate-") as tmp:
        record, nonce = Path(tmp) / "result.json", secrets.token_hex(16)
        env = {**os.environ, CHILD_ENV: f"{nonce}:{record}"}
        cmd = [sys.executable, "-m", "robustbench_filters.cli", *argv]
        try:
            child = subprocess.run(cmd, env=env, stdout=subprocess.PIPE if json_mode else None)
        except KeyboardInterrupt:
            return _gate_error("interrupted; nothing was checked", 130, json_mode)
        code, out = child.returncode, (child.stdout or b"").decode("utf-8", errors="replace")
        try:
            result = json.loads(record.read_text())
        except (OSError, ValueError):
            result = None
    reported = _one_json(out) if json_mode else None
    if code in (2, 130):  # a usage error or Ctrl-C, already reported by the child in one line
        if json_mode:
            _forward(reported, code, "the gate stopped (usage error or interrupt); see the error above")
        return code
    if not isinstance(result, dict) or result.get("nonce") != nonce or result.get("exit_code") != code:
        return _gate_error(
            f"the gate ended (exit {code}) before it evaluated its checks, by the error above or by a model's code "
            "ending the process; nothing was checked, so the gate fails: fix that cause and run it again.",
            2,
            json_mode,
        )
    if json_mode:
        _forward(reported, code, "the gate finished but printed no result")
    return code


def _gate_error(message: str, code: int, json_mode: bool) -> int:
    from ._common import console_err, print_json

    console_err(f"error: {message}" if code != 130 else message)
    if json_mode:
        print_json({"error": message, "exit_code": code})
    return code


def _one_json(text: str) -> dict | None:
    """The JSON object the child printed (its stdout carries nothing else under --json), or None."""
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        decoder, value = json.JSONDecoder(), None
        for line_start in [0, *(i + 1 for i, ch in enumerate(text) if ch == "\n")]:
            if text.startswith("{", line_start):
                try:
                    value, _ = decoder.raw_decode(text, line_start)
                except ValueError:
                    continue
    return value if isinstance(value, dict) else None


def _forward(reported: dict | None, code: int, missing: str) -> None:
    from ._common import print_json

    print_json(reported if reported is not None else {"error": missing, "exit_code": code})


def _record(exit_code: int, evaluated: int) -> None:
    """In the supervised child: tell the parent the gate finished and how many checks it evaluated."""
    tag = os.environ.get(CHILD_ENV)
    if tag:
        nonce, _, path = tag.partition(":")
        Path(path).write_text(json.dumps({"nonce": nonce, "exit_code": exit_code, "evaluated": evaluated}))


_CLI_ONLY = "the gate's own call (run_gate in Python; a spec cannot name another spec)"


def _gate(default: Any, help: str, value: Any = None, **kwargs: Any) -> Any:
    return cli_only(default, help=help, why=_CLI_ONLY, value=value or Text(path=True), panel="Gate", **kwargs)


@dataclass(frozen=True)
class GateCall(Declared):
    """One call of the gate: a spec that makes fresh runs, or given run folders with a baseline; where the
    outputs go; and how the baseline is compared (the spec's policy unless overridden here)."""

    DESCRIPTION: ClassVar[str] = "check"

    spec: str | None = _gate(None, "TOML spec: thresholds, and how to make fresh runs.")
    runs: tuple[str, ...] = _gate(
        (), "Check this run folder instead of making fresh runs (repeatable).", Paths(), flag="--run"
    )
    baseline: str | None = _gate(None, "summary.json, run folder or robfilt-baseline JSON to compare with.")
    tolerance: float | None = _gate(
        None, "Extra slack vs the baseline: accuracy units (0.02 = 2 pp), relative for ppl.", Number()
    )
    out: str | None = _gate(None, "Folder for fresh runs and outputs (default: spec's out).")
    junit: str | None = _gate(None, "JUnit XML path (default: <out>/junit.xml).")
    summary: str | None = _gate(None, "Markdown summary (default: <out>/summary.md).")
    write_baseline: str | None = _gate(None, "Also save the runs as a baseline (v2: metrics + per-example outcomes).")
    mode: str | None = _gate(
        None, "Baseline comparison: paired (default), interval or point; overrides the spec.", Text()
    )
    overwrite: bool = _gate(
        False, "Write into an --out holding other files too (kept: robfilt removes only its own).", Bool()
    )

    def arguments(self) -> dict[str, Any]:
        """The call as :func:`robustbench_filters.gate.run.run_gate`'s keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@config_options(GateCall)
def check_cmd(
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    workers: WorkersOpt = None,
    **options: Any,
) -> None:
    """Gate on robustness: fail (exit 1) when a metric misses its threshold or is significantly worse than a baseline.

    Usage: robfilt check --spec robustness.toml, or robfilt check --run RUN_DIR --baseline FILE.
    """
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.configs import read

    setup_logging(quiet, json_out)
    call = GateCall(**read(options, Surface.CLI))
    count = setup_workers(workers) if not call.runs else 1  # given run folders: nothing to compute
    with worker_pool(count), progress_bar(quiet or json_out) as hook:
        from robustbench_filters.gate.run import run_gate

        on_plan = None if (quiet or json_out) else render_plan
        result = run_gate(**call.arguments(), progress=hook, on_plan=on_plan, workers=count)
    if not result.outcomes:
        raise RobfiltError("the gate evaluated no checks; add requirements or a baseline to the spec.")
    _record(result.exit_code, len(result.outcomes))
    if json_out:
        print_json(result.to_dict())
        if not result.passed:
            raise typer.Exit(result.exit_code)
        return
    render_gate(result)
    result.raise_for_regressions()


def register(app: typer.Typer) -> None:
    app.command("check")(check_cmd)
