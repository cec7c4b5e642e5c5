"""Checkpoints: safetensors weights plus a JSON card. Never pickle.

A checkpoint is a folder holding ``model.safetensors`` and ``card.json`` (and, for LMs, the tokenizer). The
card records the name, size, full config, the BSA/GRC parameters, library versions, and room for the
training recipe and metrics. Loading verifies the weights' SHA-256 against the card, rebuilds the model from
the card's config and asserts that no key is missing or unexpected.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from torch import nn

from ..core.errors import CheckpointError
from ..core.family import Family
from ..core.io import atomic_write_text, sha256_file
from ..core.surface import given, switched
from ..core.versions import library_versions
from .built import built_of, with_card
from .config import DeiTConfig, LMConfig, config_from_dict
from .registry import ModelSpec, build_from_spec, parse_name
from .zoo_index import CARD, WEIGHTS
from .zoo_index import ZOO_NOISE_SIGMAS as ZOO_NOISE_SIGMAS  # re-exported: the noise levels of the zoo
from .zoo_index import noise_tag as noise_tag  # re-exported: how a noise level names a zoo variant
from .zoo_index import zoo_path as zoo_path  # re-exported: where a zoo variant's folder is

log = logging.getLogger(__name__)

CARD_FORMAT = "robfilt-checkpoint"
CARD_SCHEMA = 1
TOKENIZER = "tokenizer.json"
PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"}


def is_zoo_ref(checkpoint: str | Path | None) -> bool:
    """True for ``"zoo"`` and its variants ``"zoo:<tag>"``."""
    return checkpoint is not None and (str(checkpoint) == "zoo" or str(checkpoint).startswith("zoo:"))


def zoo_ref_noise(checkpoint: str | Path) -> float | None:
    """The noise level a zoo reference names: None for ``"zoo"``, 0.25 for ``"zoo:sigma0.25"``."""
    ref = str(checkpoint)
    if ref == "zoo":
        return None
    tag = ref.removeprefix("zoo:")
    try:
        value = float(tag.removeprefix("sigma")) if tag.startswith("sigma") else float("nan")
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise CheckpointError(
            f"unknown zoo variant {ref!r}; use 'zoo' or 'zoo:sigma<S>' for the noise-trained weights, e.g. 'zoo:sigma0.25'."
        )
    return value


def filter_params(model: nn.Module, spec: ModelSpec) -> dict[str, Any]:
    """The BSA/GRC parameters as numbers, for the card and ``models show``."""
    from .bsa import BilateralAttention
    from .grc import BlockStack

    out: dict[str, Any] = {}
    sigmas = [
        m.sigma.detach().tolist()
        for m in model.modules()
        if isinstance(m, BilateralAttention) and hasattr(m, "sigma_theta")
    ]
    if spec.bsa:
        out["bsa"] = {"pos_kernel": spec.config.pos_kernel, "sigma_per_layer": sigmas or None}
    stacks = [m for m in model.modules() if isinstance(m, BlockStack) and m.grc]
    if stacks:
        out["grc"] = {
            "lambda_per_layer": stacks[0].lambdas().detach().tolist(),
            "learnable": spec.config.grc_learnable,
            "sublayers": spec.config.grc_sublayers,
        }
    return out


def save_checkpoint(
    model: nn.Module,
    directory: str | Path,
    *,
    recipe: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    spec: ModelSpec | None = None,
) -> Path:
    """Write ``model.safetensors`` and ``card.json`` into ``directory`` (atomically, weights first).

    ``spec``: what the model is (default: what robfilt built it as); a module robfilt did not build needs it."""
    built = built_of(model)
    if spec is None and built is None:
        raise CheckpointError("save_checkpoint needs the model's spec: pass spec=, or build it with create_model.")
    spec = spec or built.spec  # type: ignore[union-attr]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / WEIGHTS
    tmp = directory / (WEIGHTS + ".tmp")
    safetensors.torch.save_model(model, str(tmp))
    os.chmod(tmp, 0o644)
    tmp.replace(weights)
    card = {
        "format": CARD_FORMAT,
        "schema_version": CARD_SCHEMA,
        "name": spec.name,
        "family": spec.family.value,
        "size": spec.size,
        "config": spec.config_dict(),
        "filters": filter_params(model, spec),
        "num_params": sum(p.numel() for p in model.parameters()),
        "weights_sha256": sha256_file(weights),
        "versions": library_versions(),
        "recipe": recipe,
        "metrics": metrics or {},
        **(extra or {}),
    }
    atomic_write_text(directory / CARD, json.dumps(card, indent=2, sort_keys=False) + "\n")
    return directory


def _resolve_paths(path: str | Path, name: str | None, size: str) -> tuple[Path, Path]:
    if is_zoo_ref(path):
        if name is None:
            raise CheckpointError(f"checkpoint={str(path)!r} needs a model name.")
        noise = zoo_ref_noise(path)
        folder = zoo_path(name, size, noise)
        if not (folder / WEIGHTS).exists():
            extra = f" --noise-sigma {noise:g}" if noise else ""
            raise CheckpointError(
                f"no {path} weights for {name} ({size}); train them with "
                f"`robfilt train --model {name} --size {size}{extra} --out {folder}`, pass "
                f"{given('checkpoint', 'PATH')}, or {given('checkpoint', 'none')} for untrained weights."
            )
        return folder / WEIGHTS, folder / CARD
    path = Path(path)
    refuse_non_utf8(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a folder with {WEIGHTS} and {CARD}.")
    if path.is_dir():
        return path / WEIGHTS, path / CARD
    return path, path.parent / CARD


def refuse_non_utf8(path: Path) -> None:
    """safetensors opens files by UTF-8 path only: a checkpoint under a path that is not UTF-8 is refused by name
    (before its card is read), instead of failing halfway as if the file were truncated."""
    from ..core.io import non_utf8_path

    if non_utf8_path(path):
        raise CheckpointError(f"checkpoint {path} is not a UTF-8 path, which safetensors cannot open; rename it.")


def _is_pickle(weights: Path) -> bool:
    with open(weights, "rb") as f:
        head = f.read(9)
    if weights.suffix in PICKLE_SUFFIXES:
        return True
    # A safetensors file starts with its header length (little-endian u64, padded to a multiple of 8) and then
    # the JSON header '{'. The length's first byte is 0x80 (the pickle protocol marker) for about 1 file in 32,
    # so recognise safetensors first; neither a zip (torch.save) nor a raw pickle has '{' at byte 8.
    if head[8:9] == b"{":
        return False
    return head[:2] == b"PK" or head[:1] == b"\x80"


def _load_pickle_state(weights: Path, name: str | None, size: str, **overrides: Any) -> nn.Module:
    """Opt-in path for torch files: a state dict only, read with ``weights_only=True`` (no code execution)."""
    from .registry import resolve_spec

    if name is None:
        raise CheckpointError("loading a torch file needs the model name (--model) to build the architecture.")
    model = build_from_spec(resolve_spec(name, size, **overrides))
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for bad files
        raise CheckpointError(
            f"cannot read torch file {weights} with weights_only=True ({type(exc).__name__})."
        ) from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{weights} does not hold a state dict.")
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{weights} does not fit {name}: missing {sorted(result.missing_keys)[:5]}, "
            f"unexpected {sorted(result.unexpected_keys)[:5]}."
        )
    return model.eval()


def _refuse_pickle(weights: Path) -> None:
    if _is_pickle(weights):
        raise CheckpointError(
            f"{weights} is a pickle/torch file; robfilt loads only safetensors (pickles can run code). "
            f"Convert it with safetensors.torch.save_model, or opt in with {switched('allow_pickle')} (loaded weights_only)."
        )


def read_card(card_path: Path) -> dict[str, Any]:
    """Read and validate a card (format, schema, required fields)."""
    if not card_path.exists():
        raise CheckpointError(f"checkpoint card {card_path} is missing; every checkpoint needs its {CARD}.")
    try:
        card = json.loads(card_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint card {card_path} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})."
        ) from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise CheckpointError(f"{card_path} is not a robfilt checkpoint card (format != {CARD_FORMAT!r}).")
    if card.get("schema_version") != CARD_SCHEMA:
        raise CheckpointError(
            f"{card_path} has card schema {card.get('schema_version')}; this robfilt reads {CARD_SCHEMA}."
        )
    for key in ("name", "family", "size", "config", "weights_sha256"):
        if key not in card:
            raise CheckpointError(f"checkpoint card {card_path} lacks the field {key!r}.")
    return card


def spec_from_card(card: dict[str, Any]) -> ModelSpec:
    family, bsa, grc = parse_name(card["name"])
    cls = DeiTConfig if family is Family.IMAGE else LMConfig
    config = config_from_dict(cls, card["config"])
    if config.bsa != bsa or config.grc != grc:
        raise CheckpointError(
            f"checkpoint card says {card['name']} but its config has bsa={config.bsa}, grc={config.grc}."
        )
    return ModelSpec(name=card["name"], family=family, size=card["size"], config=config)


def load_checkpoint(
    path: str | Path,
    name: str | None = None,
    size: str = "micro",
    allow_pickle: bool = False,
    **overrides: Any,
) -> nn.Module:
    """Load a checkpoint (or ``"zoo"``, or ``"zoo:sigma0.25"`` for the noise-trained zoo) into a freshly built
    model; returns it in eval mode.

    ``name`` (if given) must match the card, so a checkpoint is never loaded into the wrong variant.
    Only runtime switches (``fused_attn``) may be overridden on load; architecture comes from the card.
    """
    weights, card_path = _resolve_paths(path, name, size)
    if not weights.exists():
        raise CheckpointError(f"checkpoint weights {weights} are missing.")
    if allow_pickle and _is_pickle(weights):
        return _load_pickle_state(weights, name, size, **overrides)
    _refuse_pickle(weights)
    card = read_card(card_path)
    if name is not None and card["name"] != name:
        raise CheckpointError(
            f"checkpoint {weights.parent} is for {card['name']!r}, not {name!r}; pass the matching --model or checkpoint."
        )
    if name is not None and not is_zoo_ref(path) and card["size"] != size:
        raise CheckpointError(
            f"checkpoint {weights.parent} is for size {card['size']!r}, not {size!r}; pass {given('size', str(card['size']))}."
        )
    if sha256_file(weights) != card["weights_sha256"]:
        raise CheckpointError(f"checkpoint {weights} is corrupted or truncated (SHA-256 differs from its card).")
    spec = spec_from_card(card)
    allowed = {"fused_attn"}
    bad = sorted(set(k for k, v in overrides.items() if v is not None) - allowed)
    if bad:
        raise CheckpointError(f"cannot override {bad} when loading a checkpoint; only {sorted(allowed)} may change.")
    if overrides.get("fused_attn") is not None:
        spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, fused_attn=overrides["fused_attn"]))
    model = build_from_spec(spec)
    try:
        missing, unexpected = safetensors.torch.load_model(model, str(weights), strict=False)
    except (safetensors.SafetensorError, RuntimeError, OSError) as exc:
        raise CheckpointError(
            f"cannot read checkpoint {weights} ({str(exc).splitlines()[0]}); it may be truncated."
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {weights} does not fit {spec.name}: missing keys {sorted(missing)[:5]}, "
            f"unexpected keys {sorted(unexpected)[:5]}."
        )
    tokenizer = None
    tokenizer_path = weights.parent / TOKENIZER
    if tokenizer_path.exists():
        from ..data.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path)  # LMs: the tokenizer the weights were trained with
    with_card(model, card, tokenizer)
    log.info("loaded %s (%s) from %s", spec.name, spec.size, weights)
    return model.eval()
