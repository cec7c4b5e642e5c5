"""The study's measurements: one function per piece kind, each writing one finished run folder.

Every measurement builds the same typed config ``robfilt attack`` / ``robfilt lipschitz`` build and runs it through
the shared runner on the study's checkpoints, with ``resume=True``: a piece killed half-way continues from its last
finished unit.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ..configs import RunConfig
from ..configs.base import WEIGHTS_TAG
from ..core.errors import RobfiltError
from ..core.progress import ProgressHook
from ..lipschitz.seqlen_run import SeqlenConfig, sequence_length_run
from ..models import load_checkpoint
from ..models.built import tokenizer_of
from ..runs.runner import run
from . import plan as P
from .checkpoints import CheckpointInfo
from .plan import StudyPlan, digest
from .seqlen import SeqlenLM, SeqlenLMConfig

log = logging.getLogger(__name__)


#: piece kind -> the plan's template of its run config
TEMPLATES: dict[str, str] = {
    P.VISION_ATTACK: "vision_attack",
    P.VISION_CORRUPTION: "vision_corruption",
    P.LM_ATTACK: "lm_attack",
    P.LIPSCHITZ_VISION: "lipschitz_vision",
    P.LIPSCHITZ_LM: "lipschitz_lm",
    P.CERTIFY_VISION: "certify",
    P.LIPSCHITZ_CROWN: "lipschitz_crown",
}


def settings(plan: StudyPlan, kind: str) -> dict:
    """The plan fields a piece's numbers depend on (with the checkpoints' weights, its input fingerprint)."""
    common = {"kind": kind, "size": plan.size, "eval_seed": plan.eval_seed}
    if kind in TEMPLATES:
        image = kind in P.VISION_KINDS
        return {
            **common, "data": plan.vision_data if image else plan.lm_data, "models": family_models(plan, kind),
            "run": P.template_settings(getattr(plan, TEMPLATES[kind])),
        }  # fmt: skip
    if kind == P.SEQLEN_LM:
        return {**common, "data": plan.lm_data, "models": plan.lm_models, "seqlen": plan.to_dict()["seqlen"]}
    if kind == P.SEQLEN_LAYER:
        sq = plan.to_dict()["seqlen"]
        return {"kind": kind, "layer_ns": sq["layer_ns"], "layer_trials": sq["layer_trials"]}
    raise ValueError(f"unknown piece kind {kind!r}")


def family_models(plan: StudyPlan, kind: str) -> tuple[str, ...]:
    if kind == P.LIPSCHITZ_CROWN:
        return P.crown_models(plan)
    if kind in P.VISION_KINDS:
        return plan.vision_models
    if kind in (P.LM_ATTACK, P.LIPSCHITZ_LM, P.SEQLEN_LM):
        return plan.lm_models
    return ()


def _load(ckpts: Mapping[str, CheckpointInfo], names: tuple[str, ...], size: str) -> list[nn.Module]:
    return [load_checkpoint(ckpts[n].path, name=n, size=size) for n in names]


def _tag(ckpts: Mapping[str, CheckpointInfo], names: tuple[str, ...]) -> str:
    """Recorded as the engines' ``checkpoint`` field, so their own run fingerprints change with the weights."""
    return checkpoint_tag({n: ckpts[n].weights_sha256 for n in names})


def checkpoint_tag(weights_sha256: Mapping[str, str]) -> str:
    """The ``checkpoint`` field a measurement over checkpoints with these file hashes records."""
    return WEIGHTS_TAG + digest(dict(weights_sha256))


def _shared_tokenizer(models: list[nn.Module], text: str):
    """All study LMs are trained with a char tokenizer on the same text; refuse to compare them otherwise."""
    toks = [tokenizer_of(m) for m in models]
    if any(t is None for t in toks):
        raise RobfiltError("an LM checkpoint has no tokenizer.json; retrain it with robfilt train.")
    sample = text[:2000]
    ref = toks[0].encode(sample)
    if any(t.encode(sample) != ref or t.vocab_size != toks[0].vocab_size for t in toks[1:]):
        raise RobfiltError("the study LMs use different tokenizers; train them with the same --tokenizer and data.")
    return toks[0]


def piece_options(piece: P.Piece, plan: StudyPlan) -> tuple[type[RunConfig], dict[str, Any]]:
    """The run config class of a measurement piece and its options from the plan (all but the models, their
    checkpoint tag and the LM tokenizer): what the piece's run folder must record (see :mod:`.integrity`)."""
    kind, names = piece.kind, family_models(plan, piece.kind)
    if kind not in TEMPLATES:
        raise ValueError(f"piece kind {kind!r} has no run config")
    template = getattr(plan, TEMPLATES[kind])
    values = {
        f.name: getattr(template, f.name) for f in dataclasses.fields(template) if f.init and f.name not in P.FILLED
    }
    image = kind in P.VISION_KINDS
    values |= {"seed": plan.eval_seed, "size": plan.size, "data": plan.vision_data if image else plan.lm_data}
    if kind == P.VISION_CORRUPTION:
        values["baseline"] = names[0]
    return type(template), values


def piece_config(piece: P.Piece, plan: StudyPlan, ckpts: Mapping[str, CheckpointInfo]) -> RunConfig:
    """The run config of a measurement piece: the plan's template filled (dataclasses.replace) with the study's
    checkpoints (loaded as modules), the family's data and the evaluation seed."""
    _, values = piece_options(piece, plan)
    names = family_models(plan, piece.kind)
    models = tuple(_load(ckpts, names, plan.size))
    filled: dict[str, Any] = {**values, "models": models, "checkpoint": _tag(ckpts, names)}
    if piece.kind == P.LM_ATTACK:
        from ..data import load_text

        filled["tokenizer"] = _shared_tokenizer(list(models), load_text(plan.lm_data, split="test"))
    return dataclasses.replace(getattr(plan, TEMPLATES[piece.kind]), **filled)


def run_measurement(
    piece: P.Piece,
    plan: StudyPlan,
    ckpts: Mapping[str, CheckpointInfo],
    folder: Path,
    progress: ProgressHook | None = None,
) -> None:
    """Make one measurement piece; ``folder`` ends as a finished run folder."""
    from ..api.evaluate import run_config

    kind, names = piece.kind, family_models(plan, piece.kind)
    if kind == P.SEQLEN_LM:
        _seqlen_lm(plan, _load(ckpts, names, plan.size), names, folder, _tag(ckpts, names))
    elif kind == P.SEQLEN_LAYER:
        _seqlen_layer(plan, piece.seed, folder)
    else:
        run_config(piece_config(piece, plan, ckpts), out=folder, resume=True, progress=progress)


def _seqlen_lm(plan: StudyPlan, models: list[nn.Module], names: tuple[str, ...], folder: Path, tag: str) -> None:
    sq = plan.seqlen
    config = SeqlenLMConfig(
        data=plan.lm_data, ns=tuple(sq.lm_ns), windows=sq.lm_windows, noise=sq.lm_noise, seed=plan.eval_seed,
        settings={**settings(plan, P.SEQLEN_LM), "checkpoint": tag},
    )  # fmt: skip
    run(SeqlenLM(config, models, names, _shared_tokenizer), out=folder, resume=True)


def _seqlen_layer(plan: StudyPlan, seed: int, folder: Path) -> None:
    """The synthetic one-layer study, seeded by the training seed (it draws the layer's weights)."""
    sq = plan.seqlen
    sequence_length_run(folder, SeqlenConfig(ns=tuple(sq.layer_ns), trials=sq.layer_trials, seed=seed), resume=True)
