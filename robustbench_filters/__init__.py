"""robustbench_filters: does an architectural idea really make a transformer more robust?

Public API (stable): ``create_model``, ``list_models``, ``evaluate``, ``estimate_lipschitz``.
"""

from __future__ import annotations

import logging

from .versions import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())

from .models import create_model, list_models, load_checkpoint, save_checkpoint  # noqa: E402


def evaluate(*args, **kwargs):
    """Attack models on shared examples; see :func:`robustbench_filters.attacks.evaluate`."""
    from .attacks import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


def estimate_lipschitz(*args, **kwargs):
    """Lipschitz lower and certified upper bounds; see :func:`robustbench_filters.lipschitz.estimate_lipschitz`."""
    from .lipschitz import estimate_lipschitz as _estimate

    return _estimate(*args, **kwargs)


__all__ = [
    "__version__",
    "create_model",
    "estimate_lipschitz",
    "evaluate",
    "list_models",
    "load_checkpoint",
    "save_checkpoint",
]
