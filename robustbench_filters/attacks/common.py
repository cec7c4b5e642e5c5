"""Plumbing shared by the three engines (image attacks, LM attacks, corruptions)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from torch import nn


def model_labels(models: Sequence[str | nn.Module]) -> list[str]:
    """The name each model has in rows and tables: its reference, its registry name, or ``model<i>``."""
    return [
        m if isinstance(m, str) else getattr(getattr(m, "robfilt_spec", None), "name", f"model{i}")
        for i, m in enumerate(models)
    ]


def resolve_out(out: str | Path | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """The run folder to write; with ``out=None`` a temporary one, returned so the caller can clean it up."""
    if out is not None:
        return Path(out), None
    tmp = tempfile.TemporaryDirectory(prefix="robfilt-")
    return Path(tmp.name) / "run", tmp
