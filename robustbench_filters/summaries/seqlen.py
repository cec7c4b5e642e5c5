"""The summaries of the sequence-length studies: the synthetic attention-layer study (kind ``seqlen``, written by
:func:`robustbench_filters.lipschitz.seqlen_run.sequence_length_run` and the study) and the study's language-model piece (kind
``study-seqlen``). Neither records sanity checks; their rows are the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Summary
from .record import Record


@dataclass(frozen=True, kw_only=True)
class SeqlenSummary(Summary):
    kind: str
    n_values: list[int]


@dataclass(frozen=True, kw_only=True)
class SeqlenModel(Record):
    """A model's mean gain per sequence length N (keys: N, an int when written, a string when read back) and the
    least-squares slope of log mean gain on log N."""

    mean_by_n: dict[Any, float]
    slope: float


@dataclass(frozen=True, kw_only=True)
class StudySeqlenSummary(Summary):
    kind: str
    definition: str
    models: dict[str, SeqlenModel]


__all__ = ["SeqlenModel", "SeqlenSummary", "StudySeqlenSummary"]
