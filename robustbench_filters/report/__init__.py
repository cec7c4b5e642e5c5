"""Reports: tables, figures and ``index.md`` from finished run folders.

``build_report`` turns run folders into paper-ready tables (Markdown, CSV, LaTeX booktabs) and figures (PDF,
PNG). Everything here reads run folders only and recomputes from per-example rows; making the runs is
:mod:`robustbench_filters.api.evaluate`'s job, and the CI gate's judgement lives in :mod:`robustbench_filters.gating`.

The names below load on first use, so importing one light module of this package does not pay for pandas and
matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builder import ReportResult, build_report
    from .runs import load_runs

_LAZY = {"ReportResult": ".builder", "build_report": ".builder", "load_runs": ".runs"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ReportResult", "build_report", "load_runs"]
