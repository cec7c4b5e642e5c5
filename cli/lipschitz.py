"""robfilt lipschitz: lower bounds, certified upper bounds and per-layer profiles per model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from robustbench_filters.parsing import parse_number, parse_numbers

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
from ._render import render_checks


def _sci(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def _with_ci(entry: dict) -> str:
    """'12.3 [11.9, 12.8]': the mean lower bound and its 95% t-interval across examples (just the mean for one)."""
    lo, hi = entry.get("lower_mean_lo"), entry.get("lower_mean_hi")
    ci = f" [{_sci(lo)}, {_sci(hi)}]" if lo is not None and hi is not None else ""
    return _sci(entry["lower_mean"]) + ci


def lipschitz(
    model: Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP)],
    model_arg: Annotated[
        list[str] | None,
        typer.Option("--model-arg", help="key=value for every model's constructor, e.g. num_classes=10 (repeatable)."),
    ] = None,
    n_examples: Annotated[int, typer.Option("--n-examples", "-n", help="Examples per model.")] = 16,
    method: Annotated[str, typer.Option("--method", help="Lower bound: exact, power or ratio.")] = "exact",
    bounds: Annotated[
        bool, typer.Option("--bounds/--no-bounds", help="Certified global and local upper bounds (default on).")
    ] = True,
    per_layer: Annotated[bool, typer.Option("--per-layer", help="Per-block gains next to certified bounds.")] = False,
    gap: Annotated[
        bool,
        typer.Option("--gap", help="Show where certified bounds lose: empirical vs layerwise vs certified (slow)."),
    ] = False,
    gap_rho: Annotated[str, typer.Option("--gap-rho", help="Ball radii of the --gap rows (comma list).")] = "1e-3",
    data: Annotated[
        str | None,
        typer.Option("--data", help="fashion-mnist / austen (default per family) or synthetic (smoke tests)."),
    ] = None,
    size: Annotated[str, typer.Option("--size", help="Model size: micro, tiny, small, base.")] = "micro",
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="zoo, a checkpoint folder, or none (untrained weights).")
    ] = "zoo",
    rho: Annotated[
        str, typer.Option("--rho", help="l2 radius of the ball for local bounds and pair-ratio ascent.")
    ] = "0.1",
    batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per batch (and per resume unit).")] = 16,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per LM example.")] = 64,
    seed: SeedOpt = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda (under torchrun: each rank's GPU).")] = "cpu",
    out: Annotated[Path | None, typer.Option("--out", help="Write a run folder here.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run in --out.")] = False,
    allow_failed_checks: AllowFailedOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Lower bound (mean, max), certified upper bound and their ratio, per model.

    Inputs are [0, 1] pixels for image models and token embeddings for LMs (output: last-position logits).
    """
    from robustbench_filters.configs import LipschitzConfig
    from robustbench_filters.lipschitz.run import estimate_lipschitz

    setup_logging(quiet, json_out)
    radius = parse_number(rho, "--rho")
    config = LipschitzConfig(
        models=tuple(parse_model_list(model)), model_args=tuple(model_arg or ()), n_examples=n_examples,
        method=method, bounds=bounds, per_layer=per_layer, gap=gap,
        gap_rhos=tuple(parse_numbers(gap_rho, "--gap-rho", lo=0.0)), data=data, size=size, checkpoint=checkpoint,
        rho=radius, batch_size=batch_size, seq_len=seq_len, seed=seed, device=device,
    )  # fmt: skip
    with progress_bar(quiet or json_out) as hook:
        result = estimate_lipschitz(config=config, out=out, resume=resume, overwrite=overwrite, progress=hook)
    if not is_primary():  # under torchrun, rank 0 alone prints the merged result
        return
    if json_out:
        print_json({"path": str(result.path) if result.path else None, **result.summary})
        exit_for_checks(result.summary, allow_failed_checks)
        return
    render_lipschitz_summary(result.summary, f"{method}, l2, rho={radius:g}", per_layer, gap)
    render_checks(result.summary["checks"], result.summary["checks_summary"])
    if result.path is not None:
        console().print(f"run folder: {result.path}", markup=False)
    exit_for_checks(result.summary, allow_failed_checks)


def render_lipschitz_summary(summary: dict, setting: str, per_layer: bool, gap: bool) -> None:
    """Per model (and per block with ``per_layer``): the mean lower bound with its 95% interval across examples,
    the max lower bound, the certified local and global bounds; then the gap table with ``gap``."""
    table = Table(title=f"Lipschitz bounds ({setting})")
    cols = (
        "model",
        "n",
        "lower mean [95% t-CI, clipped at 0]",
        "lower max",
        "local upper (median)",
        "certified upper",
        "upper/lower",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, s in summary["models"].items():
        table.add_row(
            name,
            str(s["n_examples"]),
            _with_ci(s),
            _sci(s["lower_max"]),
            _sci(s["local_upper_median"]),
            _sci(s["global_upper"]),
            _sci(s["ratio_upper_lower"]),
        )
    out_console = console()
    out_console.print(table)
    if per_layer:
        layers = Table(title="per block: empirical gain at the hidden states vs certified block constant")
        for col in (
            "model",
            "block",
            "gain mean [95% t-CI, clipped at 0]",
            "gain max",
            "local upper (median)",
            "global upper",
        ):
            layers.add_column(col, justify="left" if col in ("model", "block") else "right")
        for name, s in summary["models"].items():
            for row in s["layers"]:
                layers.add_row(
                    name,
                    row["layer"],
                    _with_ci(row),
                    _sci(row["lower_max"]),
                    _sci(row["local_upper_median"]),
                    _sci(row["global_upper"]),
                )
        out_console.print(layers)
    if gap:
        _gap_table(summary.get("gap_log10_median") or [])


def _gap_table(records: list[dict]) -> None:
    """log10 medians: how much is lost to loose layer bounds and how much to composing them."""
    table = Table(title="where the certified bounds lose (log10, median over examples)")
    cols = ("model", "layer", "rho", "empirical", "layerwise (not certified)", "certified local", "certified global")
    keys = ("empirical", "layerwise_estimate", "local_upper", "global_upper")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "layer") else "right")
    for r in records:
        vals = [f"{r[k]:.2f}" if r.get(k) is not None else "-" for k in keys]
        table.add_row(r["model"], r["layer"], f"{r['rho']:g}", *vals)
    console().print(table)


def register(app: typer.Typer) -> None:
    """Add ``robfilt lipschitz`` to the app."""
    app.command("lipschitz")(lipschitz)
