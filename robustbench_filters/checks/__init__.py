"""Sanity checks: what they share (:mod:`.base`: the :class:`Check` record) and the checks of each kind of run."""

from .base import EPS_TOL, FAIL, PASS, WARN, Check, ChecksSummary, all_passed, ball_tolerance

__all__ = ["EPS_TOL", "FAIL", "PASS", "WARN", "Check", "ChecksSummary", "all_passed", "ball_tolerance"]
