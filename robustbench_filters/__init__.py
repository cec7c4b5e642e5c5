"""robustbench_filters: does an architectural idea really make a transformer more robust?

Public API (stable): ``create_model``, ``list_models``, ``evaluate``, ``estimate_lipschitz``.
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

from .models import create_model, list_models  # noqa: E402

__all__ = ["__version__", "create_model", "list_models"]
