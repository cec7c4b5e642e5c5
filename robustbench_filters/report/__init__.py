"""Reports: tables, figures and ``index.md`` from finished run folders.

``build_report`` turns run folders into paper-ready tables (Markdown, CSV, LaTeX booktabs) and figures (PDF,
PNG). Everything here reads run folders only and recomputes from per-example rows; making the runs is
:mod:`robustbench_filters.api`'s job, and the CI gate's judgement lives in :mod:`robustbench_filters.gating`.
"""

from .builder import ReportResult, build_report
from .runs import load_runs, write_seqlen_run

__all__ = ["ReportResult", "build_report", "load_runs", "write_seqlen_run"]
