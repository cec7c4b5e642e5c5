"""Reports and the CI gate: tables, figures and ``index.md`` from run folders; ``robfilt check`` regressions.

``build_report`` turns finished run folders into paper-ready tables (Markdown, CSV, LaTeX booktabs) and figures
(PDF, PNG); ``run_gate`` compares a run with thresholds (a TOML spec) or a baseline and decides pass/fail with
the sampling noise taken into account. Everything is recomputed from per-example rows.
"""

from .builder import ReportResult, build_report
from .gate import GateResult, Outcome, run_gate
from .runs import load_runs, write_seqlen_run

__all__ = ["GateResult", "Outcome", "ReportResult", "build_report", "load_runs", "run_gate", "write_seqlen_run"]
