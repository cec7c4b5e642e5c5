"""Loading Hugging Face causal LMs: a ``save_pretrained`` folder or a hub id from the local cache, never the network.

``hf:DIR`` is a folder (relative paths start at ``base_dir``: the working directory, or a spec's folder). Anything
else that looks like a hub id (``gpt2``, ``org/name``) resolves from the local Hugging Face cache only
(``local_files_only=True``, i.e. ``HF_HUB_OFFLINE`` semantics); a model that is not cached is one line saying so.
Each model is checked before it is measured, and refused in one line when it

- is not a causal LM (its config has no ``AutoModelForCausalLM`` class, or its saved architecture is another head);
- keeps its weights only in pickle files (robfilt reads safetensors; ``torch.load`` of untrusted files is unsafe);
- comes with a tokenizer that does not fit it (:func:`.tokenizer.check_tokenizer`);
- is asked for a window longer than its positions (``--max-length``), or for bf16 on a device without it.

A folder written by robfilt's conversion (``config.json`` holds a ``robfilt`` record) is rebuilt: the stock model
from its config, the recorded BSA/GRC modules (:mod:`.convert`), then every tensor of its safetensors, strictly.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...core.errors import RobfiltError
from ...core.io import expand_user
from ...core.surface import flag
from . import is_hf_model, require_transformers
from .adapter import HFCausalLM, resolve_max_length
from .tokenizer import HFTokenizer, check_tokenizer, load_tokenizer_folder
from .trust import read_config_json, refuse_custom_code

log = logging.getLogger(__name__)

#: --precision (declared in configs.base.PRECISIONS) -> the weights' dtype
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def bf16_supported(device: str | torch.device) -> bool:
    """Whether ``device`` computes in bfloat16: CPUs do (torch's kernels); CUDA devices from Ampere on."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return dev.type == "cpu"


def precision_dtype(precision: str, device: str | torch.device = "cpu") -> torch.dtype:
    """The weights' dtype for ``--precision``, refused in one line where the device cannot compute it."""
    if precision not in DTYPES:
        raise RobfiltError(f"unknown {flag('precision')} {precision!r}; use fp32 or bf16.")
    if precision == "bf16" and not bf16_supported(device):
        raise RobfiltError(
            f"{flag('precision')} bf16 needs a device with bfloat16 support and {device} has none; use fp32."
        )
    return DTYPES[precision]


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """No ``transformers`` progress bars on stderr while robfilt loads or saves (robfilt draws its own)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def resolve_folder(target: str, base_dir: str | Path | None = None) -> Path:
    """The folder an ``hf:`` reference names: a local folder, else a hub id's snapshot in the local cache."""
    path = expand_user(target)
    if not path.is_absolute():
        path = Path(base_dir if base_dir is not None else Path.cwd()) / path
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise RobfiltError(f"hf:{target} is a file; give the folder save_pretrained wrote (config.json, weights).")
    if not _HUB_ID.match(target):
        raise RobfiltError(f"hf:{target}: folder {path} does not exist; give a folder written by save_pretrained.")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=target, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, a bad id or a broken cache: all mean "not available offline"
        raise RobfiltError(
            f"hf:{target} is neither a folder nor a model in the local Hugging Face cache, and robfilt never "
            f"downloads; fetch it once (huggingface-cli download {target}) or give a save_pretrained folder."
        ) from None


def is_causal_config(config: Any) -> bool:
    """The config has an ``AutoModelForCausalLM`` class, and its saved architecture (if any) is that head."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    expected = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    if expected is None:
        return False
    names = expected if isinstance(expected, list | tuple) else (expected,)
    saved = getattr(config, "architectures", None) or []
    return not saved or any(a in names for a in saved)


def load_config(folder: Path, label: str) -> Any:
    """The folder's ``config.json`` as a ``transformers`` config, refused unless it describes a causal LM that
    transformers builds without the folder's code."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if not (folder / "config.json").is_file():
        raise RobfiltError(f"{label}: {folder} has no config.json; give a folder written by model.save_pretrained.")
    data = read_config_json(folder, label)
    refuse_custom_code(data, folder, label, "config.json")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        raise RobfiltError(
            f"{label}: config.json in {folder} names model_type {model_type!r}, which transformers does not ship; "
            "give a folder written by save_pretrained of a built-in architecture (GPT-2, Llama, ...)."
        )
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RobfiltError(f"{label}: config.json in {folder} cannot be read ({first[:160]}).") from None
    if not is_causal_config(config):
        kind = ", ".join(getattr(config, "architectures", None) or [getattr(config, "model_type", "?")])
        raise RobfiltError(
            f"{label}: {folder} holds a {kind}, not a causal language model; hf: takes AutoModelForCausalLM folders "
            "(GPT-2, Llama, ...)."
        )
    return config


def _check_weights(folder: Path, label: str) -> None:
    if any((folder / name).is_file() for name in SAFETENSORS):
        return
    if any((folder / name).is_file() for name in PICKLES):
        raise RobfiltError(
            f"{label}: {folder} keeps its weights in pickle files (pytorch_model.bin), which robfilt never loads; "
            "re-save them with model.save_pretrained(DIR) (safetensors)."
        )
    raise RobfiltError(f"{label}: {folder} has no model.safetensors; give a folder written by model.save_pretrained.")


def _tokenizer(tokenizer: Any, folder: Path, base_dir: str | Path | None, label: str) -> HFTokenizer:
    """The tokenizer given (an object or a folder path), else the one saved with the model."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer
    if tokenizer is None or isinstance(tokenizer, str | Path):
        where = folder if tokenizer is None else expand_user(tokenizer)
        if not where.is_absolute():
            where = Path(base_dir if base_dir is not None else Path.cwd()) / where
        return load_tokenizer_folder(where, label)
    return HFTokenizer(tokenizer)


def load_hf(
    target: str,
    *,
    label: str | None = None,
    tokenizer: Any = None,
    max_length: int | None = None,
    stride: int | None = None,
    precision: str = "fp32",
    device: str = "cpu",
    base_dir: str | Path | None = None,
    conversion: Mapping[str, Any] | None = None,
    attention: str | None = None,
) -> HFCausalLM:
    """Load ``hf:<target>`` in eval mode, checked, as an :class:`HFCausalLM` (see the module docstring).

    ``conversion``: BSA/GRC settings to apply after loading (``variant=grc&grc_lambda=0`` in the reference; see
    :func:`.convert.conversion_settings`). ``attention="eager"`` loads the non-fused attention path.
    """
    require_transformers()
    from transformers import AutoModelForCausalLM

    from .convert import conversion_settings, convert, load_converted

    label = label or f"hf:{target}"
    folder = resolve_folder(target, base_dir)
    config = load_config(folder, label)
    _check_weights(folder, label)
    dtype = precision_dtype(precision, device)
    settings = conversion_settings(conversion, label) if conversion else None
    record = getattr(config, "robfilt", None)
    if record is not None and settings is not None:
        raise RobfiltError(
            f"{label} is already a robfilt {record.get('variant')} model; drop the conversion arguments."
        )
    with quiet_hub():
        if record is not None:
            model = load_converted(config, folder, label, attention)
        else:
            kwargs = {"attn_implementation": attention} if attention else {}
            try:
                model = AutoModelForCausalLM.from_pretrained(
                    str(folder), local_files_only=True, use_safetensors=True, trust_remote_code=False, **kwargs
                )
            except (OSError, ValueError, RuntimeError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise RobfiltError(f"{label}: the weights in {folder} cannot be loaded ({first[:200]}).") from None
    if settings is not None:
        convert(model, settings)
    model = model.to(dtype).eval()
    tok = _tokenizer(tokenizer, folder, base_dir, label)
    lm = wrap_model(model, tok, max_length=max_length, stride=stride, label=label)
    log.info("loaded %s from %s (%s, window %d)", label, folder, precision, lm.config.block_size)
    return lm


def wrap_model(
    model: nn.Module, tokenizer: Any, *, max_length: int | None = None, stride: int | None = None, label: str = "model"
) -> HFCausalLM:
    """A loaded ``transformers`` causal LM and its tokenizer, checked, as an :class:`HFCausalLM`."""
    if not is_hf_model(model) or not is_causal_config(model.config):
        raise RobfiltError(f"{label} is a {type(model).__name__}, not a transformers causal LM (AutoModelForCausalLM).")
    if tokenizer is None:
        raise RobfiltError(f"{label}: a transformers model needs its tokenizer; pass tokenizer=AutoTokenizer(...).")
    tok = tokenizer if isinstance(tokenizer, HFTokenizer) else HFTokenizer(tokenizer)
    rows = model.get_input_embeddings().num_embeddings
    check_tokenizer(tok, model.config, rows, label)
    window = resolve_max_length(model.config, max_length, label)
    return HFCausalLM(model, tok, window, stride)


def as_hf_lm(
    model: Any,
    tokenizer: Any = None,
    *,
    max_length: int | None = None,
    stride: int | None = None,
    label: str = "model",
) -> HFCausalLM:
    """An :class:`HFCausalLM` from an ``hf:`` reference, a wrapped model (re-windowed if asked) or a model object."""
    if isinstance(model, str):
        from ..ref import ModelKind, parse_model_ref

        ref = parse_model_ref(model)
        if ref.kind is not ModelKind.HF:
            raise RobfiltError(f"{model!r} is not an hf: reference; write hf:<folder>.")
        return load_hf(ref.target, label=ref.label, tokenizer=tokenizer, max_length=max_length, stride=stride,
                       conversion=ref.args)  # fmt: skip
    if isinstance(model, HFCausalLM):
        if max_length is None and stride is None and tokenizer is None:
            return model
        return wrap_model(model.hf, tokenizer or model.tokenizer, max_length=max_length or model.config.block_size,
                          stride=stride, label=label)  # fmt: skip
    return wrap_model(model, tokenizer, max_length=max_length, stride=stride, label=label)


__all__ = [
    "DTYPES",
    "as_hf_lm",
    "bf16_supported",
    "is_causal_config",
    "load_config",
    "load_hf",
    "precision_dtype",
    "resolve_folder",
    "wrap_model",
]
