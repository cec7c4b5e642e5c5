"""Who an LM run measures: every model with the tokenizer its weights were trained with, on one device and dtype.

Models come as registry names (robfilt's own GPT, from the zoo, a checkpoint or untrained), ``hf:`` references
(Hugging Face causal LMs, :mod:`robustbench_filters.models.hf.load`), or objects: a robfilt ``CausalLM``, a
``transformers`` causal LM with its tokenizer, or an already wrapped
:class:`~robustbench_filters.models.hf.adapter.HFCausalLM`. Every one becomes an :class:`~.lm_rows.LMSubject`; Hugging Face
models are checked against their tokenizer. Every model carries lm-eval's rolling windows (``LMSubject.rolling``):
``--max-length`` inputs (default: a Hugging Face model's positions, at most 1024, or robfilt's block size) and
``--stride`` new tokens each.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..configs import model_label
from ..core.errors import RobfiltError
from ..core.surface import flag
from ..models.built import copied, tokenizer_of
from ..models.hf.rolling import Rolling, prefix_token
from ..models.ref import ModelKind, ModelRef
from .lm_rows import LMSubject


def _tokenizer_for(ref: str, size: str, checkpoint: str) -> Any:
    from ..data import load_tokenizer
    from ..models.checkpoint import zoo_path

    folder = zoo_path(ref, size) if checkpoint == "zoo" else Path(checkpoint)
    if folder.is_file():
        folder = folder.parent
    path = folder / "tokenizer.json"
    if not path.exists():
        raise RobfiltError(f"{folder} has no tokenizer.json; an LM checkpoint must be saved with its tokenizer.")
    return load_tokenizer(path)


def _is_hf(model: ModelRef | nn.Module) -> bool:
    from ..models.hf import is_hf_model
    from ..models.hf.adapter import HFCausalLM

    if isinstance(model, ModelRef):
        return model.kind is ModelKind.HF
    return isinstance(model, HFCausalLM) or is_hf_model(model)


def _hf_subject(
    model: ModelRef | nn.Module, index: int, tokenizer: Any, checkpoint: str | None, options: dict[str, Any]
) -> LMSubject:
    """An ``hf:`` reference, a ``transformers`` model or a wrapped one, with its tokenizer and lm-eval windows."""
    from ..models.hf.load import as_hf_lm, load_hf, precision_dtype
    from ..models.loading import DEFAULT_CHECKPOINTS

    window = {"max_length": options.get("max_length"), "stride": options.get("stride")}
    if isinstance(model, ModelRef):
        ref = model
        if checkpoint not in DEFAULT_CHECKPOINTS:
            raise RobfiltError(
                f"{flag('checkpoint')} does not apply to {ref.label}: its folder holds the weights; drop it."
            )
        hf = {k: options[k] for k in ("precision", "device") if k in options}
        module = load_hf(ref.target, label=ref.label, tokenizer=tokenizer, base_dir=options.get("base_dir"),
                         conversion=ref.args, **window, **hf)  # fmt: skip
        return LMSubject(ref.label, module, module.tokenizer, f"hf:{ref.target}", module.rolling)
    dtype = precision_dtype(options.get("precision", "fp32"), options.get("device", "cpu"))
    inner = getattr(model, "hf", model)
    if dtype != next(inner.parameters()).dtype:
        model = copied(model).to(dtype)  # never cast the caller's model
    label = model_label(model, index)
    module = as_hf_lm(model, tokenizer, **window, label=label)
    return LMSubject(label, module.eval(), module.tokenizer, "module", module.rolling)


def _own_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as given, or robfilt's tokenizer.json at a path."""
    if isinstance(tokenizer, str | Path):
        from ..data import load_tokenizer

        path = Path(tokenizer)
        return load_tokenizer(path / "tokenizer.json" if path.is_dir() else path)
    return tokenizer


def _in_precision(module: nn.Module, source: str, options: dict[str, Any]) -> nn.Module:
    """An own model in ``--precision`` (a caller's module is copied, never cast in place)."""
    if options.get("precision", "fp32") == "fp32":
        return module
    from ..models.hf.load import precision_dtype

    dtype = precision_dtype(options["precision"], options.get("device", "cpu"))
    return (copied(module) if source == "module" else module).to(dtype)


def _own_subject(label: str, module: nn.Module, tok: Any, source: str, options: dict[str, Any]) -> LMSubject:
    """One of robfilt's own LMs with its tokenizer, checked, and its windows."""
    emb = getattr(module, "tok_embed", None)
    if isinstance(emb, nn.Embedding) and emb.num_embeddings < tok.vocab_size:
        raise RobfiltError(
            f"{label}: the tokenizer has {tok.vocab_size} tokens but the model only {emb.num_embeddings}; use the "
            "tokenizer saved with the checkpoint."
        )
    limit = int(module.config.block_size)
    max_length, stride = options.get("max_length"), options.get("stride")
    if max_length is not None and max_length > limit:
        raise RobfiltError(f"{flag('max_length')} {max_length} is longer than {label}'s block size {limit}; pass less.")
    window = int(max_length or limit)
    return LMSubject(label, module, tok, source, Rolling(window, int(stride or window), prefix_token(tok)))


def load_lm_subjects(
    models: Sequence[ModelRef | nn.Module],
    data: str,
    size: str,
    checkpoint: str | None,
    seed: int,
    tokenizer: Any = None,
    base_dir: str | None = None,
    **hf_options: Any,
) -> list[LMSubject]:
    """Every model (parsed references, ``--model-arg`` merged in, or modules) with the tokenizer its weights were
    trained with.

    Precedence: ``tokenizer`` when given (an object or a path); a module's own ``tokenizer`` (attached by its
    checkpoint); the checkpoint folder's ``tokenizer.json``; for untrained models a character tokenizer of the data's
    train split. ``hf:`` models and ``transformers`` models take ``max_length``, ``stride``, ``precision`` and
    ``device`` from ``hf_options`` (:mod:`robustbench_filters.models.hf.load`).
    """
    from ..models import create_model
    from ..models.factory import wants_untrained
    from ..models.loading import load_model

    untrained = wants_untrained(checkpoint)
    own = [m for m in models if not _is_hf(m)]
    own_tok = _own_tokenizer(tokenizer) if own else None
    fallback = own_tok
    if fallback is None and (
        (untrained and any(isinstance(m, ModelRef) for m in own))
        or any(not isinstance(m, ModelRef) and tokenizer_of(m) is None for m in own)
    ):
        from ..data import CharTokenizer, load_text

        fallback = CharTokenizer.train(load_text(data, split="train"))
    options = {**hf_options, "base_dir": base_dir}
    out = []
    for i, m in enumerate(models):
        if _is_hf(m):
            out.append(_hf_subject(m, i, tokenizer, checkpoint, options))
            continue
        if not isinstance(m, ModelRef):
            label, module, tok, source = (
                model_label(m, i),
                m.eval(),
                own_tok or tokenizer_of(m) or fallback,
                "module",
            )
        elif untrained:
            torch.manual_seed(seed)
            label, module, tok, source = (
                m.label,
                create_model(m.target, size, checkpoint="none", vocab_size=fallback.vocab_size, **m.args),
                fallback,
                "untrained",
            )
        else:
            lm = load_model(m, size=size, checkpoint=checkpoint, seed=seed, base_dir=base_dir)
            tok = own_tok or lm.tokenizer or _tokenizer_for(lm.ref.target, size, str(checkpoint))
            label, module, source = lm.label, lm.module.eval(), lm.source
        module = _in_precision(module, source, hf_options)
        out.append(_own_subject(label, module, tok, source, hf_options))
    return out
