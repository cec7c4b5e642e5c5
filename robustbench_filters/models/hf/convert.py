"""Convert a Hugging Face causal LM to BSA and/or GRC, record the conversion in its config, rebuild it on load.

Variants: ``bsa``, ``grc``, ``bsa-grc`` (this project's formulation, docs/design.md). Which models:

- GPT-2 (``model_type == "gpt2"``): BSA and GRC (:mod:`.gpt2`);
- Llama-style (:data:`.llama.LLAMA_STYLE`): GRC only; BSA is refused in one line (rotary positions have no
  additive cross terms to remove; see :mod:`.llama`);
- anything else: refused in one line.

Settings are :class:`~robustbench_filters.models.config.FilterConfig` fields with the LM's defaults (``grc_lambda``
0.1 fixed, ``grc_sublayers`` all, ``pos_kernel`` gaussian with ``bsa_sigma`` (2, 64)). They are given as reference
arguments (``hf:DIR?variant=grc&grc_lambda=0.05``) or through ``robfilt train --variant``.

The conversion is stored as ``config.json``'s ``robfilt`` record (format, variant and every setting), next to the
stock architecture. Loading such a folder (:func:`load_converted`) builds the stock model from its config, applies
the recorded conversion (new modules, registered by code, never unpickled) and loads every tensor of the folder's
safetensors strictly: a missing or unexpected tensor is an error, except for tied weights. A plain
``transformers`` loader would drop the BSA/GRC tensors and compute another function; load such folders with robfilt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...core.errors import RobfiltError, suggest
from ...core.textfiles import read_text
from ..config import FilterConfig, LMConfig
from .llama import LLAMA_STYLE

VARIANTS: tuple[str, ...] = ("bsa", "grc", "bsa-grc")
SETTINGS: tuple[str, ...] = ("grc_lambda", "grc_learnable", "grc_sublayers", "pos_kernel", "bsa_sigma")
CONVERSION_KEYS: tuple[str, ...] = ("variant", *SETTINGS)
RECORD_FORMAT = 1
ROTARY_REFUSAL = (
    "BSA is defined for additive position embeddings (GPT-2): it removes the content-position cross terms; "
    "{model_type} uses rotary positions, which have no such terms, so convert it with --variant grc."
)


def parse_variant(variant: str) -> tuple[bool, bool]:
    """``bsa`` / ``grc`` / ``bsa-grc`` -> (bsa, grc)."""
    name = str(variant).strip().lower()
    if name not in VARIANTS:
        raise RobfiltError(f"unknown variant {variant!r}.{suggest(name, VARIANTS)} Use one of: {', '.join(VARIANTS)}.")
    return "bsa" in name, "grc" in name


def conversion_settings(args: Mapping[str, Any], label: str = "model") -> FilterConfig:
    """Validated settings from ``variant`` plus optional :data:`SETTINGS` (defaults: robfilt's LM)."""
    unknown = sorted(set(args) - set(CONVERSION_KEYS))
    if unknown:
        raise RobfiltError(
            f"{label}: hf: references take only conversion arguments ({', '.join(CONVERSION_KEYS)}), not "
            f"{', '.join(unknown)}.{suggest(unknown[0], CONVERSION_KEYS)}"
        )
    if "variant" not in args:
        raise RobfiltError(f"{label}: conversion arguments need variant=bsa, grc or bsa-grc.")
    bsa, grc = parse_variant(args["variant"])
    base = LMConfig()
    values = {k: args.get(k, getattr(base, k)) for k in SETTINGS}
    if isinstance(values["bsa_sigma"], list):
        values["bsa_sigma"] = tuple(values["bsa_sigma"])
    settings = FilterConfig(bsa=bsa, grc=grc, **values)
    settings.validate()
    return settings


def variant_name(settings: FilterConfig) -> str:
    return "-".join(n for n, on in (("bsa", settings.bsa), ("grc", settings.grc)) if on)


def record_of(settings: FilterConfig) -> dict[str, Any]:
    """The ``robfilt`` record saved in ``config.json``."""
    return {
        "format": RECORD_FORMAT,
        "variant": variant_name(settings),
        **{k: list(v) if isinstance(v, tuple) else v for k, v in ((k, getattr(settings, k)) for k in SETTINGS)},
    }


def settings_from_record(record: Any, label: str) -> FilterConfig:
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise RobfiltError(
            f"{label}: config.json has a robfilt record this version cannot read ({str(record)[:80]}); "
            "upgrade robustbench-filters."
        )
    return conversion_settings({k: v for k, v in record.items() if k != "format"}, label)


def convert(model: nn.Module, settings: FilterConfig) -> nn.Module:
    """Convert ``model`` in place (GPT-2: BSA and/or GRC; Llama-style: GRC) and record it in ``model.config``."""
    config = model.config
    model_type = getattr(config, "model_type", "?")
    if getattr(config, "robfilt", None) is not None:
        raise RobfiltError(f"this {model_type} model is already a robfilt {config.robfilt.get('variant')} model.")
    if model_type == "gpt2":
        from .gpt2 import convert_gpt2

        convert_gpt2(model, settings)
    elif model_type in LLAMA_STYLE:
        if settings.bsa:
            raise RobfiltError(ROTARY_REFUSAL.format(model_type=model_type))
        from .llama import convert_llama_grc

        convert_llama_grc(model, settings)
    else:
        raise RobfiltError(
            f"robfilt converts GPT-2 (bsa, grc) and Llama-style models ({', '.join(LLAMA_STYLE)}: grc), "
            f"not {model_type}."
        )
    config.robfilt = record_of(settings)
    return model


def _read_safetensors(folder: Path, label: str) -> dict[str, torch.Tensor]:
    """Every tensor of a folder's ``model.safetensors`` (or its shards, via the index)."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            files = sorted(set(json.loads(read_text(index))["weight_map"].values()))
            state: dict[str, torch.Tensor] = {}
            for name in files:
                state.update(load_file(str(folder / name)))
            return state
        return load_file(str(folder / "model.safetensors"))
    except (OSError, ValueError, KeyError) as exc:
        raise RobfiltError(f"{label}: the safetensors in {folder} cannot be read ({exc}).") from None


def load_state_strict(model: nn.Module, state: Mapping[str, torch.Tensor], label: str) -> None:
    """Load ``state``; every tensor must be used and every parameter given, except weights tied to a given one."""
    result = model.load_state_dict(dict(state), strict=False)
    if result.unexpected_keys:
        raise RobfiltError(
            f"{label}: the checkpoint has tensors the {model.config.robfilt.get('variant')} model does not "
            f"({', '.join(result.unexpected_keys[:4])}); it was saved by another model or version."
        )
    own = model.state_dict(keep_vars=True)
    loaded = {own[k].data_ptr() for k in state if k in own}
    missing = [k for k in result.missing_keys if own[k].data_ptr() not in loaded]
    if missing:
        raise RobfiltError(f"{label}: the checkpoint lacks {', '.join(missing[:4])}; it is incomplete.")


def load_converted(config: Any, folder: Path, label: str, attention: str | None = None) -> nn.Module:
    """Rebuild a folder written after a robfilt conversion: stock model, recorded conversion, strict weights."""
    from transformers import AutoModelForCausalLM

    settings = settings_from_record(config.robfilt, label)
    del config.robfilt  # convert() records it again
    kwargs = {"attn_implementation": attention} if attention else {}
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=False, **kwargs)
    convert(model, settings)
    load_state_strict(model, _read_safetensors(folder, label), label)
    return model.eval()


__all__ = [
    "CONVERSION_KEYS",
    "VARIANTS",
    "conversion_settings",
    "convert",
    "load_converted",
    "load_state_strict",
    "parse_variant",
    "record_of",
    "variant_name",
]
