"""Lipschitz estimation: empirical lower bounds, certified upper bounds, per-layer profiles.

Lower bounds (per example, rigorous): dense Jacobian + SVD (``exact``), jvp/vjp power iteration (``power``) and
pair-ratio ascent (``ratio``). Upper bounds (certified): exact per-layer constants composed with the residual
and boosting (GRC) rules, globally and on a ball around each input, plus the certified radius that follows.
The formulas and their sources are in notes/lipschitz.md; each module's docstring names the section it uses.
"""

from ..names import Method, parse_method
from .attention_bound import AttentionBound, attention_lipschitz, castin_bound, dp_head_bound
from .certify import BoundTrace, certified_radius, margins, trace_bounds
from .constants import (
    GELU_LIPSCHITZ,
    GELU_TANH_LIPSCHITZ,
    SOFTMAX_LIPSCHITZ,
    activation_lipschitz,
    layernorm_lipschitz,
    layernorm_output_radius,
    normalizer_lipschitz,
)
from .coverage import check_certifiable
from .gap import GAP_COLUMNS, gap_rows, gap_summary
from .jacobian import PowerResult, jacobian_dense, jacobian_norm_exact, jacobian_norm_power
from .layers import block_forward
from .local_bound import LocalBounds, LocalOptions, local_bounds
from .profile import layer_profile
from .ratio import pair_ratio_ascent
from .run import COLUMNS, DEFINITIONS, Lipschitz, LipschitzResult, estimate_lipschitz, summarize
from .seqlen import sequence_length_study
from .spectral import conv_lipschitz, linear_lipschitz, spectral_norm
from .target import Target, make_target, model_family, prepare_model

__all__ = [
    "COLUMNS",
    "GAP_COLUMNS",
    "LocalBounds",
    "LocalOptions",
    "check_certifiable",
    "gap_rows",
    "gap_summary",
    "local_bounds",
    "DEFINITIONS",
    "GELU_LIPSCHITZ",
    "GELU_TANH_LIPSCHITZ",
    "SOFTMAX_LIPSCHITZ",
    "AttentionBound",
    "BoundTrace",
    "Lipschitz",
    "LipschitzResult",
    "Method",
    "PowerResult",
    "Target",
    "activation_lipschitz",
    "attention_lipschitz",
    "block_forward",
    "castin_bound",
    "certified_radius",
    "conv_lipschitz",
    "dp_head_bound",
    "estimate_lipschitz",
    "jacobian_dense",
    "jacobian_norm_exact",
    "jacobian_norm_power",
    "layer_profile",
    "layernorm_lipschitz",
    "layernorm_output_radius",
    "linear_lipschitz",
    "make_target",
    "model_family",
    "margins",
    "normalizer_lipschitz",
    "pair_ratio_ascent",
    "parse_method",
    "prepare_model",
    "sequence_length_study",
    "spectral_norm",
    "summarize",
    "trace_bounds",
]
