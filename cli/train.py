"""robfilt train: train a registry model from scratch, or convert and fine-tune a Hugging Face causal LM."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer

from robustbench_filters.configs import RunConfig
from robustbench_filters.core.surface import Surface
from robustbench_filters.train.recipe import DEFAULT_RECIPES, FINETUNE_FIELDS, HF_RECIPE, Recipe

from ._common import (
    JsonOpt,
    OverwriteOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    console,
    print_json,
    progress_bar,
    setup_logging,
    setup_threads,
)
from ._options import OUTPUT_PANEL, config_options


def _family_defaults() -> dict[str, str]:
    """The recipe defaults as the help shows them: one value, or each recipe's where they differ (images, robfilt's
    LMs trained from scratch, hf: fine-tuning; each is the recipe that command actually uses)."""
    image, lm = (DEFAULT_RECIPES[f] for f in DEFAULT_RECIPES)
    shown = {}
    for name in Recipe.__dataclass_fields__:
        values = [("images", getattr(image, name)), ("LMs", getattr(lm, name))]
        if name in FINETUNE_FIELDS:
            values.append(("hf: fine-tuning", getattr(HF_RECIPE, name)))
        if len({repr(v) for _, v in values}) == 1:
            shown[name] = _shown(values[0][1])
        else:
            shown[name] = ", ".join(f"{_shown(v)} for {who}" for who, v in values)
    return shown


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


@config_options(Recipe, shown_defaults=_family_defaults())
@config_options(RunConfig, only=("size", "data", "seed"))
def train_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model", "-m", help="Model name (deit-grc, lm-bsa) or hf:DIR (a Hugging Face causal LM).",
            rich_help_panel="Model",
        ),
    ],
    out: Annotated[
        str | None, typer.Option("--out", help="Output folder (checkpoint + card).", rich_help_panel=OUTPUT_PANEL)
    ] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    **options: Any,
) -> None:  # fmt: skip
    """Train a model on bundled (or your) data and write a safetensors checkpoint with its card."""
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.configs import read
    from robustbench_filters.core.seeds import check_seed

    setup_logging(quiet, json_out)
    given = read(options, Surface.CLI)
    size, data, seed = given.pop("size", None), given.pop("data", None), check_seed(given.pop("seed", 0))
    command = "robfilt " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if model.strip().startswith("hf:") or "=hf:" in model:
        result = _train_hf(model, data, given, seed, out, resume, overwrite, command, quiet or json_out)
    else:
        result = _train_registry(model, size, data, given, seed, out, resume, overwrite, command, quiet or json_out)
    _report(result, json_out)


def _train_registry(
    model: str, size: str | None, data: str | None, given: dict[str, Any], seed: int, out: str | None,
    resume: bool, overwrite: bool, command: str, quiet: bool,
) -> Any:  # fmt: skip
    """Train a registry model from scratch with its family's recipe, changed by the options given."""
    import dataclasses

    from robustbench_filters.core.names import MODEL_NAMES, parse_name
    from robustbench_filters.core.parsing import parse_names
    from robustbench_filters.train.loop import train

    (name,) = parse_names(model, "model", MODEL_NAMES)
    family, _, _ = parse_name(name)
    spelt = tuple(given)  # checked against the model kind even at their default values
    if "epochs" in given or "steps" in given:  # one of them replaces the family's default length
        given = {"epochs": None, "steps": None, **given}
    recipe = dataclasses.replace(DEFAULT_RECIPES[family], **given)
    with progress_bar(quiet) as hook:
        return train(name, size or "micro", data=data, recipe=recipe, seed=seed, out=out, resume=resume,
                     overwrite=overwrite, command=command, progress=hook, spelt=spelt)  # fmt: skip


def _train_hf(
    model: str, data: str | None, given: dict[str, Any], seed: int, out: str | None, resume: bool, overwrite: bool,
    command: str, quiet: bool,
) -> Any:  # fmt: skip
    """Convert and fine-tune a Hugging Face causal LM (robustbench_filters.train.hf) with HF_RECIPE, changed by
    the options given."""
    import dataclasses

    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.core.surface import flag
    from robustbench_filters.models.ref import ModelKind, parse_model_ref
    from robustbench_filters.train.hf import train_hf

    if "epochs" in given:
        raise RobfiltError(f"fine-tuning is step-based; pass {flag('steps')} instead of {flag('epochs')}.")
    ref = parse_model_ref(model)
    if ref.kind is not ModelKind.HF:
        raise RobfiltError(f"{flag('models')} {model!r} is not an hf: reference; write hf:<folder>.")
    spelt = tuple(given)  # checked against hf: fine-tuning even at their default values
    tokenizer, variant, max_length = (
        given.pop("tokenizer", None),
        given.pop("variant", None),
        given.pop("max_length", None),
    )
    recipe = dataclasses.replace(HF_RECIPE, **given)
    with progress_bar(quiet) as hook:
        return train_hf(ref.target, variant, data=data or "austen", recipe=recipe, seed=seed, out=out, resume=resume,
                        overwrite=overwrite, tokenizer=tokenizer, max_length=max_length, conversion=dict(ref.args),
                        command=command, progress=hook, spelt=spelt)  # fmt: skip


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
        console().print(_metrics_table(result.metrics))
        for name, value in result.metrics.items():
            if isinstance(value, str) and " " in value:  # a sentence (how the metrics were computed)
                console().print(f"{name}: {value}", markup=False, style="dim")


def _metrics_table(metrics: dict[str, Any]) -> Any:
    """The card's metrics, one per row (numbers to 4 significant digits)."""
    from rich.table import Table

    table = Table(title="metrics (card.json)", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        if not (isinstance(value, str) and " " in value):
            table.add_row(name, f"{value:.4g}" if isinstance(value, float) else str(value))
    return table


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
