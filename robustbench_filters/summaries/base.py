"""What every run summary shares: the format version, the run's fingerprint, and the sanity-check records.

A summary's ``format_version`` is the run-folder format it was written in; a reader takes the versions it knows
(:data:`READABLE`) and refuses any other in one line (:func:`.kinds.read_summary`) rather than guessing at keys that
may mean something else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .record import Record, renamed

VERSION = 3  # the run-folder format (robustbench_filters.runs.folder.FORMAT_VERSION) summaries are written in
#: every format version this robfilt reads (a format-2 summary records prose where format 3 records values)
READABLE: tuple[int, ...] = (2, 3)

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Check(Record):
    """One sanity check of a run: ``status`` is ``pass``, ``warn`` or ``fail`` and ``detail`` says, in one line, what
    was seen. Measurements make them (:mod:`robustbench_filters.checks`), summaries record them, the command line and
    ``benchmark`` show them: one type from the check to the file. A failing check is shown as failing, never dropped.
    """

    name: str
    model: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status != FAIL


@dataclass(frozen=True, kw_only=True)
class ChecksSummary(Record):
    """The counts of a run's sanity checks by status; ``passed`` is False when any failed."""

    passed: bool
    passes: int = renamed("pass")
    warn: int
    fail: int

    @classmethod
    def of(cls, checks: Sequence[Check]) -> ChecksSummary:
        counts = {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL)}
        return cls(passed=counts[FAIL] == 0, passes=counts[PASS], warn=counts[WARN], fail=counts[FAIL])


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """Base of the typed summaries: the two keys :class:`robustbench_filters.runs.folder.RunWriter` adds first.

    A measurement constructs its summary (``fingerprint`` still empty); the run writer stamps the run's fingerprint
    on it when it writes the folder. Reading ``summary.json`` requires both keys (a default is not an absent key:
    only :func:`.record.optional` fields may be missing)."""

    format_version: int = VERSION
    fingerprint: str = ""

    def sanity_checks(self) -> list[Check]:
        """The run's sanity checks (the sequence-length studies record none)."""
        return []


@dataclass(frozen=True, kw_only=True)
class RunHead:
    """The keys an image run's summary starts with, after the writer's two: what kind of run it is, on which data,
    how many examples and which seed (:meth:`robustbench_filters.attacks.image_models.ImageModelsMeasurement.summary_head`)."""

    kind: str
    family: str
    data: str
    n_examples: int | None
    seed: int


class Checked:
    """Mixin of the summaries that record sanity checks (every measurement's but the sequence-length studies')."""

    checks: list[Check]
    checks_summary: ChecksSummary

    def sanity_checks(self) -> list[Check]:
        return self.checks


__all__ = ["FAIL", "PASS", "READABLE", "VERSION", "WARN", "Check", "Checked", "ChecksSummary", "RunHead", "Summary"]
