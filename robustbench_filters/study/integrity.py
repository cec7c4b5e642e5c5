"""A study's run folders must be the measurements its plan and its manifest say they are.

Every run folder verifies alone (hashes, and a manifest that hashes to its fingerprint), but a study combines
them across seeds, and a claim's verdict rests on the seeds being independent trainings measured the same way.
So before any claim is judged, every finished piece's run folder is checked against

- the plan: the run kind, the models, the evaluation seed, and every setting the plan fixes for that piece
  (eps, steps, n_examples, ...), as the run folder recorded them;
- the study manifest: the checkpoint tag the run recorded is the one of the checkpoints trained for *its* seed
  (``study:<digest of their file hashes>``), so a run of one seed cannot stand in for another's;
- each other: no run twice (a copy: the same fingerprint or the same rows), a model's weights differ between
  seeds, and two models of one seed never share their weights (nor, in the manifest, their checkpoint files).

Anything else is refused in one line naming the folder, before the README is touched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..core.errors import RunStateError
from ..runs.crosscheck import refuse_copies, refuse_label_conflicts, weights_of
from ..runs.folder import Run
from ..summaries import SEQLEN, STUDY_SEQLEN
from . import plan as P
from .measure import checkpoint_tag, family_models, piece_options, settings
from .plan import StudyPlan

#: options a run folder records differently or not at all (the models as modules, derived switches)
_NOT_RECORDED = frozenset({"models", "checkpoint", "tokenizer", "gap"})
_RESOLVED = frozenset({"dtype"})


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def expected(piece: P.Piece, plan: StudyPlan) -> tuple[str, int, dict[str, Any]]:
    """(run kind, run seed, recorded config values) the plan implies for ``piece``'s run folder."""
    if piece.kind == P.SEQLEN_LAYER:
        sq = plan.seqlen
        return SEQLEN, piece.seed, {"study": "sequence_length", "ns": list(sq.layer_ns),
                                               "trials": sq.layer_trials}  # fmt: skip
    if piece.kind == P.SEQLEN_LM:
        return STUDY_SEQLEN, plan.eval_seed, settings(plan, P.SEQLEN_LM)
    cls, options = piece_options(piece, plan)
    # A None in the plan means the kind's default: the run records it as None (steps None: each attack's own), so
    # a run made with steps = 5 is not the plan's; only the keys in _RESOLVED are recorded resolved (dtype None ->
    # "float64") and are not compared when the plan leaves them to the default.
    values = {
        k: v
        for k, v in options.items()
        if k not in _NOT_RECORDED and k != "seed" and not (v is None and k in _RESOLVED)
    }
    return cls.KIND, plan.eval_seed, {**values, "models": list(family_models(plan, piece.kind))}


def _trained(pieces: Mapping[str, Any], model: str, seed: int) -> str | None:
    record = pieces.get(P.Piece(P.TRAIN, seed, model).id)
    return record.get("weights_sha256") if isinstance(record, dict) and record.get("status") == "done" else None


def check_piece(plan: StudyPlan, pieces: Mapping[str, Any], piece: P.Piece, run: Run) -> None:
    """``run`` is the measurement the plan and the manifest say ``piece`` is."""
    kind, seed, values = expected(piece, plan)
    where = f"{run.path} (piece {piece.id})"
    if run.kind != kind:
        raise RunStateError(f"{where} holds a {run.kind!r} run, not the plan's {kind!r}; re-run the study piece.")
    if run.manifest.get("seed") != seed:
        raise RunStateError(
            f"{where} was measured with seed {run.manifest.get('seed')}, the plan's is {seed}; it is not this "
            "piece's run (copied from another?): re-run the study with --resume after removing it."
        )
    config = run.manifest.get("config") or {}
    for key, want in values.items():
        if key in config and _json(config[key]) != _json(want):
            raise RunStateError(
                f"{where} was made with {key} = {json.dumps(config[key], default=str)[:60]}, but the study plan "
                f"sets {json.dumps(_json(want))[:60]}; the write-up would judge the plan's claims on other settings."
            )
    names = family_models(plan, piece.kind)
    hashes = {n: _trained(pieces, n, piece.seed) for n in names}
    if names and all(hashes.values()) and config.get("checkpoint", None) not in (None, checkpoint_tag(hashes)):  # type: ignore[arg-type]
        raise RunStateError(
            f"{where} was measured on other checkpoints than the ones the study trained for seed {piece.seed} "
            f"(tag {config['checkpoint']}); a run of another seed or model cannot stand in for it."
        )


def _same_weights_across_seeds(runs: Mapping[P.Piece, Run]) -> None:
    """A model's weights digest must differ between the seeds of one measurement kind (independent trainings)."""
    seen: dict[tuple[str, str, str], P.Piece] = {}  # (kind, label, digest) -> first piece
    for piece, run in runs.items():
        for label, digest in weights_of(run).items():
            key = (piece.kind, label, digest)
            if key in seen and seen[key].seed != piece.seed:
                first = seen[key]
                raise RunStateError(
                    f"{run.path}: model {label!r} has the same weights (digest {digest}) for seed {piece.seed} as for "
                    f"seed {first.seed} ({runs[first].path}); seeds must be independent trainings: retrain it."
                )
            seen.setdefault(key, piece)


def _same_checkpoints(plan: StudyPlan, pieces: Mapping[str, Any]) -> None:
    """No two training pieces (two seeds, or two models) recorded the same checkpoint file."""
    seen: dict[str, str] = {}
    for model in (*plan.vision_models, *plan.lm_models):
        for seed in plan.seeds:
            sha = _trained(pieces, model, seed)
            piece_id = P.Piece(P.TRAIN, seed, model).id
            if sha and sha in seen:
                raise RunStateError(
                    f"the study manifest records one checkpoint file (sha256 {sha[:16]}) for {seen[sha]} and "
                    f"{piece_id}; each model and seed must be trained on its own: retrain one of them."
                )
            if sha:
                seen[sha] = piece_id


def check_study(plan: StudyPlan, pieces: Mapping[str, Any], runs: Mapping[P.Piece, Run]) -> None:
    """Refuse (one line naming the folder) a study whose finished runs are not what the plan and manifest say."""
    _same_checkpoints(plan, pieces)
    for piece, run in runs.items():
        check_piece(plan, pieces, piece, run)
    refuse_copies(list(runs.values()), rows=True)
    _same_weights_across_seeds(runs)
    for run in runs.values():
        refuse_label_conflicts([run], "one study measurement")


__all__ = ["check_piece", "check_study", "expected"]
