"""Model variants: timm DeiT and a GPT-style LM, each with BSA, GRC, or both; and the user's own models.

Importing this package registers the DeiT variants in timm's registry (``timm.create_model("deit_tiny_bsa_patch16_224")``).
"""

from .bsa import BilateralAttention, PosKernel, attention, attention_probs, attention_weights, bsa_layer
from .checkpoint import load_checkpoint, save_checkpoint, zoo_path
from .config import DeiTConfig, FilterConfig, LMConfig
from .deit import set_fused_attn
from .factory import create_model
from .grc import BlockStack, boost
from .lm import CausalLM
from .normalize import attach_normalizer
from .ref import ModelKind, ModelRef, apply_model_args, parse_model_args, parse_model_ref, split_model_list
from .registry import MODEL_NAMES, SIZES, ModelSpec, list_models, resolve_spec
from .resolve import LoadedModel, load_model, validate_model_ref
from .timm_registry import REGISTERED as TIMM_NAMES
from .timm_registry import timm_name
from .weights import load_weights, read_state_dict

__all__ = [
    "BilateralAttention",
    "BlockStack",
    "CausalLM",
    "DeiTConfig",
    "FilterConfig",
    "LMConfig",
    "LoadedModel",
    "ModelKind",
    "ModelRef",
    "TIMM_NAMES",
    "MODEL_NAMES",
    "ModelSpec",
    "PosKernel",
    "SIZES",
    "apply_model_args",
    "attach_normalizer",
    "attention",
    "attention_probs",
    "attention_weights",
    "boost",
    "bsa_layer",
    "create_model",
    "list_models",
    "load_checkpoint",
    "load_model",
    "load_weights",
    "parse_model_args",
    "parse_model_ref",
    "read_state_dict",
    "resolve_spec",
    "save_checkpoint",
    "set_fused_attn",
    "split_model_list",
    "timm_name",
    "validate_model_ref",
    "zoo_path",
]
