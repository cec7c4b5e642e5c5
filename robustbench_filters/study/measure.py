"""The study's measurements: one function per piece kind, each writing one finished run folder.

Every measurement builds the same typed config ``robfilt attack`` / ``robfilt lipschitz`` build and runs it through
the shared runner on the study's checkpoints, with ``resume=True``: a piece killed half-way continues from its last
finished unit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..configs import (
    CertifyConfig,
    CorruptionConfig,
    ImageAttackConfig,
    LipschitzConfig,
    LMAttackConfig,
    RunConfig,
)
from ..errors import RobfiltError
from ..models import load_checkpoint
from ..progress import ProgressHook
from ..runs.folder import RunWriter
from ..runs.runner import run
from . import plan as P
from .checkpoints import CheckpointInfo
from .plan import StudyPlan, digest
from .seqlen import lm_seqlen_rows, summarize_seqlen

log = logging.getLogger(__name__)

SEQLEN_LM_KIND = "study-seqlen"  # not "seqlen": the reporter reads that kind as the synthetic layer study
SEQLEN_LAYER_KIND = "seqlen"


def settings(plan: StudyPlan, kind: str) -> dict:
    """The plan fields a piece's numbers depend on (with the checkpoints' weights, its input fingerprint)."""
    common = {"kind": kind, "size": plan.size, "eval_seed": plan.eval_seed}
    if kind in (P.VISION_ATTACK, P.VISION_CORRUPTION):
        v = plan.to_dict()["vision"]
        keys = (
            ("corruption_examples", "severities")
            if kind == P.VISION_CORRUPTION
            else ("n_examples", "attacks", "eps", "pgd_steps")
        )
        return {**common, "data": plan.vision_data, "models": plan.vision_models, "vision": {k: v[k] for k in keys}}
    if kind == P.LM_ATTACK:
        return {**common, "data": plan.lm_data, "models": plan.lm_models, "lm": plan.to_dict()["lm"]}
    if kind == P.LIPSCHITZ_VISION:
        return {**common, "data": plan.vision_data, "models": plan.vision_models, "lip": plan.to_dict()["lipschitz"]}
    if kind == P.CERTIFY_VISION:
        return {**common, "data": plan.vision_data, "models": plan.vision_models, "certify": plan.to_dict()["certify"]}
    if kind == P.LIPSCHITZ_LM:
        return {**common, "data": plan.lm_data, "models": plan.lm_models, "lip": plan.to_dict()["lipschitz"]}
    if kind == P.SEQLEN_LM:
        return {**common, "data": plan.lm_data, "models": plan.lm_models, "seqlen": plan.to_dict()["seqlen"]}
    if kind == P.SEQLEN_LAYER:
        sq = plan.to_dict()["seqlen"]
        return {"kind": kind, "layer_ns": sq["layer_ns"], "layer_trials": sq["layer_trials"]}
    raise ValueError(f"unknown piece kind {kind!r}")


def family_models(plan: StudyPlan, kind: str) -> tuple[str, ...]:
    if kind in (P.VISION_ATTACK, P.VISION_CORRUPTION, P.LIPSCHITZ_VISION, P.CERTIFY_VISION):
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
    return "study:" + digest(dict(weights_sha256))


def _shared_tokenizer(models: list[nn.Module], text: str):
    """All study LMs are trained with a char tokenizer on the same text; refuse to compare them otherwise."""
    toks = [getattr(m, "tokenizer", None) for m in models]
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
    v, lm, lip = plan.vision, plan.lm, plan.lipschitz
    common: dict[str, Any] = {"seed": plan.eval_seed, "size": plan.size}
    if kind == P.VISION_ATTACK:
        return ImageAttackConfig, {**common, "attacks": tuple(v.attacks), "eps": tuple(v.eps), "data": plan.vision_data,
                                   "n_examples": v.n_examples, "steps": v.pgd_steps}  # fmt: skip
    if kind == P.VISION_CORRUPTION:
        return CorruptionConfig, {**common, "data": plan.vision_data, "n_examples": v.corruption_examples,
                                  "severities": tuple(v.severities), "baseline": names[0]}  # fmt: skip
    if kind == P.LM_ATTACK:
        return LMAttackConfig, {**common, "attacks": ("fgsm", "pgd", "wordswap"), "eps": tuple(lm.eps),
                                "data": plan.lm_data, "n_examples": lm.n_sequences, "steps": lm.attack_steps,
                                "rates": tuple(lm.rates)}  # fmt: skip
    if kind in (P.LIPSCHITZ_VISION, P.LIPSCHITZ_LM):
        vision = kind == P.LIPSCHITZ_VISION
        return LipschitzConfig, {
            **common, "n_examples": lip.vision_examples if vision else lip.lm_examples,
            "method": lip.vision_method if vision else lip.lm_method, "bounds": True, "per_layer": True,
            "data": plan.vision_data if vision else plan.lm_data, "seq_len": lip.lm_seq_len,
            "gap": vision and lip.vision_gap, "gap_rhos": (lip.gap_rho,), "gap_taylor": False,
        }  # fmt: skip
    if kind == P.CERTIFY_VISION:
        cert = plan.certify
        return CertifyConfig, {**common, "data": plan.vision_data, "n_examples": cert.n_examples,
                               "sigmas": (cert.sigma,), "n0": cert.n0, "n": cert.n, "alpha": cert.alpha,
                               "attack_examples": cert.attack_examples}  # fmt: skip
    raise ValueError(f"piece kind {kind!r} has no run config")


def piece_config(piece: P.Piece, plan: StudyPlan, ckpts: Mapping[str, CheckpointInfo]) -> RunConfig:
    """The run config of a measurement piece, over the study's checkpoints (loaded as modules)."""
    cls, options = piece_options(piece, plan)
    names = family_models(plan, piece.kind)
    models = tuple(_load(ckpts, names, plan.size))
    options = {**options, "models": models, "checkpoint": _tag(ckpts, names)}
    if piece.kind == P.LM_ATTACK:
        from ..data import load_text

        options["tokenizer"] = _shared_tokenizer(list(models), load_text(plan.lm_data, split="test"))
    return cls(**options)


def run_measurement(
    piece: P.Piece,
    plan: StudyPlan,
    ckpts: Mapping[str, CheckpointInfo],
    folder: Path,
    progress: ProgressHook | None = None,
) -> None:
    """Make one measurement piece; ``folder`` ends as a finished run folder."""
    from ..api import measurement_for

    kind, names = piece.kind, family_models(plan, piece.kind)
    if kind == P.SEQLEN_LM:
        _seqlen_lm(plan, _load(ckpts, names, plan.size), names, folder, _tag(ckpts, names))
    elif kind == P.SEQLEN_LAYER:
        _seqlen_layer(plan, piece.seed, folder)
    else:
        run(measurement_for(piece_config(piece, plan, ckpts)), out=folder, resume=True, progress=progress)


def _seqlen_lm(plan: StudyPlan, models: list[nn.Module], names: tuple[str, ...], folder: Path, tag: str) -> None:
    from ..data import load_text

    sq = plan.seqlen
    text = load_text(plan.lm_data, split="test")
    tok = _shared_tokenizer(models, text)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    config = {**settings(plan, P.SEQLEN_LM), "checkpoint": tag}
    with RunWriter(folder, SEQLEN_LM_KIND, config, seed=plan.eval_seed, resume=True, extra={"family": "lm"}) as w:
        for name, model in zip(names, models, strict=True):
            if not w.is_done(name):
                rows = lm_seqlen_rows(model, name, ids, sq.lm_ns, sq.lm_windows, sq.lm_noise, plan.eval_seed)
                w.write_part(name, rows)
        rows = w.rows()
        summary = {
            "kind": SEQLEN_LM_KIND,
            "definition": "gain(N) = ||delta logits at the last position|| / per-token embedding noise; "
            "slope = d log mean gain / d log N",
            "models": summarize_seqlen(rows),
        }
        w.finish(rows, summary)


def _seqlen_layer(plan: StudyPlan, seed: int, folder: Path) -> None:
    """The synthetic one-layer study, seeded by the training seed (it draws the layer's weights)."""
    from ..lipschitz import sequence_length_study

    sq = plan.seqlen
    study = sequence_length_study(tuple(sq.layer_ns), trials=sq.layer_trials, seed=seed)
    config = {"study": "sequence_length", "ns": list(sq.layer_ns), "trials": sq.layer_trials}
    with RunWriter(folder, SEQLEN_LAYER_KIND, config, seed=seed, resume=True) as w:
        w.write_part("study", study)
        w.finish(study, {"kind": SEQLEN_LAYER_KIND, "n_values": sorted(int(n) for n in study["n"].unique())})
