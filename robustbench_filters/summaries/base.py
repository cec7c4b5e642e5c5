"""What every run summary shares: the format version, the run's fingerprint, and the sanity-check records.

A summary's ``format_version`` is the run-folder format it was written in; a reader refuses any other version in
one line (:func:`.kinds.read_summary`) rather than guessing at keys that may mean something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .record import Record, renamed

VERSION = 2  # the run-folder format (robustbench_filters.runs.folder.FORMAT_VERSION) summaries are written in


@dataclass(frozen=True, kw_only=True)
class CheckRecord(Record):
    """One sanity check as a run recorded it (:class:`robustbench_filters.checks.Check`)."""

    name: str
    model: str
    status: str  # pass | warn | fail
    detail: str


@dataclass(frozen=True, kw_only=True)
class ChecksSummary(Record):
    """The counts of a run's sanity checks by status; ``passed`` is False when any failed."""

    passed: bool
    passes: int = renamed("pass")
    warn: int
    fail: int


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """Base of the typed summaries: the two keys :class:`robustbench_filters.runs.folder.RunWriter` adds first."""

    KIND: ClassVar[str]

    format_version: int
    fingerprint: str

    def sanity_checks(self) -> list[CheckRecord]:
        """The run's sanity checks (the sequence-length studies record none)."""
        return []


class Checked:
    """Mixin of the summaries that record sanity checks (every measurement's but the sequence-length studies')."""

    checks: list[CheckRecord]
    checks_summary: ChecksSummary

    def sanity_checks(self) -> list[CheckRecord]:
        return self.checks


__all__ = ["VERSION", "CheckRecord", "Checked", "ChecksSummary", "Summary"]
