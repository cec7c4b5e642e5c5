"""The study: do Bilateral Self-Attention and the boosting residual make transformers more robust?

``run_study(plan, out)`` trains (or reuses) the 4 DeiT and 4 LM variants for several seeds with a short recipe,
measures them with the toolkit's own engines (attacks, corruptions, contamination, Lipschitz bounds, sequence
length), judges each of the paper's claims from the paired per-seed differences, and writes ``out/README.md``.
CLI: ``robfilt study``.
"""

from .claims import CLAIMS, ClaimResult, ClaimSpec, Comparison, Verdict, evaluate_claims, judge
from .plan import Piece, StudyPlan, full_plan, pieces, quick_plan
from .runner import StudyResult, collect, run_study, write_up
from .scores import StudyScores

__all__ = [
    "CLAIMS",
    "ClaimResult",
    "ClaimSpec",
    "Comparison",
    "Piece",
    "StudyPlan",
    "StudyResult",
    "StudyScores",
    "Verdict",
    "collect",
    "evaluate_claims",
    "full_plan",
    "judge",
    "pieces",
    "quick_plan",
    "run_study",
    "write_up",
]
