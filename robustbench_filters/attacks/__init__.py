"""Attacks and contamination: the image attack catalogue (torchattacks), the eps cascade, embedding attacks for
language models, word swap and image corruptions. Each kind of run is a measurement: :mod:`.image`, :mod:`.lm`,
:mod:`.corruption`; the public entry point is :func:`robustbench_filters.evaluate`.
"""

from ..core.names import parse_norm
from .catalogue import ATTACKS, AttackInfo, AttackParams, Norm, get_attack, register_attack

__all__ = ["ATTACKS", "AttackInfo", "AttackParams", "Norm", "get_attack", "parse_norm", "register_attack"]
