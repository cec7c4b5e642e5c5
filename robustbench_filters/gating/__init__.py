"""The CI gate's statistics and formats, independent of how runs are made.

- :mod:`.modes`: check modes (paired / interval / point), statuses and the :class:`Decision` record;
- :mod:`.decide`: the pure decision functions for thresholds and baselines; :mod:`.judge` applies them
  to every metric of a baseline (find, pair, decide, time);
- :mod:`.series` and :mod:`.baseline`: per-example outcomes, pairing by example id, baseline documents v2;
- :mod:`.power` (and :mod:`.power_exact`): the minimum detectable effect of every check;
- :mod:`.junit`: JUnit XML with real check and run times.
"""

from .baseline import Baseline, baseline_document, read_baseline, write_baseline
from .decide import decide_baseline, decide_threshold
from .judge import Judged, judge_baseline, junit_cases
from .junit import RunTime, Stopwatch, TimedCase, junit_xml, run_wall_seconds, timed
from .modes import Decision, Mode, Status, threshold_mode
from .power import CheckPlan, Mde, minimum_detectable
from .series import example_identity, pair_series, series_from_rows

__all__ = [
    "Baseline",
    "CheckPlan",
    "Decision",
    "Judged",
    "Mde",
    "Mode",
    "RunTime",
    "Status",
    "Stopwatch",
    "TimedCase",
    "baseline_document",
    "decide_baseline",
    "decide_threshold",
    "example_identity",
    "judge_baseline",
    "junit_cases",
    "junit_xml",
    "minimum_detectable",
    "pair_series",
    "read_baseline",
    "run_wall_seconds",
    "series_from_rows",
    "threshold_mode",
    "timed",
    "write_baseline",
]
