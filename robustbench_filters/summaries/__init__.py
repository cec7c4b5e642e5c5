"""Typed run summaries: one dataclass per kind of ``summary.json``, read strictly and written back key for key.

A run folder's manifest says what it holds (``kind``, and ``family`` for attack runs); :func:`read_summary` picks
the summary's class from that alone. Readers (report, gate, study) use attributes, so a key a writer renames fails
loudly instead of reading as ``None``. This package sits low: it imports only :mod:`robustbench_filters.core.errors`.

- :mod:`.record`: the typed-record machinery (strict reading, key-for-key writing);
- :mod:`.base`: the format version, the sanity-check records, :class:`Summary`;
- :mod:`.image`, :mod:`.lm`, :mod:`.corruption`, :mod:`.lipschitz`, :mod:`.certify`, :mod:`.verified`, :mod:`.seqlen`: one
  per kind;
- :mod:`.kinds`: the registry of run kinds: name, family, summary type, report family, config and measurement.
"""

from .base import VERSION, Check, ChecksSummary, Summary
from .certify import CertifySummary
from .corruption import CorruptionSummary
from .image import ImageAttackSummary
from .kinds import (
    ATTACK,
    CERTIFY,
    CORRUPTION,
    IMAGE,
    KINDS,
    LIPSCHITZ,
    LM,
    RUN_KINDS,
    SEQLEN,
    STUDY_SEQLEN,
    VERIFIED,
    RunKind,
    check_summary_type,
    kind_of,
    read_summary,
    report_family,
    run_kind,
    summary_type,
)
from .lipschitz import LipschitzSummary
from .lm import LMAttackSummary
from .seqlen import SeqlenSummary, StudySeqlenSummary
from .verified import VerifiedAt, VerifiedSummary

__all__ = [
    "ATTACK",
    "CERTIFY",
    "CORRUPTION",
    "IMAGE",
    "KINDS",
    "LIPSCHITZ",
    "LM",
    "RUN_KINDS",
    "SEQLEN",
    "STUDY_SEQLEN",
    "VERIFIED",
    "VERSION",
    "CertifySummary",
    "Check",
    "ChecksSummary",
    "CorruptionSummary",
    "ImageAttackSummary",
    "LMAttackSummary",
    "LipschitzSummary",
    "RunKind",
    "SeqlenSummary",
    "VerifiedAt",
    "VerifiedSummary",
    "StudySeqlenSummary",
    "Summary",
    "kind_of",
    "read_summary",
    "report_family",
    "run_kind",
    "summary_type",
    "check_summary_type",
]
