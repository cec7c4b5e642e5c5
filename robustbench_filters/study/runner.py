"""``run_study``: train or reuse every checkpoint, make every measurement, judge the claims, write the README.

The study folder:

    study.json          the manifest: the plan, and per piece its status, input fingerprint, folder, wall time
    checkpoints/        <model>-<size>-s<seed>-<recipe tag>/ (model.safetensors + card.json)
    runs/s<seed>/<kind>/  one finished run folder per measurement (the engines' usual format)
    report/             the reporter's tables and figures (first seed)
    results.json, scores.csv, README.md

A measurement is *finished* when the manifest says so for the same input fingerprint (its settings plus the
SHA-256 of every checkpoint it used) and its run folder reads back complete. ``resume`` skips finished pieces;
a piece that was interrupted continues inside its run folder; a piece whose inputs changed (e.g. a retrained
checkpoint) is measured again from scratch. Training is skipped whenever a checkpoint's card matches.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import RobfiltError, RunStateError
from ..core.io import atomic_write_json
from ..core.progress import ProgressHook, null_progress
from ..core.workers import pool, resolve
from ..runs.folder import load_run
from ..runs.lock import RunLock, is_locked
from ..runs.outfolder import OutputFolder, remove_output
from . import plan as P
from .checkpoints import CheckpointInfo, deferred_checkpoint, ensure_checkpoint, trained_checkpoint
from .claims import ClaimResult, evaluate_claims
from .folder import open_study_folder, open_write_up
from .integrity import check_study
from .measure import family_models, run_measurement, settings
from .plan import StudyPlan, digest
from .scores import StudyScores, failed_checks, scores_from_run
from .training import train_shared

log = logging.getLogger(__name__)

MANIFEST = "study.json"
SCHEMA_VERSION = 1
DONE, RUNNING = "done", "running"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass
class StudyResult:
    """What a study call did: the pieces it ran and the pieces already finished."""

    out: Path
    readme: Path | None
    executed: list[str] = field(default_factory=list)
    finished_before: list[str] = field(default_factory=list)
    claims: list[ClaimResult] = field(default_factory=list)
    wall_time_s: float = 0.0


def read_manifest(path: Path) -> dict[str, Any]:
    """A study's ``study.json``, refused in one line when it is not valid JSON or of another schema."""
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RunStateError(f"{path} is not valid JSON; run the study again with --overwrite.") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise RunStateError(f"{path} has study schema {found}; use --overwrite.")
    return data


class Manifest:
    """``study.json``: read once, rewritten atomically after every piece so a kill loses at most one piece."""

    def __init__(self, out: Path, plan: StudyPlan) -> None:
        self.path = out / MANIFEST
        if self.path.exists():
            self.data = read_manifest(self.path)
        else:
            self.data = {"schema_version": SCHEMA_VERSION, "kind": "study", "created": _now(), "pieces": {}}
        self.data["plan"] = plan.to_dict()
        self.data["plan_fingerprint"] = digest(self.data["plan"])

    @property
    def pieces(self) -> dict[str, dict[str, Any]]:
        return self.data["pieces"]

    def record(self, piece_id: str, **info: Any) -> None:
        self.pieces[piece_id] = info
        self.save()

    def save(self) -> None:
        self.data["updated"] = _now()
        atomic_write_json(self.path, self.data)


def _finished(record: dict | None, inputs: str, folder: Path) -> bool:
    if not record or record.get("status") != DONE or record.get("inputs") != inputs:
        return False
    try:
        load_run(folder)
    except RobfiltError:
        return False
    return True


def run_study(
    plan: StudyPlan,
    out: str | Path = "reports/study",
    *,
    resume: bool = False,
    overwrite: bool = False,
    reuse: Sequence[str | Path] = (),
    report: bool = True,
    progress: ProgressHook | None = None,
    workers: int = 1,
) -> StudyResult:
    """Run (or resume) the study described by ``plan`` in ``out`` and write ``out/README.md``.

    Args:
        plan: models, seeds, recipes and measurement settings (:func:`.plan.full_plan`, :func:`.plan.quick_plan`).
        resume: continue a study in ``out``; finished pieces are not redone.
        overwrite: delete the study in ``out`` first (checkpoints included).
        reuse: more folders to search for checkpoints with a matching card (e.g. ``runs/train``).
        report: build the reporter's figures (first seed) and link them from the README.
        workers: processes that train and measure (``robfilt study --workers``; default 1: this one). The worker
            processes start once and serve every measurement and every seed's trainings (:mod:`.training`).
    """
    if resume and overwrite:
        raise RobfiltError("--resume and --overwrite contradict each other; pass one.")
    plan.validate()
    resolved = [Path(r).resolve() for r in reuse]
    twice = next((r for i, r in enumerate(reuse) if resolved[i] in resolved[:i]), None)
    if twice is not None:
        raise RobfiltError(f"reuse lists {twice} twice; give each folder once.")
    out = Path(out)
    progress = progress or null_progress
    folder = open_study_folder(out, resume=resume, overwrite=overwrite)
    lock = RunLock(out)
    lock.acquire()
    t0 = time.perf_counter()
    try:
        with pool(resolve(workers)):
            return _run_pieces(plan, out, folder, reuse, report, progress, t0)
    finally:
        lock.release()


def _run_pieces(
    plan: StudyPlan, out: Path, folder: OutputFolder, reuse: Sequence[str | Path], report: bool,
    progress: ProgressHook, t0: float,
) -> StudyResult:  # fmt: skip
    """Every piece in plan order (a seed's trainings together, shared by the pool's processes when one is open;
    measurements through the runner), then the write-up."""
    folder.path(MANIFEST)
    manifest = Manifest(out, plan)
    manifest.save()
    result = StudyResult(out=out, readme=None)
    todo = P.pieces(plan)
    ckpts: dict[int, dict[str, CheckpointInfo]] = {}
    trainer = _Trainer(plan, out, [Path(r) for r in reuse], manifest, result, progress)
    done = 0
    for step in _steps(todo):
        first = step[0]
        progress("study", done, len(todo), first.id)
        if first.kind == P.TRAIN:  # a seed's family: its trainings are independent, so they go together
            ckpts.setdefault(first.seed, {}).update(trainer.checkpoints(step))
        else:
            _measure(first, plan, ckpts.get(first.seed, {}), trainer, manifest, result, progress)
        done += len(step)
    progress("study", len(todo), len(todo), "write-up")
    _write(plan, folder, manifest.data, result, report, t0)
    log.info("study written to %s (%.0fs this call)", result.readme, result.wall_time_s)
    return result


def _steps(todo: Sequence[P.Piece]) -> list[list[P.Piece]]:
    """The pieces in plan order, a seed's consecutive trainings as one step and each measurement alone."""

    def step(piece: P.Piece) -> object:
        return (P.TRAIN, piece.seed) if piece.kind == P.TRAIN else piece.id

    return [list(group) for _, group in itertools.groupby(todo, key=step)]


def write_up(plan: StudyPlan, out: str | Path = "reports/study", *, report: bool = True) -> StudyResult:
    """Rewrite the write-up (README, figures, results.json, scores.csv) of a study from its finished run folders.

    Nothing is trained or measured, so a fresh clone can redraw the committed study in seconds (its checkpoints
    are not committed). Every run folder is verified against its recorded hashes as it is read; a study made with
    another plan is refused, so the verdicts always belong to the plan the README names.
    """
    plan.validate()
    out = Path(out)
    path = out / MANIFEST
    if not path.is_file():
        raise RobfiltError(f"{out} holds no study ({MANIFEST} is missing); run robfilt study --out {out} first.")
    stored = read_manifest(path)
    if stored.get("plan_fingerprint") != digest(plan.to_dict()):
        made, wanted = stored.get("plan", {}), plan.to_dict()
        if made.get("name") == wanted.get("name") and made.get("seeds") == wanted.get("seeds"):
            changed = sorted(k for k in set(made) | set(wanted) if made.get(k) != wanted.get(k))
            raise RobfiltError(
                f"the study in {out} was made with other settings of plan {made.get('name')!r} ({', '.join(changed)} "
                "differ: this robfilt measures them another way); run the study again (robfilt study --out DIR) to "
                "write it up."
            )
        raise RobfiltError(
            f"the study in {out} was made with plan {made.get('name')!r} and seeds {made.get('seeds')}; pass the same "
            "--quick/--seeds to rewrite it."
        )
    done = [pid for pid, rec in stored.get("pieces", {}).items() if isinstance(rec, dict) and rec.get("status") == DONE]
    if all(pid.startswith(P.TRAIN + "/") for pid in done):
        raise RobfiltError(f"the study in {out} has no finished measurement yet; continue it with --resume.")
    t0 = time.perf_counter()
    folder = open_write_up(out)
    lock = RunLock(out)
    lock.acquire()
    try:
        folder.path(MANIFEST)  # the study's own (read, not rewritten): listed so the ledger names every study file
        return _write(plan, folder, stored, StudyResult(out=out, readme=None, finished_before=done), report, t0)
    finally:
        lock.release()


def _write(
    plan: StudyPlan, folder: OutputFolder, manifest: dict, result: StudyResult, report: bool, t0: float
) -> StudyResult:
    """Judge the claims from every finished run folder and write the README, figures and tables into ``result``."""
    from .writeup import write_outputs

    data = collect(plan, folder.out, manifest)
    result.claims = evaluate_claims(data.scores)
    result.wall_time_s = time.perf_counter() - t0
    result.readme = write_outputs(plan, folder, manifest, data, result, report=report)
    folder.finish()
    return result


def _record_training(manifest: Manifest, piece: P.Piece, info: CheckpointInfo, out: Path) -> None:
    """Keep the first record of a checkpoint (when and how long it trained); re-record only new weights.

    A checkpoint reused from elsewhere costs this study nothing (``wall_s`` 0); its card's training time is kept as
    ``card_wall_s``, so the write-up can say what the reused weights cost."""
    old = manifest.pieces.get(piece.id, {})
    if not info.trained and old.get("weights_sha256") == info.weights_sha256:
        if not old.get("trained_by_study") and "card_wall_s" not in old and info.card_wall_s is not None:
            manifest.record(
                piece.id, **old, card_wall_s=round(info.card_wall_s, 1)
            )  # a record from before cards' times
        return
    path = info.path.resolve()
    inside = path.is_relative_to(out.resolve())
    reused = {} if info.trained or info.card_wall_s is None else {"card_wall_s": round(info.card_wall_s, 1)}
    manifest.record(
        piece.id, status=DONE, path=str(path.relative_to(out.resolve()) if inside else path),
        weights_sha256=info.weights_sha256, trained_by_study=info.trained, metrics=info.metrics,
        wall_s=round(info.wall_time_s, 1), finished=_now(), **reused,
    )  # fmt: skip


@dataclass
class _Trainer:
    """Train-or-reuse for the study's training pieces, deferring weights that no unfinished measurement needs.

    A resumed study whose checkpoints are gone (a clone of the committed study) keeps the manifest's record of
    each checkpoint (:func:`.checkpoints.deferred_checkpoint`) and trains it only when a measurement that must run
    uses it: a change to one family's measurements re-measures that family without retraining the other."""

    plan: StudyPlan
    out: Path
    reuse_dirs: list[Path]
    manifest: Manifest
    result: StudyResult
    progress: ProgressHook

    def checkpoints(self, pieces: Sequence[P.Piece]) -> dict[str, CheckpointInfo]:
        """A seed's training pieces: a checkpoint no unfinished measurement needs stays deferred (its record stands
        in), the others are reused or trained now (together, on the pool's processes when one is open)."""
        root = self.out / "checkpoints"
        found: dict[str, CheckpointInfo] = {}
        now: list[P.Piece] = []
        for piece in pieces:
            record = self.manifest.pieces.get(piece.id)
            deferred = deferred_checkpoint(self.plan, piece.model, piece.seed, root, record)
            if deferred is None:
                now.append(piece)
                continue
            log.info(
                "%s: checkpoint not on disk; its recorded weights stand in until a measurement needs them", piece.id
            )
            self.result.finished_before.append(piece.id)
            found[piece.model] = deferred
        found.update(zip((p.model for p in now), self.checkpoints_now(now), strict=True))
        return {p.model: found[p.model] for p in pieces}

    def materialise(self, ckpts: dict[str, CheckpointInfo], names: Sequence[str]) -> None:
        """Train (or reuse) every deferred checkpoint in ``names`` now, in place in ``ckpts``."""
        pieces = [P.Piece(P.TRAIN, ckpts[n].seed, n) for n in names if ckpts[n].deferred]
        for piece in pieces:
            if piece.id in self.result.finished_before:
                self.result.finished_before.remove(piece.id)
        for piece, info in zip(pieces, self.checkpoints_now(pieces), strict=True):
            if info.weights_sha256 != ckpts[piece.model].weights_sha256:
                log.warning("%s: the retrained weights differ from the recorded ones; pieces using them are measured "
                            "again", piece.id)  # fmt: skip
            ckpts[piece.model] = info

    def checkpoints_now(self, pieces: Sequence[P.Piece]) -> list[CheckpointInfo]:
        """Reuse or train each of ``pieces`` now, in order; several to train share the pool's processes."""
        root = self.out / "checkpoints"
        shared = set(train_shared(self.plan, [(p.model, p.seed) for p in pieces], root, self.reuse_dirs,
                                  self.progress))  # fmt: skip
        infos = []
        for piece in pieces:
            if (piece.model, piece.seed) in shared:  # trained a moment ago by a rank of the pool: read its card
                info = trained_checkpoint(self.plan, piece.model, piece.seed, root)
                log.info("%s: trained in %.0fs by the pool's processes", piece.id, info.wall_time_s)
            else:
                info = ensure_checkpoint(self.plan, piece.model, piece.seed, root, self.reuse_dirs, self.progress)
            (self.result.executed if info.trained else self.result.finished_before).append(piece.id)
            _record_training(self.manifest, piece, info, self.out)
            infos.append(info)
        return infos


def _measure(
    piece: P.Piece,
    plan: StudyPlan,
    ckpts: dict[str, CheckpointInfo],
    trainer: _Trainer,
    manifest: Manifest,
    result: StudyResult,
    progress: ProgressHook,
) -> None:
    names = family_models(plan, piece.kind)
    missing = [n for n in names if n not in ckpts]
    if missing:
        raise RobfiltError(f"{piece.id} needs checkpoints for {missing}; they were not trained.")
    inputs = digest({"settings": settings(plan, piece.kind), "weights": {n: ckpts[n].weights_sha256 for n in names}})
    out = trainer.out
    folder = out / piece.folder
    record = manifest.pieces.get(piece.id)
    if _finished(record, inputs, folder):
        result.finished_before.append(piece.id)
        return
    if any(ckpts[n].deferred for n in names):
        trainer.materialise(ckpts, names)
        inputs = digest(
            {"settings": settings(plan, piece.kind), "weights": {n: ckpts[n].weights_sha256 for n in names}}
        )
    if folder.exists() and (record is None or record.get("inputs") != inputs):
        log.info("%s: inputs changed since it was started; measuring again", piece.id)
        remove_output(folder)  # the old run's own files; anything else there is refused by the new run
    manifest.record(piece.id, status=RUNNING, inputs=inputs, path=piece.folder, started=_now())
    t0 = time.perf_counter()
    try:
        run_measurement(piece, plan, ckpts, folder, progress)
    except RunStateError:
        if is_locked(folder):  # another process writes it: never take it over
            raise
        # same inputs, but the run fingerprint changed (e.g. a newer robfilt): start the piece afresh
        log.warning("%s: the partial run in %s is from another robfilt version; measuring again", piece.id, folder)
        remove_output(folder)
        run_measurement(piece, plan, ckpts, folder, progress)
    wall = time.perf_counter() - t0  # of the call that finished the piece
    manifest.record(piece.id, status=DONE, inputs=inputs, path=piece.folder, wall_s=round(wall, 1), finished=_now())
    result.executed.append(piece.id)
    log.info("%s done in %.0fs", piece.id, wall)


def collect(plan: StudyPlan, out: Path, manifest: Manifest | dict) -> StudyScores:
    """Read every finished measurement back into one scores table (and the per-seed McNemar table)."""
    pieces = manifest.pieces if isinstance(manifest, Manifest) else manifest["pieces"]
    scores: list[dict] = []
    mcnemar: list[dict] = []
    checks: list[dict] = []
    baseline = plan.vision_models[0] if plan.vision_models else None
    runs = {
        piece: load_run(out / piece.folder)
        for piece in P.pieces(plan)
        if piece.kind != P.TRAIN and pieces.get(piece.id, {}).get("status") == DONE
    }
    check_study(plan, pieces, runs)  # the runs are the plan's, for their seeds, and none stands in for another
    for piece, run in runs.items():
        s, m = scores_from_run(piece.kind, run, piece.seed, baseline)
        scores += s
        mcnemar += m
        checks += failed_checks(run, piece.id)
    return StudyScores.from_records(scores, mcnemar, checks)
