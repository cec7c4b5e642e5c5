"""CLS attention maps as image attack runs recorded them (their summary's ``attention``), ready for the figure.

The maps are computed when the run is made (:mod:`robustbench_filters.models.attention_maps`), from the weights
the run measured, so a report never loads a model and never substitutes other weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..runs.folder import Run
from ..summaries.image import ImageAttackSummary, RecordedAttention


@dataclass
class AttentionMaps:
    """``maps``: (layers, grid_h, grid_w) CLS attention to each patch (rows sum to 1 over patches + prefix)."""

    model: str
    maps: np.ndarray
    source: str  # the run the maps come from, for the figure footer


def recorded_attention(run: Run) -> RecordedAttention | None:
    """The maps an image attack run recorded; None for other runs (corruption runs record none)."""
    summary = run.summary
    return summary.recorded_attention() if isinstance(summary, ImageAttackSummary) else None


def maps_from_run(run: Run, models: Sequence[str]) -> tuple[list[AttentionMaps], np.ndarray | None]:
    """The recorded maps of ``models`` (those present) and the image they were computed on, if recorded."""
    recorded = recorded_attention(run)
    if recorded is None:
        return [], None
    maps = [
        AttentionMaps(m, np.asarray(recorded.maps[m], dtype=float), f"{m}: {run.run_id}")
        for m in models
        if m in recorded.maps
    ]
    image = recorded.image
    return maps, (np.asarray(image, dtype=float) if image is not None else None)
