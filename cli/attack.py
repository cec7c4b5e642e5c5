"""robfilt attack."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from robustbench_filters import distributed
from robustbench_filters.attacks import evaluate
from robustbench_filters.attacks.catalogue import ATTACKS
from robustbench_filters.parsing import parse_names, parse_numbers

from ._common import JsonOpt, QuietOpt, SeedOpt, console, print_json, progress_bar, setup_logging

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def _pct(cell: dict) -> str:
    return f"{100 * cell['acc']:.1f} [{100 * cell['lo']:.1f}, {100 * cell['hi']:.1f}]"


def render_summary(summary: dict) -> None:
    """The comparison table (accuracy % with 95% Wilson intervals) and the sanity checks."""
    out = console()
    models = summary["models"]
    if summary.get("family") == "lm":
        from ._lm_render import render_lm_summary

        render_lm_summary(summary)
        return
    if summary.get("kind") == "corruption":
        from ._lm_render import render_corruption_summary

        return render_corruption_summary(summary)
    table = Table(
        title=f"accuracy % [95% CI] on {summary['n_examples']} {summary['data']} test examples ({summary['norm']})"
    )
    table.add_column("attack")
    table.add_column("eps", justify="right")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", "0", *[_pct(m["clean"]) for m in models.values()])
    cols = sorted({(r["attack"], r["eps"]) for m in models.values() for r in m["robust"]})
    cells = {label: {(r["attack"], r["eps"]): r for r in m["robust"]} for label, m in models.items()}
    for attack, eps in cols:
        row = [_pct(cells[label][(attack, eps)]) if (attack, eps) in cells[label] else "-" for label in models]
        table.add_row(attack, f"{eps:.4g}", *row)
    out.print(table)
    render_checks(summary["checks"], summary["checks_summary"])


def render_checks(checks: list[dict], counts: dict) -> None:
    out = console()
    table = Table(title="sanity checks")
    for col in ("model", "check", "status", "detail"):
        table.add_column(col)
    for c in checks:
        table.add_row(c["model"], c["name"], f"[{STATUS_STYLE[c['status']]}]{c['status'].upper()}[/]", c["detail"])
    out.print(table)
    verdict = (
        "all checks passed"
        if counts["passed"]
        else f"{counts['fail']} CHECK(S) FAILED: treat these numbers as unreliable"
    )
    style = "green" if counts["passed"] else "bold red"
    out.print(f"[{style}]{verdict}[/] ({counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail)")


def attack_cmd(
    model: Annotated[
        str, typer.Option("--model", help="Comma list: registry names, timm:<arch>, or pkg.mod:factory.")
    ] = "deit-grc",
    attack: Annotated[str, typer.Option("--attack", help=f"Comma list of: {', '.join(ATTACKS)}.")] = "pgd",
    eps: Annotated[
        str | None, typer.Option("--eps", help="Comma list on the [0,1] scale; fractions like 8/255 work.")
    ] = None,
    norm: Annotated[str | None, typer.Option("--norm", help="linf or l2 (default: the attack's own).")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Iterations for iterative attacks.")] = 20,
    step_size: Annotated[str | None, typer.Option("--step-size", help="PGD step; default 0.15*eps.")] = None,
    n_examples: Annotated[
        int | None,
        typer.Option(
            "--n-examples", help="Examples (seeded subset shared by all models; default 256 images / 64 sequences)."
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 128,
    data: Annotated[
        str | None, typer.Option("--data", help="Dataset spec (default: bundled fashion-mnist or austen).")
    ] = None,
    data_root: Annotated[str | None, typer.Option("--data-root", help="Root folder for external datasets.")] = None,
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
    replacement: Annotated[str, typer.Option("--replacement", help="Word-swap replacement token (LM).")] = "AAA",
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Accept a torch .pt state dict (read with weights_only=True).")
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Attack one or more models on the same examples and print a checked comparison table."""
    setup_logging(quiet, json_out)
    models = parse_names(model, "model")
    attacks = parse_names(attack, "attack")
    for name in attacks:
        if name not in ATTACKS and not name.startswith("corruption:"):
            parse_names(name, "attack", list(ATTACKS))  # raises with close-match suggestions
    eps_values = parse_numbers(eps, "eps", lo=0.0) if eps is not None else None
    step = parse_numbers(step_size, "step size", lo=0.0)[0] if step_size is not None else None
    rates = parse_numbers(rate, "rate", lo=0.0, hi=1.0) if rate is not None else None
    out_dir = Path(out) if out else Path("runs") / f"attack-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    with progress_bar(quiet or json_out) as hook:
        result = evaluate(
            models,
            attacks,
            eps_values,
            data=data,
            n_examples=n_examples,
            seed=seed,
            out=out_dir,
            norm=norm,
            steps=steps,
            step_size=step,
            batch_size=batch_size,
            size=size,
            checkpoint=checkpoint,
            device=device,
            resume=resume,
            overwrite=overwrite,
            check_masking=check_masking,
            data_root=data_root,
            progress=hook,
            **({"rates": rates} if rates is not None else {}),
            **({"replacement": replacement} if replacement != "AAA" else {}),
            **({"allow_pickle": True} if allow_pickle else {}),
            **({"amp": amp, "amp_attacks": amp_attacks} if amp or amp_attacks else {}),
        )
    if not distributed.env_context().is_primary:  # under torchrun, rank 0 alone prints the merged result
        return
    if json_out:
        print_json({"out": str(result.out), **result.summary})
        return
    render_summary(result.summary)
    console().print(f"run folder: {result.out}", markup=False, style="dim")


def register(app: typer.Typer) -> None:
    app.command("attack")(attack_cmd)
