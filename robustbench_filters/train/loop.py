"""``robfilt train``: deterministic, resumable training for both families.

AdamW with linear warmup and cosine decay, gradient clipping, and a data order that is a pure function of
(seed, step): image batches come from a per-epoch permutation seeded by (seed, epoch), LM batches from a
generator seeded by (seed, step). A killed run therefore resumes from its last saved step and reaches the
same final weights as an uninterrupted run. Training state (weights, optimizer moments, step) is stored as
safetensors plus JSON; nothing is pickled.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.progress import ProgressHook, null_progress
from ..core.seeds import derived_seed
from ..models.checkpoint import save_checkpoint
from ..models.registry import ModelSpec, build_from_spec, resolve_spec
from .adversarial import PGDTraining
from .recipe import DEFAULT_RECIPES, Recipe, Trainee, card_recipe_value, lr_at, rebuild_command, recipe_identity
from .state import STATE_DIR, check_same_training, load_state, previous_state, save_state, training_folder

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    out: Path
    name: str
    size: str
    metrics: dict[str, float]
    wall_time_s: float
    recipe: Recipe = field(default_factory=Recipe)


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 2-pixel shifts and horizontal flips, drawn from ``gen`` (deterministic per step)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (2, 2, 2, 2))
    dy = torch.randint(0, 5, (b,), generator=gen)
    dx = torch.randint(0, 5, (b,), generator=gen)
    rows = (dy[:, None] + torch.arange(h)[None]).view(b, 1, h, 1).expand(b, x.shape[1], h, w + 4)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None]).view(b, 1, 1, w).expand(b, x.shape[1], h, w)
    out = out.gather(3, cols)
    flip = torch.rand(b, generator=gen) < 0.5
    return torch.where(flip.view(b, 1, 1, 1), out.flip(-1), out)


def add_gaussian_noise(x: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """Gaussian data augmentation for randomized smoothing: ``x + N(0, sigma^2 I)``, drawn from ``gen``.

    No clipping to [0, 1]: the smoothed classifier that ``robustbench_filters.smoothing`` certifies adds
    unclipped noise too (Cohen et al. 2019), and the base classifier must be trained on that distribution.
    """
    return x + sigma * torch.randn(x.shape, generator=gen, dtype=x.dtype)


class _Task:
    """Family-specific data, loss and metric; the loop itself is shared."""

    def __init__(self, model: nn.Module, spec: Any, data: str, recipe: Recipe, seed: int, out: Path) -> None:
        self.model, self.spec, self.recipe, self.seed = model, spec, recipe, seed
        self.family = spec.family
        if self.family is Family.IMAGE:
            from ..data import load_images

            self.train_data = load_images(data, split="train")
            self.test_data = load_images(data, split="test")
            cfg = spec.config
            shape = tuple(self.train_data.x.shape[1:])
            if shape != (cfg.in_chans, cfg.img_size, cfg.img_size):
                raise RobfiltError(
                    f"data {data!r} has images of shape {shape} but {spec.name} ({spec.size}) expects "
                    f"{(cfg.in_chans, cfg.img_size, cfg.img_size)}; pick a matching --size or --data."
                )
            if len(self.train_data.classes) != cfg.num_classes:
                raise RobfiltError(
                    f"data {data!r} has {len(self.train_data.classes)} classes but {spec.name} has "
                    f"{cfg.num_classes}; pick a matching --size or --data."
                )
            self.n_train = len(self.train_data.y)
            self.data_checksum = self.train_data.checksum
            self.adversarial = PGDTraining.from_recipe(recipe)
        else:
            from ..data import encode_corpus, load_documents, load_text
            from ..data.tokenizers import BPETokenizer, CharTokenizer

            train_text = load_text(data, split="train")
            self.test_docs = load_documents(data, "test").texts
            tok_path = out / "tokenizer.json"
            if recipe.tokenizer == "char":
                self.tokenizer = CharTokenizer.train(train_text)
            else:
                self.tokenizer = BPETokenizer.train(train_text, vocab_size=recipe.bpe_vocab)
            self.tokenizer.save(tok_path)
            self.train_ids = encode_corpus(train_text, self.tokenizer)
            self.n_train = len(self.train_ids)
            import hashlib

            self.data_checksum = hashlib.sha256(train_text.encode()).hexdigest()

    def total_steps(self) -> int:
        if self.recipe.steps is not None:
            return self.recipe.steps
        if self.family is Family.LM:
            raise RobfiltError("LM training is step-based; pass --steps.")
        return self.recipe.epochs * self.steps_per_epoch()

    def steps_per_epoch(self) -> int:
        return max(1, self.n_train // self.recipe.batch_size)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(derived_seed(self.seed, 1_000_003, step))
        if self.family is Family.IMAGE:
            spe = self.steps_per_epoch()
            epoch, i = divmod(step, spe)
            perm = torch.randperm(
                self.n_train, generator=torch.Generator().manual_seed(derived_seed(self.seed, 7919, epoch))
            )
            idx = perm[i * self.recipe.batch_size : (i + 1) * self.recipe.batch_size]
            x, y = self.train_data.x[idx], self.train_data.y[idx]
            if self.recipe.augment:
                x = _augment(x, gen)
            if self.recipe.noise_sigma > 0:
                x = add_gaussian_noise(x, self.recipe.noise_sigma, gen)
            if self.adversarial is not None:  # PGD points from the current weights, seeded by (seed, step)
                x = self.adversarial.points(self.model, x, y, derived_seed(self.seed, 1_000_003, step))
            return x, y
        from ..data import get_batch

        return get_batch(self.train_ids, self.spec.config.block_size, self.recipe.batch_size, gen)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        logits = self.model(x)
        if self.family is Family.IMAGE:
            loss = F.cross_entropy(logits, y, label_smoothing=self.recipe.label_smoothing)
            return loss, (logits.argmax(-1) == y).float().mean().item()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return loss, math.exp(min(loss.item(), 20.0))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        try:
            if self.family is Family.IMAGE:
                x, y = self.test_data.x, self.test_data.y
                if self.recipe.eval_max:
                    x, y = x[: self.recipe.eval_max], y[: self.recipe.eval_max]
                correct = sum(
                    (self.model(x[i : i + 500]).argmax(-1) == y[i : i + 500]).sum().item()
                    for i in range(0, len(y), 500)
                )
                out = {"test_acc": correct / len(y), "test_n": len(y)}
                if self.adversarial is not None:  # the card's robust metric: PGD-20 at the training ball
                    out["test_acc_pgd20"] = self.adversarial.robust_accuracy(self.model, x, y, self.seed)
                if self.recipe.noise_sigma > 0:
                    # the base classifier on one fixed noise draw per test image (seeded, so reproducible)
                    noisy = add_gaussian_noise(x, self.recipe.noise_sigma, torch.Generator().manual_seed(self.seed))
                    hits = sum(
                        (self.model(noisy[i : i + 500]).argmax(-1) == y[i : i + 500]).sum().item()
                        for i in range(0, len(y), 500)
                    )
                    out["test_acc_noisy"] = hits / len(y)
                return out
            return {**lm_card_metrics(self.model, self.tokenizer, self.test_docs, self.recipe.eval_max),
                    "tokenizer": self.recipe.tokenizer}  # fmt: skip
        finally:
            self.model.train()


def lm_card_metrics(model: nn.Module, tokenizer: Any, docs: Sequence[str], eval_max: int | None) -> dict[str, Any]:
    """A card's test perplexities of a robfilt LM: lm-eval's rolling windows of its block size over the test
    documents (``eval_max`` of them: those ``robfilt attack -n eval_max --seed 0`` selects), with the metric code
    ``robfilt attack`` scores clean rows with."""
    from ..models.hf.perplexity import card_metrics
    from ..models.hf.rolling import Rolling, prefix_token
    from ..runs.units import select_examples

    block = int(model.config.block_size)
    texts = [docs[i] for i in select_examples(len(docs), eval_max, 0).tolist()]
    device = next(model.parameters()).device
    return card_metrics(model, tokenizer, texts, Rolling(block, block, prefix_token(tokenizer)), device=device)


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on biases, norms, embeddings' positions, BSA widths and GRC lambdas (nanoGPT rule)."""
    decay, no_decay, seen = [], [], set()
    for _, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and p.shape[0] > 1 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _build_task(
    name: str, size: str, spec: ModelSpec, data: str, recipe: Recipe, seed: int, out: Path, overrides: dict
) -> _Task:
    """The seeded model and its data; an LM is rebuilt (same seed) when the tokenizer fixes another vocabulary."""
    torch.manual_seed(seed)
    task = _Task(build_from_spec(spec).train(), spec, data, recipe, seed, out)
    if spec.family is Family.LM and task.tokenizer.vocab_size != spec.config.vocab_size:
        spec = resolve_spec(name, size, **{**overrides, "vocab_size": task.tokenizer.vocab_size})
        torch.manual_seed(seed)
        task.model, task.spec = build_from_spec(spec).train(), spec
    if recipe.init is not None:
        _load_init(task.model, recipe.init, name, size)
    return task


def _load_init(model: nn.Module, init: str, name: str, size: str) -> None:
    """Fine-tuning: the starting weights from ``init`` (``zoo`` or a checkpoint folder of the same model; the
    loader checks the card's name, size and SHA-256)."""
    from ..models.checkpoint import load_checkpoint

    start = load_checkpoint(init, name=name, size=size)
    model.load_state_dict(start.state_dict())


def card_wall_s(card: dict[str, Any]) -> float:
    """The training time a card records (robfilt's checkpoints keep it in the recipe, fine-tunes at the top)."""
    return float((card.get("recipe") or {}).get("wall_time_s", card.get("wall_time_s", 0.0)))


def _restore(
    state_dir: Path, task: _Task, opt: torch.optim.Optimizer, fingerprint: dict
) -> tuple[int, float, list[int]]:
    """(step, wall seconds so far, torch thread counts used so far) of a killed run, refusing state from another
    recipe, model, data or seed."""
    old_state = previous_state(state_dir)
    if not state_dir.exists() and old_state.exists():
        # killed between the two renames of save_state: the previous complete state is in .old
        old_state.rename(state_dir)
    if not state_dir.exists():
        return 0, 0.0, []
    meta = load_state(state_dir, task.model, opt)
    check_same_training(state_dir.parent, _flat(meta.get("fingerprint") or {}), _flat(fingerprint), finished=False)
    return meta["step"], meta.get("wall_time_s", 0.0), list(meta.get("torch_threads", []))


def _flat(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """A training's fingerprint with its recipe's fields beside the rest, so a difference is named by field."""
    return {**{k: v for k, v in fingerprint.items() if k != "recipe"}, **(fingerprint.get("recipe") or {})}


def _fit(
    name: str,
    task: _Task,
    opt: torch.optim.Optimizer,
    start: tuple[int, float, list[int]],
    state_dir: Path,
    fingerprint: dict,
    progress: ProgressHook,
) -> tuple[float | None, float, list[int]]:
    """The optimisation loop from ``start`` = (step, wall seconds, thread counts); state is saved every epoch (or
    --ckpt-every).

    Returns the running loss, the total wall time and every torch thread count the training ran with: float
    reductions split across threads add in another order, so the same seed gives other weights under another
    count, and the card says which counts made these."""
    recipe, model = task.recipe, task.model
    total = task.total_steps()
    every = recipe.ckpt_every or (task.steps_per_epoch() if task.spec.family is Family.IMAGE else 200)
    label = "acc" if task.spec.family is Family.IMAGE else "ppl"
    (step, wall_before, threads), t0, run_loss = start, time.perf_counter(), None
    threads = sorted({*threads, torch.get_num_threads()})
    while step < total:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, recipe)
        x, y = task.batch(step)
        loss, metric = task.loss(x, y)
        if not torch.isfinite(loss):
            raise RobfiltError(f"training diverged at step {step} (loss {loss.item()}); lower --lr.")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        step += 1
        run_loss = loss.item() if run_loss is None else 0.95 * run_loss + 0.05 * loss.item()
        progress(f"train {name}", step, total, f"loss {run_loss:.3f} {label} {metric:.3f}")
        if step % max(1, total // 10) == 0:
            log.info("%s step %d/%d: loss %.3f, batch %s %.3f", name, step, total, run_loss, label, metric)
        if step % every == 0 or step == total:
            wall = wall_before + time.perf_counter() - t0
            meta = {"fingerprint": fingerprint, "wall_time_s": wall, "torch_threads": threads}
            save_state(state_dir, model, opt, step, meta)
    return run_loss, wall_before + time.perf_counter() - t0, threads


def _wanted(name: str, size: str, data: str, seed: int, recipe: Recipe) -> dict[str, Any]:
    """What a training is, for comparing it with a finished one: model, data, seed and the whole recipe."""
    return {"name": name, "size": size, "data": data, "seed": seed, **dataclasses.asdict(recipe)}


def _recorded(card: dict[str, Any]) -> dict[str, Any]:
    """The same settings as a checkpoint card records them (a field the card predates at its neutral value)."""
    recipe = card.get("recipe") or {}
    fields = {f.name: card_recipe_value(recipe, f.name) for f in dataclasses.fields(Recipe)}
    return {"name": card.get("name"), "size": card.get("size"), "data": recipe.get("data"),
            "seed": recipe.get("seed"), **fields}  # fmt: skip


def train(
    name: str,
    size: str = "micro",
    data: str | None = None,
    recipe: Recipe | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    command: str | None = None,
    progress: ProgressHook | None = None,
    spelt: Collection[str] = (),
    **overrides: Any,
) -> TrainResult:
    """Train ``name`` from scratch (or resume) and write a checkpoint folder with its card.

    The card records the exact ``command``, the data checksum, the recipe, the metrics and the wall time.
    ``spelt``: the recipe options the caller spelt out (the command line's); one that means nothing for this kind
    of model is refused even at its default value (:meth:`~.recipe.Recipe.check_fits`). ``resume`` on a finished
    training returns it only when it was made with this recipe, data and seed.
    """
    spec = resolve_spec(name, size, **overrides)
    recipe = dataclasses.replace(recipe or DEFAULT_RECIPES[spec.family])
    recipe.validate()
    if spec.family is Family.LM and recipe.steps is None:
        raise RobfiltError("LM training is step-based; pass --steps.")
    recipe.check_fits(Trainee(spec.family.value), spelt)
    data = data or ("fashion-mnist" if spec.family is Family.IMAGE else "austen")
    out = Path(out or f"runs/train/{name}-{size}-s{seed}")
    state_dir = out / STATE_DIR
    with training_folder(out, resume, overwrite) as finished:
        if finished is not None:
            check_same_training(out, _recorded(finished), _wanted(name, size, data, seed, recipe), finished=True)
            return TrainResult(out, name, size, finished.get("metrics", {}), card_wall_s(finished), recipe)
        task = _build_task(name, size, spec, data, recipe, seed, out, overrides)
        model, spec = task.model, task.spec
        opt = torch.optim.AdamW(_param_groups(model, recipe.weight_decay), lr=recipe.lr, betas=(0.9, 0.95))
        fingerprint = {
            "name": name,
            "size": size,
            "data": data,
            "seed": seed,
            "recipe": dataclasses.asdict(recipe),
            "overrides": overrides,
        }
        start = _restore(state_dir, task, opt, fingerprint) if resume else (0, 0.0, [])
        if start[0]:
            log.info("resuming %s at step %d/%d", name, start[0], task.total_steps())
        run_loss, wall, threads = _fit(name, task, opt, start, state_dir, fingerprint, progress or null_progress)
        metrics = {"train_loss": run_loss, **task.evaluate()}
        model.eval()
        recipe_card = {
            **dataclasses.asdict(recipe),
            "data": data,
            "data_checksum": task.data_checksum,
            "seed": seed,
            "total_steps": task.total_steps(),
            "wall_time_s": round(wall, 1),
            "torch_threads": threads,
            "command": command or f"robfilt train --model {name} --size {size} --seed {seed} --out {out}",
            "rebuild_command": rebuild_command(name, size, data, seed, out, recipe, family=spec.family),
        }
        save_checkpoint(model, out, recipe=recipe_card, metrics=metrics, spec=spec)
        shutil.rmtree(state_dir, ignore_errors=True)
        log.info("trained %s in %.0fs", name, wall)
        return TrainResult(out, name, size, metrics, wall, recipe)


__all__ = [
    "DEFAULT_RECIPES",
    "Recipe",
    "TrainResult",
    "add_gaussian_noise",
    "card_recipe_value",
    "lr_at",
    "recipe_identity",
    "train",
]
