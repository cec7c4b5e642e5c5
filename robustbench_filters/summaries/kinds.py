"""Which summary a run folder holds and which report family it belongs to, from its manifest's ``kind`` and
``family`` (image | lm, recorded for attack runs) and nothing else: no guessing from summary keys or row columns.

A run of a kind this robfilt does not know, an attack run without a family, or a summary of another format
version is refused in one line that names the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.errors import RobfiltError, RunStateError
from .base import VERSION, Summary
from .certify import CertifySummary
from .corruption import CorruptionSummary
from .image import ImageAttackSummary
from .lipschitz import LipschitzSummary
from .lm import LMAttackSummary
from .seqlen import SeqlenSummary, StudySeqlenSummary

# run kinds, as manifests record them
ATTACK, CORRUPTION, LIPSCHITZ, CERTIFY, SEQLEN, STUDY_SEQLEN = (
    "attack", "corruption", "lipschitz", "certify", "seqlen", "study-seqlen",
)  # fmt: skip
# families of attack runs, and the report families (what report and gate group runs by)
IMAGE, LM = "image", "lm"

_SUMMARIES: dict[tuple[str, str | None], type[Summary]] = {
    (ATTACK, IMAGE): ImageAttackSummary,
    (ATTACK, LM): LMAttackSummary,
    (CORRUPTION, None): CorruptionSummary,
    (LIPSCHITZ, None): LipschitzSummary,
    (CERTIFY, None): CertifySummary,
    (SEQLEN, None): SeqlenSummary,
    (STUDY_SEQLEN, None): StudySeqlenSummary,
}
KINDS: tuple[str, ...] = tuple(dict.fromkeys(k for k, _ in _SUMMARIES))
# (kind, family) -> report family; a study-seqlen run is the study's own and has none
_REPORT_FAMILIES: dict[tuple[str, str | None], str] = {
    (ATTACK, IMAGE): IMAGE,
    (ATTACK, LM): LM,
    (CORRUPTION, None): IMAGE,
    (LIPSCHITZ, None): LIPSCHITZ,
    (CERTIFY, None): CERTIFY,
    (SEQLEN, None): SEQLEN,
}


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
    if family not in (IMAGE, LM):
        raise RobfiltError(
            f"{where} is an attack run of family {family!r}, not image or lm; re-run it with this robfilt."
        )
    return kind, family


def report_family(kind: Any, family: Any, where: str) -> str:
    """image | lm | lipschitz | seqlen | certify: the report family of a run of ``kind`` (and ``family``, for
    attack runs). ``where`` names the run in errors (``run folder runs/a``)."""
    key = _key(kind, family, where)
    if key not in _REPORT_FAMILIES:
        raise RobfiltError(f"{where} is the study's {kind!r} piece, which reports and gates do not read; robfilt "
                           "study writes it up.")  # fmt: skip
    return _REPORT_FAMILIES[key]


def summary_type(kind: Any, family: Any, where: str) -> type[Summary]:
    """The typed summary class of a run of ``kind`` (and ``family``, for attack runs)."""
    return _SUMMARIES[_key(kind, family, where)]


def read_summary(doc: Any, kind: Any, family: Any, where: str) -> Summary:
    """The typed summary of a run from its ``summary.json`` document ``doc``; ``where`` names the run in errors
    (``run folder runs/a``, or ``baseline b/summary.json`` for a summary file on its own)."""
    cls = summary_type(kind, family, where)
    where = f"summary.json of {where}"
    if not isinstance(doc, dict):
        raise RobfiltError(f"{where} is not a JSON object; re-run it with --overwrite.")
    version = doc.get("format_version")
    if version != VERSION:
        fix = "upgrade robfilt or re-run it" if isinstance(version, int) and version > VERSION else "re-run it"
        raise RobfiltError(f"{where} has format version {version}; this robfilt reads {VERSION}: {fix}.")
    recorded = doc.get("kind", kind)
    if recorded != kind:
        raise RobfiltError(f"{where} is of a {recorded!r} run, its manifest of a {kind!r} run; re-run it.")
    return cls.from_dict(doc, where)


def written_summary(summary: Summary, kind: str, family: str | None, out: Path) -> dict[str, Any]:
    """The document a writer is about to write to ``out`` for ``summary``: it must be the summary type of the run's
    kind and read back as itself, key for key, so the file is exactly what the typed summary says. A mismatch is a
    bug in the measurement (or in its typed summary)."""
    doc = summary.to_dict()
    try:
        expected = summary_type(kind, family, f"run folder {out}")
        if type(summary) is not expected:
            raise RobfiltError(f"it is a {type(summary).__name__}, not a {expected.__name__}")
        typed = read_summary(doc, kind, family, f"run folder {out}")
    except RobfiltError as exc:
        raise RunStateError(f"the {kind} summary written to {out} does not match its typed summary ({exc}); "
                            "this is a bug.") from None  # fmt: skip
    if _dumps(typed.to_dict()) != _dumps(doc):
        raise RunStateError(f"the {kind} summary written to {out} does not read back key for key; this is a bug.")
    return doc


def _dumps(doc: Any) -> str:
    return json.dumps(doc, default=str)


__all__ = [
    "ATTACK",
    "CERTIFY",
    "CORRUPTION",
    "IMAGE",
    "KINDS",
    "LIPSCHITZ",
    "LM",
    "SEQLEN",
    "STUDY_SEQLEN",
    "read_summary",
    "report_family",
    "summary_type",
    "written_summary",
]
