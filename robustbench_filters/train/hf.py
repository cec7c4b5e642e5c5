"""``robfilt train --model hf:DIR --variant bsa|grc|bsa-grc|none``: convert a Hugging Face causal LM and fine-tune it.

The model is loaded from its folder (:mod:`..models.hf.load`), converted (:mod:`..models.hf.convert`; ``--variant none`` fine-tunes
the plain model with the same recipe, the baseline a conversion is compared with), then trained with robfilt's loop
(:func:`robustbench_filters.train.loop._fit`: AdamW, warmup and cosine decay, gradient clipping, resumable safetensors
state every ``--ckpt-every`` steps). Batches are random windows of ``--max-length`` tokens (default: the model's
positions, at most 256) of the training split's documents, drawn from a generator seeded by (seed, step); dropout
masks come from the global generator reseeded with (seed, step) before each step. So a killed run resumes to the
same weights as an uninterrupted one.

The output folder is what ``--model hf:OUT`` loads: ``save_pretrained`` files (``config.json`` with the ``robfilt``
conversion record, ``model.safetensors``), the tokenizer, and robfilt's ``card.json`` (source, variant, the
fine-tuning recipe, data checksum, the exact command, and the test documents' perplexities computed by the function
``robfilt attack`` scores clean rows with, in the windows it uses by default: the same numbers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import shutil
from collections.abc import Collection
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
from .loop import TrainResult, _fit, _param_groups, _restore, card_wall_s
from .recipe import FINETUNE_FIELDS, HF_RECIPE, NO_VARIANT, Recipe, Trainee
from .state import STATE_DIR, check_same_training, training_folder

log = logging.getLogger(__name__)

CARD = "card.json"
CARD_FORMAT = "robfilt-hf-finetune"
#: Default training window: the model's positions, at most this many tokens (--max-length sets it).
TRAIN_WINDOW = 256


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
        return int(self.recipe.steps or 0)

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


def _recipe(recipe: Recipe | None, spelt: Collection[str]) -> Recipe:
    """The fine-tuning recipe, checked: step-based, and no option that only image models or training from scratch
    honour (``spelt``: the options the caller spelt out)."""
    recipe = dataclasses.replace(recipe or HF_RECIPE)
    recipe.validate()
    if recipe.steps is None:
        raise RobfiltError("fine-tuning is step-based; pass --steps.")
    recipe.check_fits(Trainee.HF, spelt)
    return recipe


def _conversion(variant: str | None, conversion: dict[str, Any] | None) -> dict[str, Any]:
    """The conversion arguments (``variant`` and settings); empty for the plain model (``--variant none``)."""
    args = dict(conversion or {})
    if variant == NO_VARIANT:
        if args:
            raise RobfiltError("--variant none fine-tunes the plain model; drop the conversion arguments.")
        return args
    if variant is not None:
        if args.get("variant", variant) != variant:
            raise RobfiltError(f"--variant {variant} and variant={args['variant']} in the reference differ; give one.")
        args["variant"] = variant
    if args and "variant" not in args:
        raise RobfiltError(f"conversion settings need --variant ({', '.join(VARIANTS)}).")
    return args


@dataclass(frozen=True)
class _Data:
    """The training stream and the test documents, both in the model's tokens."""

    train_ids: torch.Tensor
    test_docs: tuple[str, ...]
    checksum: str

    @classmethod
    def load(cls, data: str, lm: HFCausalLM, block: int) -> _Data:
        from ..data import encode_corpus, load_documents, load_text

        train_text = load_text(data, split="train")
        ids = encode_corpus(train_text, lm.tokenizer)
        if len(ids) <= block:
            raise RobfiltError(f"the {data} train split has {len(ids)} tokens, fewer than --max-length {block} + 1; "
                               "use more text or a smaller --max-length.")  # fmt: skip
        test = load_documents(data, "test")
        log.info("fine-tuning on %s's train split (%d tokens); the card scores %s", data, len(ids), test.describe())
        return cls(ids, test.texts, hashlib.sha256(train_text.encode()).hexdigest())


def _test_metrics(lm: HFCausalLM, docs: tuple[str, ...], eval_max: int | None) -> dict[str, Any]:
    """The card's test perplexities: the metric code of ``robfilt attack``, in the windows it uses by default, on the
    test documents (``eval_max`` of them: those ``robfilt attack -n eval_max --seed 0`` selects)."""
    from ..models.hf.load import wrap_model
    from ..models.hf.perplexity import card_metrics
    from ..runs.units import select_examples

    docs = tuple(docs[i] for i in select_examples(len(docs), eval_max, 0).tolist())
    scored = wrap_model(lm.hf, lm.tokenizer)  # the default window, not the training one
    lm.eval()
    try:
        return card_metrics(scored, lm.tokenizer, docs, scored.rolling, device=next(lm.parameters()).device)
    finally:
        lm.train()


def _rebuild_command(target: str, args: dict[str, Any], data: str, seed: int, out: Path, recipe: Recipe) -> str:
    parts = ["robfilt train", f"--model hf:{target}", f"--variant {args.get('variant', NO_VARIANT)}"]
    parts += [f"--data {data}", f"--seed {seed}"]
    for name in ("steps", "batch_size", "lr", "ckpt_every"):
        value = getattr(recipe, name)
        if value != getattr(HF_RECIPE, name):
            parts.append(f"--{name.replace('_', '-')} {value}")
    return " ".join([*parts, f"--out {out}", "--overwrite"])


def _wanted(target: str, args: dict[str, Any], data: str, seed: int, block: int, recipe: Recipe) -> dict[str, Any]:
    """What a fine-tuning is, for comparing it with a finished one: source, variant, data, seed, window, recipe."""
    return {"source": f"hf:{target}", "variant": args.get("variant", NO_VARIANT), "data": data, "seed": seed,
            "max_length": block, **{k: getattr(recipe, k) for k in FINETUNE_FIELDS}}  # fmt: skip


def _recorded(card: dict[str, Any]) -> dict[str, Any]:
    """The same settings as a fine-tuning's card records them."""
    recipe = card.get("recipe") or {}
    return {"source": card.get("source"), "variant": card.get("variant"), "data": recipe.get("data"),
            "seed": recipe.get("seed"), "max_length": card.get("max_length"),
            **{k: recipe.get(k) for k in FINETUNE_FIELDS}}  # fmt: skip


def _card(lm: HFCausalLM, target: str, args: dict[str, Any], recipe: Recipe, block: int, run: dict[str, Any]) -> dict:
    """``card.json``: what was fine-tuned, how (only the settings fine-tuning uses), on what, and the test metrics."""
    rebuild = _rebuild_command(target, args, run["data"], run["seed"], run["out"], recipe)
    return {
        "format": CARD_FORMAT,
        "source": f"hf:{target}",
        "variant": lm.variant or NO_VARIANT,
        "conversion": lm.hf.config.to_dict().get("robfilt"),
        "max_length": block,
        "recipe": {**{k: getattr(recipe, k) for k in FINETUNE_FIELDS}, "max_length": block,
                   "tokenizer": f"{type(lm.tokenizer.hf).__name__} {lm.tokenizer.digest} ({lm.tokenizer.vocab_size} "
                                "tokens, saved with the model)",
                   "data": run["data"], "data_checksum": run["checksum"], "seed": run["seed"],
                   "total_steps": recipe.steps, "command": run["command"] or rebuild, "rebuild_command": rebuild},
        "metrics": run["metrics"],
        "wall_time_s": round(run["wall"], 1),
        "torch_threads": run["threads"],
        "versions": library_versions(),
    }  # fmt: skip


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
    spelt: Collection[str] = (),
) -> TrainResult:
    """Convert ``hf:<target>`` to ``variant`` (with ``conversion`` settings; ``none``: the plain model), fine-tune it
    on ``data``, save to ``out``. Returns the metrics (final running loss, the test documents' perplexities) and the
    folder. ``spelt``: the recipe options the caller spelt out, refused when fine-tuning cannot honour them."""
    from ..models.hf.load import load_hf, quiet_hub

    recipe, args = _recipe(recipe, spelt), _conversion(variant, conversion)
    out = Path(out or f"runs/train/hf-{Path(target).name}-{args.get('variant', NO_VARIANT)}-s{seed}")
    # load and convert first: a model, tokenizer or conversion that cannot work is refused before --out is touched
    lm = load_hf(target, tokenizer=tokenizer, max_length=max_length, base_dir=base_dir, conversion=args or None)
    block = max_length or min(lm.config.block_size, TRAIN_WINDOW)
    with training_folder(out, resume, overwrite) as finished:
        if finished is not None:
            check_same_training(out, _recorded(finished), _wanted(target, args, data, seed, block, recipe), True)
            return TrainResult(out, f"hf:{target}", "", finished.get("metrics", {}), card_wall_s(finished), recipe)
        d = _Data.load(data, lm, block)
        task = HFTask(lm.train(), d.train_ids, recipe, seed, block)
        opt = torch.optim.AdamW(_param_groups(lm, recipe.weight_decay), lr=recipe.lr, betas=(0.9, 0.95))
        fingerprint = {"source": f"hf:{target}", "conversion": args, "data": d.checksum, "seed": seed,
                       "max_length": block, "recipe": dataclasses.asdict(recipe)}  # fmt: skip
        state_dir = out / STATE_DIR
        start = _restore(state_dir, task, opt, fingerprint) if resume else (0, 0.0, [])  # type: ignore[arg-type]
        run_loss, wall, threads = _fit(f"hf:{target}", task, opt, start, state_dir, fingerprint,  # type: ignore[arg-type]
                                       progress or null_progress)  # fmt: skip
        metrics = {"train_loss": run_loss, **_test_metrics(lm, d.test_docs, recipe.eval_max)}
        lm.eval()
        with quiet_hub():
            lm.hf.save_pretrained(str(out))
            lm.tokenizer.save(out)
        run = {"data": data, "checksum": d.checksum, "seed": seed, "out": out, "command": command,
               "metrics": metrics, "wall": wall, "threads": threads}  # fmt: skip
        atomic_write_json(out / CARD, _card(lm, target, args, recipe, block, run))
        shutil.rmtree(state_dir, ignore_errors=True)
        log.info("fine-tuned hf:%s (%s) in %.0fs", target, lm.variant or "plain", wall)
        return TrainResult(out, f"hf:{target}", "", metrics, wall, recipe)


__all__ = ["CARD", "FINETUNE_FIELDS", "HF_RECIPE", "HFTask", "train_hf"]
