"""robfilt attack: image attacks, language-model attacks and corruptions, on the same examples for every model."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Annotated, Any

import typer

from robustbench_filters.names import attack_help
from robustbench_filters.parsing import parse_ints, parse_names, parse_numbers

from ._common import (
    MODEL_HELP,
    AllowFailedOpt,
    JsonOpt,
    QuietOpt,
    SeedOpt,
    console,
    exit_for_checks,
    is_primary,
    parse_model_list,
    print_json,
    progress_bar,
    setup_logging,
)
from ._render import render_summary


def attack_cmd(
    model: Annotated[str, typer.Option("--model", help=MODEL_HELP)] = "deit-grc",
    model_arg: Annotated[
        list[str] | None,
        typer.Option("--model-arg", help="key=value for every model's constructor, e.g. num_classes=10 (repeatable)."),
    ] = None,
    attack: Annotated[str | None, typer.Option("--attack", help=attack_help())] = None,
    eps: Annotated[
        str | None, typer.Option("--eps", help="Comma list on the [0,1] scale; fractions like 8/255 work.")
    ] = None,
    norm: Annotated[str | None, typer.Option("--norm", help="linf or l2 (default: the attack's own).")] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", help="Iterations for iterative attacks (default: each attack's own).")
    ] = None,
    step_size: Annotated[str | None, typer.Option("--step-size", help="PGD step; default 0.15*eps.")] = None,
    n_examples: Annotated[
        int | None,
        typer.Option(
            "--n-examples", help="Examples (seeded subset shared by all models; default 256 images / 64 sequences)."
        ),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="Examples per unit (default 128 images / 32 sequences).")
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Dataset spec (default: bundled fashion-mnist or austen).")
    ] = None,
    data_root: Annotated[str | None, typer.Option("--data-root", help="Root folder for external datasets.")] = None,
    img_size: Annotated[
        int | None, typer.Option("--img-size", help="Resize/crop images to this size (default: the model's own).")
    ] = None,
    num_workers: Annotated[
        int | None, typer.Option("--num-workers", help="Image decoding processes (default min(4, CPUs); 0: none).")
    ] = None,
    image_column: Annotated[str | None, typer.Option("--image-column", help="hf-disk: image column.")] = None,
    label_column: Annotated[str | None, typer.Option("--label-column", help="hf-disk: label column.")] = None,
    text_column: Annotated[str | None, typer.Option("--text-column", help="hf-disk: text column (LM).")] = None,
    size: Annotated[str, typer.Option("--size", help="Model size for registry names.")] = "micro",
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="zoo (default), a checkpoint folder, or none.")
    ] = "zoo",
    seed: SeedOpt = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda (under torchrun: each rank's GPU).")] = "cpu",
    amp: Annotated[
        str | None, typer.Option("--amp", help="bf16: clean evaluation under autocast (attacks stay fp32).")
    ] = None,
    amp_attacks: Annotated[
        bool, typer.Option("--amp-attacks", help="Run the attacks under --amp too (the summary records it).")
    ] = False,
    out: Annotated[str | None, typer.Option("--out", help="Run folder (default: runs/attack-<time>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a killed run in --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run in --out.")] = False,
    check_masking: Annotated[
        bool, typer.Option("--check-masking", help="Also run the gradient-masking checks.")
    ] = False,
    rate: Annotated[str | None, typer.Option("--rate", help="Word-swap contamination rates in [0,1] (LM).")] = None,
    replacement: Annotated[
        str | None, typer.Option("--replacement", help="Word-swap replacement token (LM; default AAA).")
    ] = None,
    eps_mode: Annotated[
        str | None, typer.Option("--eps-mode", help="LM eps: relative (to the embedding scale, default) or absolute.")
    ] = None,
    severity: Annotated[
        str | None, typer.Option("--severity", help="Corruption severities, comma list of 1-5 (default all).")
    ] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Accept a torch .pt state dict (read with weights_only=True).")
    ] = False,
    allow_failed_checks: AllowFailedOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Attack one or more models on the same examples and print a checked comparison table."""
    from robustbench_filters.api import measurement_for
    from robustbench_filters.configs import attack_config_class, build
    from robustbench_filters.runs.runner import run

    setup_logging(quiet, json_out)
    models = parse_model_list(model)
    attacks = parse_names(attack, "attack") if attack is not None else []
    given: dict[str, Any] = {
        "eps": tuple(parse_numbers(eps, "eps", lo=0.0)) if eps is not None else None,
        "norm": norm,
        "steps": steps,
        "step_size": parse_numbers(step_size, "step size", lo=0.0)[0] if step_size is not None else None,
        "n_examples": n_examples,
        "batch_size": batch_size,
        "data": data,
        "data_root": data_root,
        "amp": amp,
        "amp_attacks": amp_attacks or None,
        "check_masking": check_masking or None,
        "rates": tuple(parse_numbers(rate, "rate", lo=0.0, hi=1.0)) if rate is not None else None,
        "replacement": replacement,
        "eps_mode": eps_mode,
        "severities": tuple(parse_ints(severity, "severity", lo=0, hi=5)) if severity is not None else None,
        "allow_pickle": allow_pickle or None,
        "model_args": tuple(model_arg) if model_arg else None,
        "img_size": img_size,
        "num_workers": num_workers,
        "image_column": image_column,
        "label_column": label_column,
        "text_column": text_column,
    }
    options = {k: v for k, v in given.items() if v is not None}
    common = {"models": tuple(models), **({"attacks": tuple(attacks)} if attacks else {}), "seed": seed,
              "size": size, "checkpoint": checkpoint, "device": device}  # fmt: skip
    config = build(attack_config_class(models, attacks), {**common, **options})
    out_dir = Path(out) if out else Path("runs") / f"attack-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    with progress_bar(quiet or json_out) as hook:
        result = run(measurement_for(config), out=out_dir, resume=resume, overwrite=overwrite, progress=hook)
    if not is_primary():  # under torchrun, rank 0 alone prints the merged result
        return
    if json_out:
        print_json({"out": str(result.out), **result.summary})
    else:
        render_summary(result.summary)
        console().print(f"run folder: {result.out}", markup=False, style="dim")
    exit_for_checks(result.summary, allow_failed_checks)


def register(app: typer.Typer) -> None:
    app.command("attack")(attack_cmd)
