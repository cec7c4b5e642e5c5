"""Attacks and contamination: one ``evaluate`` for both model families.

``evaluate`` dispatches on the model family: image models go through the eps-cascade engine
(:mod:`.engine`), language models through the embedding-space and word-swap engine (:mod:`.lm_engine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..errors import RobfiltError
from . import corruptions, wordswap  # noqa: F401  (register the contamination attacks)
from .catalogue import ATTACKS, AttackInfo, Norm, get_attack, parse_norm, register_attack
from .engine import DEFAULT_EPS, EvalResult, cascade, summarize_rows

__all__ = [
    "ATTACKS",
    "AttackInfo",
    "DEFAULT_EPS",
    "EvalResult",
    "Norm",
    "cascade",
    "evaluate",
    "get_attack",
    "register_attack",
    "summarize_rows",
]


def _family(model: str | nn.Module) -> str:
    from ..models.resolve import validate_model_ref

    if isinstance(model, str):
        fam = validate_model_ref(model)
        return "lm" if fam == "lm" else "image"
    spec = getattr(model, "robfilt_spec", None)
    return "lm" if spec is not None and spec.family.value == "lm" else "image"


def evaluate(
    models: Sequence[str | nn.Module],
    attacks: Sequence[str] = ("pgd",),
    eps: Sequence[float] | None = None,
    data: str | None = None,
    n_examples: int | None = None,
    seed: int = 0,
    out: Any = None,
    **kwargs: Any,
) -> EvalResult:
    """Evaluate models under attacks on the same examples; returns per-example rows and a checked summary.

    Image models: see :func:`robustbench_filters.attacks.engine.evaluate`. Language models: see
    :func:`robustbench_filters.attacks.lm_engine.evaluate_lm`. All models of one call must share a family.
    """
    if kwargs.get("norm") is not None:
        kwargs["norm"] = parse_norm(kwargs["norm"]).value
    families = {_family(m) for m in models} if models else {"image"}
    if len(families) > 1:
        raise RobfiltError("cannot mix image and language models in one run; run them separately.")
    family = families.pop()
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and (
        family == "lm" or any(a == "corruption" or a.startswith("corruption:") for a in attacks)
    ):
        raise RobfiltError("language-model and corruption runs are not sharded yet; launch them without torchrun.")
    if family == "lm":
        try:
            from .lm_engine import evaluate_lm
        except ModuleNotFoundError:  # pragma: no cover - until the LM engine lands
            raise RobfiltError("language-model attacks are not available in this build.") from None
        return evaluate_lm(
            models, attacks, eps, data=data or "austen", n_examples=n_examples, seed=seed, out=out, **kwargs
        )
    if kwargs.get("rates") is not None:
        raise RobfiltError("--rate applies to the text attack wordswap on language models; image models use --eps.")
    kwargs.pop("rates", None)
    if kwargs.pop("replacement", None) not in (None, "AAA"):
        raise RobfiltError("--replacement applies to the text attack wordswap on language models.")
    if any(a == "corruption" or a.startswith("corruption:") for a in attacks):
        if eps is not None:
            raise RobfiltError("--eps does not apply to corruption (it uses severities 1-5); drop --eps.")
        from .corruption_engine import evaluate_corruptions

        return evaluate_corruptions(
            models,
            attacks,
            data=data or "fashion-mnist",
            n_examples=256 if n_examples is None else n_examples,
            seed=seed,
            out=out,
            **kwargs,
        )
    from .engine import evaluate as evaluate_images

    return evaluate_images(
        models,
        attacks,
        eps,
        data=data or "fashion-mnist",
        n_examples=256 if n_examples is None else n_examples,
        seed=seed,
        out=out,
        **kwargs,
    )
