"""The lower-bound methods: their vocabulary lives with the shared names (:mod:`robustbench_filters.names`)."""

from __future__ import annotations

from ..names import Method, parse_method

__all__ = ["Method", "parse_method"]
