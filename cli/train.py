"""robfilt train."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer

from robustbench_filters.configs import RunConfig
from robustbench_filters.names import MODEL_NAMES
from robustbench_filters.recipe import DEFAULT_RECIPES, Recipe
from robustbench_filters.surface import Surface

from ._common import JsonOpt, OverwriteOpt, QuietOpt, ResumeOpt, console, print_json, progress_bar, setup_logging
from ._options import OUTPUT_PANEL, config_options


def _family_defaults() -> dict[str, str]:
    """The recipe defaults as the help shows them: one value, or the image and LM values where they differ."""
    image, lm = (DEFAULT_RECIPES[f] for f in DEFAULT_RECIPES)
    shown = {}
    for name in Recipe.__dataclass_fields__:
        a, b = getattr(image, name), getattr(lm, name)
        if a == b:
            shown[name] = "none" if a is None else str(a)
        else:
            shown[name] = f"{'none' if a is None else a} for images, {'none' if b is None else b} for LMs"
    return shown


@config_options(Recipe, shown_defaults=_family_defaults())
@config_options(RunConfig, only=("size", "data", "seed"))
def train_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Model name, e.g. deit-grc or lm-bsa.", rich_help_panel="Model")
    ],
    out: Annotated[
        str | None, typer.Option("--out", help="Output folder (checkpoint + card).", rich_help_panel=OUTPUT_PANEL)
    ] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    **options: Any,
) -> None:
    """Train a model on bundled (or your) data and write a safetensors checkpoint with its card."""
    import dataclasses

    from robustbench_filters.configs import read
    from robustbench_filters.names import parse_name
    from robustbench_filters.parsing import parse_names
    from robustbench_filters.train import train

    setup_logging(quiet, json_out)
    (name,) = parse_names(model, "model", MODEL_NAMES)
    family, _, _ = parse_name(name)
    given = read(options, Surface.CLI)
    size, data, seed = given.pop("size", "micro"), given.pop("data", None), given.pop("seed", 0)
    if "epochs" in given or "steps" in given:  # one of them replaces the family's default length
        given = {"epochs": None, "steps": None, **given}
    recipe = dataclasses.replace(DEFAULT_RECIPES[family], **given)
    command = "robfilt " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with progress_bar(quiet or json_out) as hook:
        result = train(
            name, size, data=data, recipe=recipe, seed=seed, out=out, resume=resume, overwrite=overwrite,
            command=command, progress=hook,
        )  # fmt: skip
    info = {
        "out": str(result.out),
        "name": name,
        "size": size,
        "metrics": result.metrics,
        "wall_time_s": result.wall_time_s,
    }
    if json_out:
        print_json(info)
    else:
        console().print(f"trained {name} ({size}) in {result.wall_time_s:.0f}s -> {result.out}", markup=False)
        console().print(f"metrics: {result.metrics}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
