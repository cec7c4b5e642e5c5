"""Sanity checks: the record type (:mod:`.base`) and the checks of each kind of run."""

from .base import EPS_TOL, FAIL, PASS, WARN, Check, all_passed, ball_tolerance, summarize

__all__ = ["EPS_TOL", "FAIL", "PASS", "WARN", "Check", "all_passed", "ball_tolerance", "summarize"]
