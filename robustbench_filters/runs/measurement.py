"""The contract between the runner and a measurement (image attacks, LM attacks, corruptions, Lipschitz, ...).

A measurement knows *what* to compute; the runner (:mod:`.runner`) knows *how a run goes*: selection, fingerprint,
folder, resume, sharding, merge, checks, finish. The runner only talks to this interface and never imports a
measurement module, so measurements can import the runner's helpers without an import cycle.

Lifecycle, on every rank: ``prepare`` (load models and data, select examples through the context) ->
``describe`` + ``plan`` (identical on every rank) -> ``measure`` for this rank's units -> on rank 0 only
``model_checks``, ``row_checks`` and ``summarise`` on the merged rows.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn

from ..checks import Check
from ..core.errors import RobfiltError
from ..summaries import Summary
from .units import Unit, ids_digest, select_examples

#: ``tick(k)`` or ``tick(k, detail)``: ``k`` more work steps done, and where the unit is now (shown with the model).
Tick = Callable[..., None]


@dataclass
class UnitOutput:
    """What ``measure`` may return instead of bare rows: the rows and the unit's adversarial examples (tensors and
    metadata in the layout of :mod:`.adversarial`), which the runner stores beside the unit's part."""

    rows: pd.DataFrame
    adversarial: tuple[dict[str, torch.Tensor], dict[str, str]] | None = None


@dataclass
class PrepareContext:
    """What ``prepare`` gets from the runner: the device, the seed, and the one way to select examples.

    Every selection is recorded (its ids' hash and, via :meth:`record_data`, a digest of the selected data),
    and the record becomes part of the run's fingerprint: ``--resume`` with other data is refused.
    """

    device: torch.device
    seed: int
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)

    def select(self, total: int, n: int, *, name: str = "examples", ordered: bool = True) -> torch.Tensor:
        ids = select_examples(total, n, self.seed, ordered=ordered)
        self.examples.setdefault(name, {})["ids"] = ids_digest(ids)
        return ids

    def use(self, total: int, ids: Sequence[int], *, name: str = "examples") -> torch.Tensor:
        """Exactly these example ids (in this order), recorded like a selection: for measurements whose examples
        are fixed elsewhere (the zoo cards certify a stratified prefix of the test split)."""
        chosen = torch.as_tensor([int(i) for i in ids], dtype=torch.long)
        if not len(chosen) or len(set(chosen.tolist())) != len(chosen) or int(chosen.min()) < 0:
            raise RobfiltError(f"example ids must be distinct and non-negative, got {len(chosen)} of them.")
        if int(chosen.max()) >= total:
            raise RobfiltError(f"example id {int(chosen.max())} is out of range: the data has {total} examples.")
        self.examples.setdefault(name, {})["ids"] = ids_digest(chosen)
        return chosen

    def record_data(self, name: str, digest: str) -> None:
        self.examples.setdefault(name, {})["data"] = digest


class Measurement(ABC):
    """One kind of measurement. Subclasses fill the hooks; see the module docstring for the order of calls."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @property
    def kind(self) -> str:
        """The run's kind, as the manifest records it: its config's (a row of the registry of run kinds,
        summaries/kinds.py)."""
        return str(self.config.KIND)

    @property
    def family(self) -> str | None:
        """Recorded in the manifest (``image``/``lm``), or None when a run mixes families."""
        fam = getattr(self.config, "FAMILY", None)
        return fam.value if fam is not None else None

    @abstractmethod
    def prepare(self, ctx: PrepareContext) -> None:
        """Load models and data and select the examples; raise RobfiltError for anything that cannot be measured."""

    @property
    @abstractmethod
    def labels(self) -> list[str]:
        """The model labels, in model-index order (rows use them)."""

    @abstractmethod
    def modules(self) -> list[nn.Module]:
        """The models, in model-index order: the runner hashes their parameters and buffers."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Everything (besides weights and selected data) that the rows depend on, as JSON-able values."""

    @abstractmethod
    def plan(self) -> list[Unit]:
        """Every unit of the run, in the order ranks shard them (identical on every rank)."""

    def work(self, unit: Unit) -> int:
        """How many progress steps ``measure`` reports for ``unit`` (through its ``tick``)."""
        return 1

    def cost(self, unit: Unit) -> float:
        """A rough relative cost of ``unit``: worker processes take the most expensive units first, so none is
        left with a long one at the end (the order never changes a row). Default: its progress steps."""
        return float(self.work(unit))

    @abstractmethod
    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame | UnitOutput:
        """The rows of one unit (with its adversarial examples, when the run saves them); call ``tick(k)`` as work
        completes."""

    def model_checks(self, model: int) -> list[Check]:
        """Sanity checks that probe a model (rank 0 only, after this rank's units)."""
        return []

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        """Sanity checks on the merged rows of one model."""
        return []

    @abstractmethod
    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> Summary:
        """The typed summary of the run's kind, recomputed from the merged rows (the run writer stamps its
        fingerprint on it)."""

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A context held while units run (e.g. frozen weights, TF32 off); nothing by default."""
        yield
