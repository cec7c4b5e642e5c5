"""Model variants: timm DeiT and a GPT-style LM, each with BSA, GRC, or both."""

from .bsa import BilateralAttention, PosKernel, attention, attention_probs, attention_weights, bsa_layer
from .checkpoint import load_checkpoint, save_checkpoint, zoo_path
from .config import DeiTConfig, FilterConfig, LMConfig
from .deit import set_fused_attn
from .factory import create_model
from .grc import BlockStack, boost
from .lm import CausalLM
from .registry import MODEL_NAMES, SIZES, ModelSpec, list_models, resolve_spec

__all__ = [
    "BilateralAttention",
    "BlockStack",
    "CausalLM",
    "DeiTConfig",
    "FilterConfig",
    "LMConfig",
    "MODEL_NAMES",
    "ModelSpec",
    "PosKernel",
    "SIZES",
    "attention",
    "attention_probs",
    "attention_weights",
    "boost",
    "bsa_layer",
    "create_model",
    "list_models",
    "load_checkpoint",
    "resolve_spec",
    "save_checkpoint",
    "set_fused_attn",
    "zoo_path",
]
