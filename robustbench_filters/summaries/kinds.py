"""The registry of run kinds: one table, :data:`RUN_KINDS`, says for every kind of run its name (as manifests
record it), the family that tells kinds of one name apart, its typed summary and the report family its runs belong
to. The run writer and every reader pick a run's summary type and report family from it, and the study and the gate
name kinds with it. A run config names its kind (``KIND``); which measurement runs a config is the API's plain
mapping (:data:`robustbench_filters.api.evaluate.MEASUREMENTS`), beside the code that runs measurements. Adding a
kind of run means a row here, the kind's config with its ``KIND``, its measurement in that mapping and its summary.

Which summary a run folder holds and which report family it belongs to follow from its manifest's ``kind`` and
``family`` (image | lm, recorded for attack runs) and nothing else: no guessing from summary keys or row columns.
A run of a kind this robfilt does not know, an attack run without a family, or a summary of another format
version is refused in one line that names the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import RobfiltError, RunStateError
from ..core.surface import switched
from .base import READABLE, VERSION, Summary
from .certify import CertifySummary
from .corruption import CorruptionSummary
from .image import ImageAttackSummary
from .lipschitz import LipschitzSummary
from .lm import LMAttackSummary
from .seqlen import SeqlenSummary, StudySeqlenSummary
from .verified import VerifiedSummary

# run kinds, as manifests record them
ATTACK, CORRUPTION, LIPSCHITZ, CERTIFY, VERIFIED, SEQLEN, STUDY_SEQLEN = (
    "attack", "corruption", "lipschitz", "certify", "verified", "seqlen", "study-seqlen",
)  # fmt: skip
# families of attack runs, and the report families (what report and gate group runs by)
IMAGE, LM = "image", "lm"


@dataclass(frozen=True)
class RunKind:
    """One kind of run (see the module docstring)."""

    name: str
    family: str | None  # attack runs: the family their manifest records (image | lm); None for every other kind
    summary: type[Summary]
    report_family: str | None  # what reports and the gate group runs by; None: the study's own piece


# fmt: off
RUN_KINDS: tuple[RunKind, ...] = (
    RunKind(ATTACK, IMAGE, ImageAttackSummary, IMAGE),
    RunKind(ATTACK, LM, LMAttackSummary, LM),
    RunKind(CORRUPTION, None, CorruptionSummary, IMAGE),
    RunKind(LIPSCHITZ, None, LipschitzSummary, LIPSCHITZ),
    RunKind(CERTIFY, None, CertifySummary, CERTIFY),
    RunKind(VERIFIED, None, VerifiedSummary, VERIFIED),
    RunKind(SEQLEN, None, SeqlenSummary, SEQLEN),
    RunKind(STUDY_SEQLEN, None, StudySeqlenSummary, None),
)
# fmt: on
KINDS: tuple[str, ...] = tuple(dict.fromkeys(k.name for k in RUN_KINDS))
_BY_KEY: dict[tuple[str, str | None], RunKind] = {(k.name, k.family): k for k in RUN_KINDS}


def kind_of(cls: type[Summary]) -> RunKind:
    """The kind of run whose summary class ``cls`` is."""
    for k in RUN_KINDS:
        if cls is k.summary:
            return k
    raise RunStateError(f"{cls.__name__} is in no row of the registry of run kinds (summaries/kinds.py); add it.")


def _key(kind: Any, family: Any, where: str) -> tuple[str, str | None]:
    """(kind, family) as the tables above index it; one line for an unknown kind or an attack run's family."""
    if not isinstance(kind, str) or not kind:
        raise RobfiltError(f"{where} records no run kind; re-run it with this robfilt.")
    if kind not in KINDS:
        raise RobfiltError(
            f"{where} is a {kind!r} run, a kind this robfilt does not know (it reads {', '.join(KINDS)}): upgrade "
            "robfilt or re-run it."
        )
    if kind != ATTACK:
        return kind, None
    if (kind, family) not in _BY_KEY:
        raise RobfiltError(
            f"{where} is an attack run of family {family!r}, not image or lm; re-run it with this robfilt."
        )
    return kind, family


def run_kind(kind: Any, family: Any, where: str) -> RunKind:
    """The registry row of a run of ``kind`` (and ``family``, for attack runs); ``where`` names the run in errors."""
    return _BY_KEY[_key(kind, family, where)]


def report_family(kind: Any, family: Any, where: str) -> str:
    """image | lm | lipschitz | seqlen | certify | verified: the report family of a run of ``kind`` (and ``family``, for
    attack runs). ``where`` names the run in errors (``run folder runs/a``)."""
    row = run_kind(kind, family, where)
    if row.report_family is None:
        raise RobfiltError(f"{where} is the study's {kind!r} piece, which reports and gates do not read; robfilt "
                           "study writes it up.")  # fmt: skip
    return row.report_family


def summary_type(kind: Any, family: Any, where: str) -> type[Summary]:
    """The typed summary class of a run of ``kind`` (and ``family``, for attack runs)."""
    return run_kind(kind, family, where).summary


def read_summary(doc: Any, kind: Any, family: Any, where: str) -> Summary:
    """The typed summary of a run from its ``summary.json`` document ``doc``; ``where`` names the run in errors
    (``run folder runs/a``, or ``baseline b/summary.json`` for a summary file on its own). A summary of an earlier
    format this robfilt still reads (:data:`.base.READABLE`) reads as it was written (format 2 holds prose where
    format 3 holds the budgets used), so it writes back byte for byte."""
    cls = summary_type(kind, family, where)
    where = f"summary.json of {where}"
    if not isinstance(doc, dict):
        raise RobfiltError(f"{where} is not a JSON object; re-run it with {switched('overwrite')}.")
    version = doc.get("format_version")
    if version not in READABLE:
        fix = "upgrade robfilt or re-run it" if isinstance(version, int) and version > VERSION else "re-run it"
        known = " or ".join(str(v) for v in READABLE)
        raise RobfiltError(f"{where} has format version {version}; this robfilt reads {known}: {fix}.")
    recorded = doc.get("kind", kind)
    if recorded != kind:
        raise RobfiltError(f"{where} is of a {recorded!r} run, its manifest of a {kind!r} run; re-run it.")
    return cls.from_dict(doc, where)


def check_summary_type(summary: Summary, kind: str, family: str | None, out: Path) -> None:
    """A run of ``kind`` writes the summary type of its kind (the registry's): another is a bug in its measurement,
    refused before any file is written."""
    expected = summary_type(kind, family, f"run folder {out}")
    if type(summary) is not expected:
        raise RunStateError(
            f"the {kind} run writing {out} made a {type(summary).__name__}, not a {expected.__name__}; this is a bug."
        )
