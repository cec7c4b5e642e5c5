"""What every run summary shares: the format version, the run's fingerprint, and the sanity-check records.

A summary's ``format_version`` is the run-folder format it was written in; a reader refuses any other version in
one line (:func:`.kinds.read_summary`) rather than guessing at keys that may mean something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from ..core.errors import RobfiltError, RunStateError
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
    """Base of the typed summaries: the two keys :class:`robustbench_filters.runs.folder.RunWriter` adds first.

    A measurement builds its summary with :meth:`build` (``fingerprint`` still empty); the run writer stamps the
    run's fingerprint on it when it writes the folder. Reading ``summary.json`` requires both keys (a default is
    not an absent key: only :func:`.record.optional` fields may be missing)."""

    format_version: int = VERSION
    fingerprint: str = ""

    @classmethod
    def build(cls, doc: dict[str, Any]) -> Self:
        """The typed summary of ``doc``, laid out as the measurement writes it (every key but the two the run
        writer adds). A key the type does not declare, or a missing one, is a bug in the measurement."""
        try:
            return cls.from_dict({"format_version": VERSION, "fingerprint": "", **doc}, f"the {cls.__name__}")
        except RobfiltError as exc:
            raise RunStateError(f"{exc} (a measurement built it; this is a bug)") from None

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
