"""The error types of robfilt's public API, under the name the documentation gives them.

Every bad input raises :class:`RobfiltError` (a ``ValueError``) with one line that names the parameter and the fix;
its ``exit_code`` is what the command line returns for it. Catch it from here or as ``robustbench_filters.RobfiltError``.
The types live in :mod:`robustbench_filters.core.errors` with the rest of the vocabulary; this module keeps the
import path that code written before the package's layout move uses.
"""

from __future__ import annotations

from .core.errors import (
    CheckpointError,
    ChecksumError,
    RegressionError,
    RobfiltError,
    RunStateError,
    UserCodeError,
)

__all__ = ["CheckpointError", "ChecksumError", "RegressionError", "RobfiltError", "RunStateError", "UserCodeError"]
