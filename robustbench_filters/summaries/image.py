"""The summary of an image attack run (kind ``attack``, family ``image``): clean and robust accuracy per model.

Written by :meth:`robustbench_filters.attacks.image.ImageAttack.summarise`; the field order is the writer's key
order. The compute ledger (``cost``, ``broken_by``, ``convergence``) and the recorded attention maps are kept as
written: reports recompute the ledger from the rows, and the maps are arrays, not fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import RobfiltError
from .base import Check, Checked, ChecksSummary, RunHead, Summary
from .record import Record, optional, present


@dataclass(frozen=True, kw_only=True)
class Accuracy(Record):
    """Accuracy with its 95% Wilson interval over ``n`` examples, and the compute ledger of those rows."""

    acc: float
    lo: float
    hi: float
    n: int
    correct: int
    cost: dict[str, Any] = optional()
    broken_by: dict[str, int] = optional()
    convergence: dict[str, Any] = optional()


@dataclass(frozen=True, kw_only=True)
class RobustAccuracy(Record):
    """Robust accuracy under one attack at one budget, and the budget it ran with (format 3): ``steps``, the
    iterations of its longest run (Square: queries), and ``step_size``, its fixed step (None: the attack sets its
    own, APGD's schedule)."""

    attack: str
    eps: float
    acc: float
    lo: float
    hi: float
    n: int
    correct: int
    strength: str | None = optional()
    steps: int | None = optional()
    step_size: float | None = optional()
    cost: dict[str, Any] = optional()
    broken_by: dict[str, int] = optional()
    convergence: dict[str, Any] = optional()


@dataclass(frozen=True, kw_only=True)
class ImageModelResults(Record):
    clean: Accuracy
    robust: list[RobustAccuracy]
    cost: dict[str, dict[str, float]] = optional()  # per attack, over the whole eps grid


@dataclass(frozen=True)
class RecordedAttention:
    """The CLS attention maps an image attack run recorded, computed from the weights it measured (for reports)."""

    example_id: int | None  # the test example the maps were computed on
    image: list[list[float]] | None  # that image (mean over channels), stored when at most 64 x 64
    maps: dict[str, list[list[list[float]]]]  # model -> per layer, the (grid_h, grid_w) CLS attention


@dataclass(frozen=True, kw_only=True)
class ImageAttackSummary(Checked, RunHead, Summary):
    attacks: list[str]
    eps: list[float]
    norm: str
    steps: int | None  # --steps as given; None: each attack's own (format 2 wrote "each attack's default")
    step_size: float | None  # --step-size as given; None: each attack's own (format 2 wrote "0.15*eps")
    early_stop: Any = optional()
    precision: dict[str, str] = optional()
    models: dict[str, ImageModelResults]
    checks: list[Check]
    checks_summary: ChecksSummary
    attention: dict[str, Any] = optional()  # model -> CLS maps, plus "_image" and "_example_id"

    def recorded_attention(self) -> RecordedAttention:
        """The recorded CLS attention maps (none for models without readable attention, or runs from before)."""
        raw = present(self.attention, {})
        maps = {}
        for key, value in raw.items():
            if key.startswith("_"):  # "_example_id", "_image": what the maps were computed on
                continue
            if not isinstance(value, dict) or "maps" not in value:
                raise RobfiltError(f"the recorded attention of {key} in a run of {self.data} holds no maps; re-run it.")
            maps[key] = value["maps"]
        return RecordedAttention(raw.get("_example_id"), raw.get("_image"), maps)


__all__ = ["Accuracy", "ImageAttackSummary", "ImageModelResults", "RecordedAttention", "RobustAccuracy"]
