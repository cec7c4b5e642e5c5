"""``robfilt train --model hf:DIR --variant bsa|grc|bsa-grc``: convert a Hugging Face causal LM and fine-tune it.

The model is loaded from its folder (:mod:`.load`), converted (:mod:`.convert`; no ``--variant`` fine-tunes it
as it is), then trained with robfilt's loop (:func:`robustbench_filters.train.loop._fit`: AdamW, warmup and cosine decay,
gradient clipping, resumable safetensors state every ``--ckpt-every`` steps). Batches are random windows of
``--max-length`` tokens (default: the model's positions, at most 256) of the training split, drawn from a generator seeded by (seed, step); dropout masks come
from the global generator reseeded with (seed, step) before each step. So a killed run resumes to the same
weights as an uninterrupted one.

The output folder is what ``--model hf:OUT`` loads: ``save_pretrained`` files (``config.json`` with the ``robfilt``
conversion record, ``model.safetensors``), the tokenizer, and robfilt's ``card.json`` (source, variant, recipe,
data checksum, the exact command, and lm-eval's perplexities of the test split as one document).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.io import atomic_write_json
from ..core.progress import ProgressHook, null_progress
from ..core.seeds import derived_seed
from ..core.versions import library_versions
from ..models.hf.adapter import HFCausalLM
from ..models.hf.convert import VARIANTS
from ..runs.lock import RunLock
from ..runs.outfolder import remove_files
from ..runs.prepare import prepare_training_out
from .loop import STATE_DIR, TrainResult, _finished, _fit, _param_groups, _restore
from .recipe import Recipe

log = logging.getLogger(__name__)

CARD = "card.json"
CARD_FORMAT = "robfilt-hf-finetune"
#: Default training window: the model's positions, at most this many tokens (--max-length sets it).
TRAIN_WINDOW = 256
#: Fine-tuning defaults (a pretrained model needs fewer steps and a smaller learning rate than training from scratch).
HF_RECIPE = Recipe(steps=200, batch_size=8, lr=3e-4, weight_decay=0.1, augment=False, ckpt_every=50)


@dataclass
class _Spec:
    family: Family = Family.LM


class HFTask:
    """What robfilt's training loop needs from a task: batches, the loss and the step count."""

    def __init__(self, lm: HFCausalLM, train_ids: torch.Tensor, recipe: Recipe, seed: int, block: int) -> None:
        self.model, self.recipe, self.seed, self.spec = lm, recipe, seed, _Spec()
        self.train_ids = train_ids
        self.block = block

    def total_steps(self) -> int:
        return int(self.recipe.steps)

    def steps_per_epoch(self) -> int:
        return max(1, len(self.train_ids) // (self.recipe.batch_size * self.block))

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        from ..data import get_batch

        torch.manual_seed(derived_seed(self.seed, 1_000_003, step))  # dropout masks of this step
        return get_batch(self.train_ids, self.block, self.recipe.batch_size, torch.Generator().manual_seed(step + 1))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        return loss, math.exp(min(loss.item(), 20.0))


def _rebuild_command(target: str, args: dict[str, Any], data: str, seed: int, out: Path, recipe: Recipe) -> str:
    parts = ["robfilt train", f"--model hf:{target}"]
    parts += [f"--variant {args['variant']}"] if args.get("variant") else []
    parts += [f"--data {data}", f"--seed {seed}"]
    for name in ("steps", "batch_size", "lr", "ckpt_every"):
        value = getattr(recipe, name)
        if value != getattr(HF_RECIPE, name):
            parts.append(f"--{name.replace('_', '-')} {value}")
    return " ".join([*parts, f"--out {out}", "--overwrite"])


def _evaluate(lm: HFCausalLM, text: str) -> dict[str, float]:
    """lm-eval's metrics of the test split as one document (rolling windows)."""
    from ..models.hf.perplexity import evaluate_perplexity

    lm.eval()
    try:
        result = evaluate_perplexity(lm, [text])
    finally:
        lm.train()
    return {f"test_{k}": v for k, v in result.metrics().items() if k in ("word_perplexity", "byte_perplexity",
            "bits_per_byte", "token_perplexity", "n_tokens")}  # fmt: skip


def train_hf(
    target: str,
    variant: str | None = None,
    *,
    data: str = "austen",
    recipe: Recipe | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    tokenizer: Any = None,
    max_length: int | None = None,
    conversion: dict[str, Any] | None = None,
    base_dir: str | Path | None = None,
    command: str | None = None,
    progress: ProgressHook | None = None,
) -> TrainResult:
    """Convert ``hf:<target>`` to ``variant`` (with ``conversion`` settings), fine-tune it on ``data``, save to ``out``.

    Returns the metrics (final running loss, lm-eval perplexities of the test split) and the folder.
    """
    from ..data import encode_corpus, load_text
    from ..models.hf.load import load_hf, quiet_hub

    recipe = dataclasses.replace(recipe or HF_RECIPE)
    recipe.validate()
    if recipe.steps is None:
        raise RobfiltError("fine-tuning is step-based; pass --steps.")
    if recipe.noise_sigma:
        raise RobfiltError("--noise-sigma is for image models (Gaussian noise on pixels); drop it for LM training.")
    args = dict(conversion or {})
    if variant is not None:
        if args.get("variant", variant) != variant:
            raise RobfiltError(f"--variant {variant} and variant={args['variant']} in the reference differ; give one.")
        args["variant"] = variant
    if args and "variant" not in args:
        raise RobfiltError(f"conversion settings need --variant ({', '.join(VARIANTS)}).")
    out = Path(out or f"runs/train/hf-{Path(target).name}-{args.get('variant', 'finetune')}-s{seed}")
    # load and convert first: a model, tokenizer or conversion that cannot work is refused before --out is touched
    lm = load_hf(target, tokenizer=tokenizer, max_length=max_length, base_dir=base_dir, conversion=args or None)
    replaced = prepare_training_out(out, resume, overwrite, STATE_DIR)
    lock = RunLock(out)
    lock.acquire()
    try:
        remove_files(out, replaced)  # an earlier training's own files, nothing else
        if resume and _finished(out):
            card = json.loads((out / CARD).read_text())
            log.info("%s is already trained; nothing to resume", out)
            return TrainResult(out, f"hf:{target}", "", card.get("metrics", {}), card.get("wall_time_s", 0.0), recipe)
        train_text, test_text = load_text(data, split="train"), load_text(data, split="test")
        block = max_length or min(lm.config.block_size, TRAIN_WINDOW)
        task = HFTask(lm.train(), encode_corpus(train_text, lm.tokenizer), recipe, seed, block)
        if len(task.train_ids) <= task.block:
            raise RobfiltError(f"the {data} train split has {len(task.train_ids)} tokens, fewer than --max-length "
                               f"{task.block} + 1; use more text or a smaller --max-length.")  # fmt: skip
        opt = torch.optim.AdamW(_param_groups(lm, recipe.weight_decay), lr=recipe.lr, betas=(0.9, 0.95))
        checksum = hashlib.sha256(train_text.encode()).hexdigest()
        fingerprint = {"source": f"hf:{target}", "conversion": args, "data": checksum, "seed": seed,
                       "max_length": task.block, "recipe": dataclasses.asdict(recipe)}  # fmt: skip
        state_dir = out / STATE_DIR
        start = _restore(state_dir, task, opt, fingerprint) if resume else (0, 0.0, [])  # type: ignore[arg-type]
        run_loss, wall, threads = _fit(
            f"hf:{target}", task, opt, start, state_dir, fingerprint, progress or null_progress
        )  # type: ignore[arg-type]
        metrics = {"train_loss": run_loss, **_evaluate(lm, test_text)}
        lm.eval()
        with quiet_hub():
            lm.hf.save_pretrained(str(out))
            lm.tokenizer.save(out)
        card = {
            "format": CARD_FORMAT,
            "source": f"hf:{target}",
            "variant": lm.variant,
            "conversion": lm.hf.config.to_dict().get("robfilt"),
            "max_length": task.block,
            "recipe": {**dataclasses.asdict(recipe), "data": data, "data_checksum": checksum, "seed": seed,
                       "total_steps": task.total_steps(), "command": command or _rebuild_command(
                           target, args, data, seed, out, recipe),
                       "rebuild_command": _rebuild_command(target, args, data, seed, out, recipe)},
            "metrics": metrics,
            "wall_time_s": round(wall, 1),
            "torch_threads": threads,
            "versions": library_versions(),
        }  # fmt: skip
        atomic_write_json(out / CARD, card)
        shutil.rmtree(state_dir, ignore_errors=True)
        log.info("fine-tuned hf:%s (%s) in %.0fs: %s", target, lm.variant or "stock", wall, metrics)
        return TrainResult(out, f"hf:{target}", "", metrics, wall, recipe)
    finally:
        lock.release()


__all__ = ["CARD", "HF_RECIPE", "HFTask", "train_hf"]
