"""Certified-bound research: where the bounds lose and what each refinement buys (not on the default path).

- :mod:`.gap`: per example and block, the empirical gain, the layerwise estimate (not certified), the certified
  local and global bounds side by side (``robfilt lipschitz --gap``, ``make reports``, the study's layerwise
  estimate);
- :mod:`.local`: the stage-wise local bound with its ablation switches, exact attention norms at the centre and
  the second-order bound (``scripts/lipschitz_gap.py``);
- :mod:`.taylor`: the second-order (Taylor) bound itself.

Everything here builds on the default path's one walker (:mod:`..chain`) and its certified bounds
(:mod:`..certify`, :mod:`..local_bound`); nothing on the default path imports this package except the
``--gap`` part of the measurement.
"""

from .gap import GAP_COLUMNS, gap_rows, gap_summary
from .local import LocalOptions, local_bounds

__all__ = ["GAP_COLUMNS", "LocalOptions", "gap_rows", "gap_summary", "local_bounds"]
