"""Reports: tables, figures and ``index.md`` from finished run folders, and the gate's judgement of them.

``build_report`` turns run folders into paper-ready tables (Markdown, CSV, LaTeX booktabs) and figures (PDF,
PNG); :mod:`.judge` decides a gate's pass/fail against thresholds or a baseline with the sampling noise taken
into account. Everything here reads run folders only and recomputes from per-example rows; making the runs is
:mod:`robustbench_filters.gate`'s job.
"""

from .builder import ReportResult, build_report
from .judge import GateResult, Outcome
from .runs import load_runs, write_seqlen_run

__all__ = ["GateResult", "Outcome", "ReportResult", "build_report", "load_runs", "write_seqlen_run"]
