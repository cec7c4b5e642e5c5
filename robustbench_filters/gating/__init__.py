"""The CI gate's one judging path: statistics, decisions, formats and outputs, independent of how runs are made.

Everything here reads finished run folders only (like :mod:`..report`), so it sits in the readers' tier;
:mod:`robustbench_filters.gate` (an entry point) reads the spec, makes the runs and calls in.

- :mod:`.metrics`: the named metrics a gate checks (``deit/pgd@0.02/acc``), recomputed from run rows through
  :mod:`robustbench_filters.stats.aggregates` (the numbers a report prints), and baseline files;
- :mod:`.modes`: check modes (paired / interval / point), statuses, the baseline policy, :class:`Decision`;
- :mod:`.decide`: the pure decision functions for thresholds and baselines;
- :mod:`.judge`: applies them to runs (find, pair, test, Holm-correct, decide, time) and gives :class:`Outcome` s;
- :mod:`.series` and :mod:`.baseline`: per-example outcomes, pairing by example id, baseline documents v2;
- :mod:`.power` (and :mod:`.power_exact`): the minimum detectable effect of every check; :mod:`.plan` the
  effects planned before any run;
- :mod:`.outcome`: the records (:class:`Requirement`, :class:`Outcome`, :class:`GateResult`);
- :mod:`.junit` and :mod:`.output`: JUnit XML with real check and run times, and the Markdown summary.
"""

from .baseline import Baseline, baseline_document, read_baseline, write_baseline
from .decide import decide_baseline, decide_threshold
from .judge import Judged, judge_baseline, judge_requirements, junit_cases, sanity_outcomes
from .junit import RunTime, Stopwatch, TimedCase, junit_xml, run_wall_seconds, timed
from .modes import BaselinePolicy, Correction, Decision, Mode, Status, threshold_mode
from .outcome import GateResult, Outcome, PlannedCheck, Requirement
from .output import markdown_summary, write_junit, write_markdown
from .plan import plan_baseline, plan_thresholds
from .power import CheckPlan, Mde, minimum_detectable
from .series import example_identity, examples_digest, pair_series, series_from_rows

__all__ = [
    "Baseline",
    "BaselinePolicy",
    "CheckPlan",
    "Correction",
    "Decision",
    "GateResult",
    "Judged",
    "Mde",
    "Mode",
    "Outcome",
    "PlannedCheck",
    "Requirement",
    "RunTime",
    "Status",
    "Stopwatch",
    "TimedCase",
    "baseline_document",
    "decide_baseline",
    "decide_threshold",
    "example_identity",
    "examples_digest",
    "judge_baseline",
    "judge_requirements",
    "junit_cases",
    "junit_xml",
    "markdown_summary",
    "minimum_detectable",
    "pair_series",
    "plan_baseline",
    "plan_thresholds",
    "read_baseline",
    "run_wall_seconds",
    "sanity_outcomes",
    "series_from_rows",
    "threshold_mode",
    "timed",
    "write_baseline",
    "write_junit",
    "write_markdown",
]
