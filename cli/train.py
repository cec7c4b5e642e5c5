"""robfilt train."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer

from robustbench_filters.errors import RobfiltError
from robustbench_filters.names import MODEL_NAMES, parse_name
from robustbench_filters.parsing import parse_names

from ._common import JsonOpt, QuietOpt, SeedOpt, console, print_json, progress_bar, setup_logging


def train_cmd(
    model: Annotated[
        str, typer.Option("--model", help="Model name (deit-grc, lm-bsa) or hf:DIR (a Hugging Face causal LM).")
    ],
    size: Annotated[str, typer.Option("--size", help="Model size (micro for the bundled data).")] = "micro",
    data: Annotated[
        str | None, typer.Option("--data", help="Dataset spec; default: bundled fashion-mnist / austen.")
    ] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", help="Epochs (images).")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Optimizer steps (wins over --epochs).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate.")] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="LM tokenizer: char (default) or bpe; hf: a tokenizer folder.")
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option("--variant", help="hf: models: convert to bsa, grc or bsa-grc before fine-tuning."),
    ] = None,
    max_length: Annotated[
        int | None,
        typer.Option("--max-length", help="hf: models: tokens per training window (default: positions, at most 256)."),
    ] = None,
    ckpt_every: Annotated[int | None, typer.Option("--ckpt-every", help="Steps between resumable states.")] = None,
    noise_sigma: Annotated[
        float | None,
        typer.Option(
            "--noise-sigma",
            help="Images: add N(0, S^2) noise to the [0, 1] inputs while training (for randomized smoothing).",
        ),
    ] = None,
    seed: SeedOpt = 0,
    out: Annotated[str | None, typer.Option("--out", help="Output folder (checkpoint + card).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a killed run in --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run in --out.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a model on bundled (or your) data and write a safetensors checkpoint with its card."""
    import dataclasses

    from robustbench_filters.train import DEFAULT_RECIPES, train

    setup_logging(quiet, json_out)
    command = "robfilt " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if model.strip().startswith("hf:") or "=hf:" in model:
        if epochs is not None:
            raise RobfiltError("fine-tuning is step-based; pass --steps instead of --epochs.")
        given = dict(steps=steps, batch_size=batch_size, lr=lr, ckpt_every=ckpt_every, noise_sigma=noise_sigma)
        changes = {k: v for k, v in given.items() if v is not None}
        hf = _train_hf(model, variant, data, changes, tokenizer, max_length, seed, out, resume, overwrite, command,
                       quiet or json_out)  # fmt: skip
        _report(hf, json_out)
        return
    if variant is not None or max_length is not None:
        raise RobfiltError("--variant and --max-length apply to hf: models; registry names carry their variant.")
    (name,) = parse_names(model, "model", MODEL_NAMES)
    family, _, _ = parse_name(name)
    base = DEFAULT_RECIPES[family]
    changes = {
        k: v
        for k, v in dict(
            batch_size=batch_size, lr=lr, tokenizer=tokenizer, ckpt_every=ckpt_every, noise_sigma=noise_sigma
        ).items()
        if v is not None
    }
    if epochs is not None or steps is not None:
        changes.update(epochs=epochs, steps=steps)
    recipe = dataclasses.replace(base, **changes)
    with progress_bar(quiet or json_out) as hook:
        result = train(
            name,
            size,
            data=data,
            recipe=recipe,
            seed=seed,
            out=out,
            resume=resume,
            overwrite=overwrite,
            command=command,
            progress=hook,
        )
    _report(result, json_out)


def _report(result: Any, json_out: bool) -> None:
    """The trained folder and its metrics (``result``: a train.TrainResult)."""
    info = {
        "out": str(result.out),
        "name": result.name,
        "size": result.size,
        "metrics": result.metrics,
        "wall_time_s": result.wall_time_s,
    }
    if json_out:
        print_json(info)
    else:
        size = f" ({result.size})" if result.size else ""
        console().print(f"trained {result.name}{size} in {result.wall_time_s:.0f}s -> {result.out}", markup=False)
        console().print(f"metrics: {result.metrics}", markup=False)


def _train_hf(
    model: str,
    variant: str | None,
    data: str | None,
    changes: dict[str, Any],
    tokenizer: str | None,
    max_length: int | None,
    seed: int,
    out: str | None,
    resume: bool,
    overwrite: bool,
    command: str,
    quiet: bool,
) -> Any:
    """Convert and fine-tune a Hugging Face causal LM (robustbench_filters.hf.train); returns its TrainResult."""
    import dataclasses

    from robustbench_filters.hf.train import HF_RECIPE, train_hf
    from robustbench_filters.models.ref import ModelKind, parse_model_ref

    ref = parse_model_ref(model)
    if ref.kind is not ModelKind.HF:
        raise RobfiltError(f"--model {model!r} is not an hf: reference; write hf:<folder>.")
    recipe = dataclasses.replace(HF_RECIPE, **changes)
    with progress_bar(quiet) as hook:
        return train_hf(ref.target, variant, data=data or "austen", recipe=recipe, seed=seed, out=out, resume=resume,
                        overwrite=overwrite, tokenizer=tokenizer, max_length=max_length, conversion=dict(ref.args),
                        command=command, progress=hook)  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
