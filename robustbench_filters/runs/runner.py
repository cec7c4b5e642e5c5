"""The runner: one run loop for every measurement (config -> runner -> measurement -> run folder).

The runner owns how a run goes; the measurement (:mod:`.measurement`) owns what it computes:

1. ``prepare`` the measurement on every rank (models, data, example selection through the runner's context);
   anything that cannot be measured is refused here, before a folder is touched;
2. fingerprint the run: the measurement's description, the hash of every model's parameters and buffers, and
   the digests of the selected examples, so ``--resume`` with other weights or data is refused by name;
3. plan the units and share them among the processes: round-robin across torchrun ranks, or through a shared
   queue, most expensive first, in robfilt's own worker pool (``--workers``); whole units either way, so every
   batch and seed is the one a single process would use, and the merged rows are identical for any number of
   processes;
4. open the run folder (rank 0 locks it and writes the manifest with the planned units; others attach), skip
   units whose parts verify, measure the rest, write each part with its hash;
5. rank 0 merges every planned part in plan order, runs the model and row checks, summarises, and finishes the
   folder with the hashes of every file.

Errors raised by a user's model inside a unit become one line naming the model, the unit and the exception; the
parts finished so far stay, so ``--resume`` continues.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from ..checks import Check
from ..core import distributed, workers
from ..core.errors import RobfiltError, RunStateError, UserCodeError
from ..core.progress import ProgressHook, null_progress
from ..core.surface import flag, switched
from ..core.workqueue import PUBLISH_S, WorkQueue
from ..models.transport import reduce_module
from ..summaries import Summary
from .adversarial import AdversarialExamples
from .folder import FORMAT_VERSION, RunWriter, load_run
from .measurement import Measurement, PrepareContext, UnitOutput
from .units import Unit

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a run returns: the merged rows, the typed summary of the run's kind (with its checks, as written to the
    run folder's ``summary.json``) and the run folder (None if temporary).

    A run made with ``save_adversarial`` also returns its adversarial examples (:meth:`adversarial`): read from
    the run folder when asked, or held in memory when the run went to a temporary folder (removed on return).
    """

    rows: pd.DataFrame
    summary: Summary
    out: Path | None
    adversarial_examples: AdversarialExamples | None = field(default=None, repr=False, compare=False)

    def adversarial(
        self, model: str | None = None, attack: str | None = None, eps: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, x_adv)``: the example ids (ascending; the rows' ``example_id``) and the adversarial points of
        ``model`` under ``attack`` at ``eps`` (float32, CPU, in [0, 1]). Each may be left out when the run has one.
        An example that survived has the attack's last point; ``rows`` says which examples were fooled."""
        if self.adversarial_examples is None:
            raise RobfiltError(
                "this run saved no adversarial examples; run it with save_adversarial=True "
                "(robfilt attack --save-adversarial)."
            )
        return self.adversarial_examples.select(model, attack, eps)


def weights_digest(module: nn.Module) -> str:
    """sha256 over every parameter and buffer (names, dtypes, shapes, values): what the model computes with."""
    h = hashlib.sha256()
    tensors = [*module.named_parameters(), *module.named_buffers()]
    for name, t in sorted(tensors, key=lambda kv: kv[0]):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _resolve_out(out: str | Path | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    if out is not None:
        return Path(out), None
    tmp = tempfile.TemporaryDirectory(prefix="robfilt-")
    return Path(tmp.name) / "run", tmp


class _Progress:
    """Counts work steps and reports them to the caller's hook: one count for the whole run.

    The count starts at 0; ``start``, the work of units finished before this call (``--resume``), follows at once
    in one step (the bar's pace ignores such a burst). In a pool, workers publish their counts through the shared
    store and rank 0 draws the sum of every rank's (:class:`~..core.workqueue.WorkQueue`).
    """

    def __init__(self, hook: ProgressHook, task: str, total: int, start: int, queue: WorkQueue) -> None:
        self.hook, self.task, self.total, self.start, self.queue = hook, task, total, start, queue
        self.own, self.others, self.info = 0, 0, ""
        self.unit = ""  # the unit at hand (model and part): each tick's detail follows it, never the last detail
        self._looked = -1.0
        self._drawn: tuple[int, str] | None = None
        hook(task, 0, total, "")
        if start:
            hook(task, min(total, start), total, "")

    def tick(self, k: int = 1, detail: str = "") -> None:
        """``k`` more steps done; ``detail`` says where the unit is (``pgd eps 0.1 (2/5) step 7/20``)."""
        self.own += k
        self.queue.publish(self.own)
        self.draw(f"{self.unit} {detail}" if detail else self.unit)

    def draw(self, info: str | None = None, fresh: bool = False) -> None:
        """Report the run's count (this rank's and, in a pool, the others' as last published)."""
        if info is not None:
            self.info = info
        now = time.monotonic()
        if fresh or now - self._looked >= PUBLISH_S:
            self.others, self._looked = self.queue.others_done(), now
        done = min(self.total, self.start + self.own + self.others)
        if (done, self.info) != self._drawn:  # the bar ticks its clock itself; only news is reported
            self._drawn = (done, self.info)
            self.hook(self.task, done, self.total, self.info)


def run(
    measurement: Measurement,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
) -> RunResult:
    """Run ``measurement`` into ``out`` (a temporary folder when None) and return the merged, checked result.

    Under torchrun every rank calls this with the same arguments and gets the merged result; ``out`` must then
    be a folder every rank shares. Inside an open worker pool (``--workers``, :func:`..core.workers.pool`) a CPU
    run is sent to every worker and computed by all of them; the rows are the one-process rows.
    """
    pool = workers.current()
    if pool is not None:
        device = str(measurement.config.device)
        if device == "cpu":
            result = pool.call(
                _run, measurement, out, resume, overwrite, local={"progress": progress}, reduce=reduce_module
            )
            assert result is not None  # rank 0 always returns the merged result
            return result
        log.info("the %s run is on %s: it runs in this process (worker processes share CPU cores; for several GPUs "
                 "launch with torchrun)", measurement.kind, device)  # fmt: skip
    result = _run(measurement, out, resume, overwrite, progress)
    assert result is not None
    return result


def _run(
    measurement: Measurement,
    out: str | Path | None,
    resume: bool,
    overwrite: bool,
    progress: ProgressHook | None = None,
) -> RunResult | None:
    """One rank's part of :func:`run` (every rank of a pool runs it); None on a pool's workers."""
    config = measurement.config
    ctx = distributed.init(str(config.device))
    device = torch.device(distributed.local_device(str(config.device), ctx))
    if ctx.enabled and not ctx.pooled and out is None:
        raise RobfiltError(
            f"a distributed run (torchrun) needs {flag('out')}: a folder on a filesystem all ranks share."
        )
    prep = PrepareContext(device=device, seed=int(config.seed))
    distributed.all_or_none(ctx, lambda: measurement.prepare(prep))  # a rank that cannot prepare fails them all
    labels = measurement.labels
    if len(set(labels)) != len(labels):
        raise RobfiltError(f"model labels repeat ({', '.join(labels)}); give each model a distinct name.")
    described = {
        **measurement.describe(),
        "weights": {label: weights_digest(m) for label, m in zip(labels, measurement.modules(), strict=True)},
        "examples": prep.examples,
    }
    units = measurement.plan()
    if not units:  # no example was selected: there would be no rows to summarise
        raise RobfiltError(f"the {measurement.kind} run has nothing to measure (no examples); give data with examples.")
    keys = [u.key for u in units]
    if len(set(keys)) != len(keys):
        raise RunStateError("the measurement planned two units with one key; this is a bug.")
    folder, tmp = _folder(ctx, out)
    extra = {"family": measurement.family, "world_size": ctx.world_size}

    def make_writer(primary: bool) -> RunWriter:
        return RunWriter(
            folder, measurement.kind, described, seed=int(config.seed), resume=resume, overwrite=overwrite,
            extra=extra, primary=primary, units=keys,
        )  # fmt: skip

    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(measurement.session())
            writer = stack.enter_context(distributed.shared_run(ctx, make_writer))
            checks = distributed.all_or_none(ctx, lambda: _compute(measurement, writer, units, progress, ctx))
            merged = distributed.all_or_none(
                ctx, lambda: _finish(measurement, writer, sorted(units), checks) if ctx.is_primary else None
            )
        if merged is None and ctx.pooled:  # a pool's worker: rank 0 has the result
            return None
        if merged is None:  # torchrun's other ranks read what rank 0 merged
            finished = load_run(folder)
            rows, summary = finished.rows, finished.summary
            adversarial = AdversarialExamples.from_manifest(folder, finished.manifest)
        else:
            rows, summary = merged
            adversarial = AdversarialExamples(folder, writer.adversarial, labels) if writer.adversarial else None
        if adversarial is not None and tmp is not None:
            adversarial = adversarial.in_memory()  # before the temporary folder goes
        return RunResult(rows=rows, summary=summary, out=None if tmp else folder, adversarial_examples=adversarial)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _folder(ctx: distributed.DistContext, out: str | Path | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """The run folder; without ``out`` a temporary one, which in a pool rank 0 makes (and removes) for every rank."""
    if not (ctx.pooled and out is None):
        return _resolve_out(out)
    made = distributed.all_or_none(ctx, lambda: _resolve_out(None) if ctx.is_primary else None)
    path = distributed.broadcast(ctx, made[0] if made is not None else None)
    return path, made[1] if made is not None else None


def _order(measurement: Measurement, units: list[Unit], ctx: distributed.DistContext) -> list[Unit]:
    """The units this rank goes through. torchrun: its round-robin shard, each (model, batch) together (the batch
    and its clean logits are computed once). A pool: every unit for the shared queue, most expensive first; among
    equals, part by part in plan order (a run's first attack is its strongest, the default, by convention) and
    batch by batch within a part (a run's last batch, often short, last), so cheap units end the run."""
    if ctx.pooled:
        return queue_order(units, measurement.cost)
    return sorted(distributed.shard(units, ctx.rank, ctx.world_size), key=lambda u: (u.model, u.batch, u.part))


def queue_order(units: list[Unit], cost: Callable[[Unit], float]) -> list[Unit]:
    """The order in which a pool's processes take ``units``: most expensive first; among equals, part by part in
    plan order, batch by batch within a part, and within a batch the models in an order that turns by one from
    each batch to the next (benchmarks/b13_workers.py replays it).

    Why the turn: a unit's cost is known only roughly (its examples and eps), and the models of one run differ in
    what they really cost (a model whose examples hold costs more to attack). With the models in the same order in
    every batch, two processes of equal speed fall into step, each taking the same model's unit batch after batch,
    and the process with the dearer model ends last (B13's gate part: one process took every ``deit-grc`` unit and
    ended 6 s after the other). Turning the order hands each model's units to both processes."""
    rank = {part: i for i, part in reversed(list(enumerate(u.part for u in units)))}
    models = max((u.model for u in units), default=0) + 1
    return sorted(units, key=lambda u: (-cost(u), rank[u.part], u.batch, (u.model - u.batch) % models))


def _compute(
    measurement: Measurement, writer: RunWriter, units: list[Unit], hook: ProgressHook | None,
    ctx: distributed.DistContext,
) -> list[Check]:  # fmt: skip
    """This rank's units (skipping verified finished parts) and, on rank 0, every model's checks.

    In a pool, rank 0 runs the checks first, while the others start on the queue (after its last unit they would
    keep the others waiting; first, the queue gives rank 0 fewer units instead), then waits for the other ranks
    while it draws their progress (a wait Ctrl-C can end); a rank that fails stops the others taking further units,
    as one process stops at its first failing unit. Elsewhere rank 0 runs the checks after its units.
    """
    queue = WorkQueue(ctx)
    order = _order(measurement, units, ctx)
    counted = order if not ctx.pooled else units if ctx.is_primary else []
    start = sum(measurement.work(u) for u in counted if writer.is_done(u.key))
    total = sum(measurement.work(u) for u in (units if ctx.pooled else order))
    bar = _Progress(hook or null_progress, measurement.kind, total, start, queue)
    labels = measurement.labels
    checks: list[Check] = []
    first = ctx.pooled and ctx.is_primary
    try:
        if first:
            checks = _model_checks(measurement)
        for unit in queue.units(order):
            if writer.is_done(unit.key):
                continue
            bar.unit = f"{labels[unit.model]} {unit.part}"
            with _user_errors(labels[unit.model], unit.key):
                out = measurement.measure(unit, bar.tick)
            rows, adversarial = (out.rows, out.adversarial) if isinstance(out, UnitOutput) else (out, None)
            if not isinstance(rows, pd.DataFrame) or rows.empty:
                raise RunStateError(
                    f"unit {unit.key} produced no rows; this is a bug in the {measurement.kind} measurement."
                )
            writer.write_part(unit.key, rows, adversarial)
        if ctx.is_primary and not first:
            checks = _model_checks(measurement)
    except KeyboardInterrupt:
        raise
    except BaseException:
        queue.abort()
        _wait(queue, bar, ctx)
        raise
    _wait(queue, bar, ctx)
    return checks


def _model_checks(measurement: Measurement) -> list[Check]:
    """Every model's checks (rank 0), in the models' order; a model's own code failing is the user's error."""
    checks: list[Check] = []
    for i, label in enumerate(measurement.labels):
        with _user_errors(label, "sanity checks"):
            checks += measurement.model_checks(i)
    return checks


def _wait(queue: WorkQueue, bar: _Progress, ctx: distributed.DistContext) -> None:
    """This rank is through; rank 0 waits for the others (a pool only), drawing the whole run's progress."""
    if not ctx.pooled:
        return
    queue.publish(bar.own, force=True)
    queue.finish()
    if ctx.is_primary:
        queue.wait_all(lambda: bar.draw(fresh=True))
        bar.draw(fresh=True)


def _finish(
    measurement: Measurement, writer: RunWriter, units: list[Unit], model_checks: list[Check]
) -> tuple[pd.DataFrame, Summary]:
    """Rank 0: merge every planned part in plan order, run the row checks, summarise, write the finished folder."""
    writer.refresh()
    missing = [u.key for u in units if not writer.is_done(u.key)]
    if missing:
        raise RunStateError(
            f"{len(missing)} units have no part file (first: {missing[0]}); if ranks ran on several nodes, {flag('out')} "
            f"must be on a filesystem they all share. Finish the run with {switched('resume')}."
        )
    rows = writer.rows([u.key for u in units])
    checks = list(model_checks)
    for label in measurement.labels:
        checks += measurement.row_checks(rows, label)
    summary = writer.finish(rows, measurement.summarise(rows, checks))
    log.info("finished %s run in %s (format %d)", measurement.kind, writer.out, FORMAT_VERSION)
    return rows, summary


@contextlib.contextmanager
def _user_errors(label: str, where: str) -> Iterator[None]:
    """Exceptions from inside a model's computation become one line naming the model, the unit and the cause.

    RobfiltErrors (already one line) and Ctrl-C pass through; SystemExit from a user's code does not end the
    process silently (a gate must never exit 0 without checking).
    """
    try:
        yield
    except (RobfiltError, KeyboardInterrupt):
        raise
    except (Exception, SystemExit) as exc:
        raise UserCodeError.wrap(label, where, exc) from exc
