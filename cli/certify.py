"""robfilt certify: randomized-smoothing certificates (Cohen et al. 2019) for image models."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from robustbench_filters.parsing import parse_numbers

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


def certify_cmd(
    model: Annotated[str, typer.Option("--model", help=MODEL_HELP)] = "deit,deit-grc",
    sigma: Annotated[
        str, typer.Option("--sigma", help="Gaussian noise levels on the [0,1] scale, e.g. 0.12,0.25,0.5.")
    ] = "0.25",
    n0: Annotated[int, typer.Option("--n0", help="Noise samples that pick the top class.")] = 100,
    n: Annotated[int, typer.Option("--n", help="Noise samples that bound its probability.")] = 1000,
    alpha: Annotated[str, typer.Option("--alpha", help="Failure probability of each certificate.")] = "0.001",
    radii: Annotated[
        str, typer.Option("--radii", help="L2 radii of the certified-accuracy table.")
    ] = "0,0.25,0.5,0.75,1",
    attack_examples: Annotated[
        int, typer.Option("--attack-examples", help="Examples the SmoothAdv soundness check attacks (0: none).")
    ] = 8,
    attack_radii: Annotated[str, typer.Option("--attack-radii", help="L2 radii of that attack.")] = "0.25,0.5",
    n_examples: Annotated[
        int, typer.Option("--n-examples", help="Examples (seeded subset shared by all models).")
    ] = 64,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per unit.")] = 16,
    data: Annotated[str, typer.Option("--data", help="Image data spec.")] = "fashion-mnist",
    size: Annotated[str, typer.Option("--size", help="Model size for registry names.")] = "micro",
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="zoo:sigma0.25 (noise-trained zoo, default), zoo, a folder, or none.")
    ] = "zoo:sigma0.25",
    seed: SeedOpt = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda (under torchrun: each rank's GPU).")] = "cpu",
    out: Annotated[str | None, typer.Option("--out", help="Run folder (default: runs/certify-<time>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a killed run in --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run in --out.")] = False,
    allow_failed_checks: AllowFailedOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Certified L2 robustness of Gaussian-smoothed models: certified accuracy per radius, with sanity checks."""
    from robustbench_filters.configs import CertifyConfig
    from robustbench_filters.smoothing.run import certify

    setup_logging(quiet, json_out)
    config = CertifyConfig(
        models=tuple(parse_model_list(model)), sigmas=tuple(parse_numbers(sigma, "--sigma", lo=0.0)), n0=n0, n=n,
        alpha=parse_numbers(alpha, "--alpha", lo=0.0)[0], radii=tuple(parse_numbers(radii, "--radii", lo=0.0)),
        attack_examples=attack_examples, attack_radii=tuple(parse_numbers(attack_radii, "--attack-radii", lo=0.0)),
        n_examples=n_examples, batch_size=batch_size, data=data, size=size, checkpoint=checkpoint, seed=seed,
        device=device,
    )  # fmt: skip
    out_dir = Path(out) if out else Path("runs") / f"certify-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    with progress_bar(quiet or json_out) as hook:
        result = certify(config=config, out=out_dir, resume=resume, overwrite=overwrite, progress=hook)
    if not is_primary():
        return
    if json_out:
        print_json({"out": str(result.out), **result.summary})
    else:
        render_certificates(result.summary)
        console().print(f"run folder: {result.out}", markup=False, style="dim")
    exit_for_checks(result.summary, allow_failed_checks)


def render_certificates(summary: dict) -> None:
    """Certified accuracy % [95% CI] per model and sigma at each radius, the abstention rate, then the checks."""
    models = summary["models"]
    first = next(iter(models.values()))
    radii = [r["radius"] for r in next(iter(first.values()))["certified"]]
    table = Table(
        title=f"certified accuracy % [95% Clopper-Pearson CI] of the smoothed classifiers on {summary['n_examples']} {summary['data']} "
        f"test examples (L2; n0={summary['n0']}, n={summary['n']}, alpha={summary['alpha']:g})"
    )
    for col in ("model", "sigma", *[f"r={r:g}" for r in radii], "abstain"):
        table.add_column(col, justify="left" if col in ("model", "sigma") else "right")
    for label, per_sigma in models.items():
        for s, entry in per_sigma.items():
            cells = [f"{100 * c['certified_acc']:.1f} [{100 * c['ci_low']:.1f}, {100 * c['ci_high']:.1f}]"
                     for c in entry["certified"]]  # fmt: skip
            table.add_row(label, s, *cells, f"{100 * entry['abstain_rate']:.1f}%")
    console().print(table)
    top = ", ".join(f"sigma {s}: {r:.3g}" for s, r in summary["max_certifiable_radius"].items())
    console().print(f"largest certifiable radius at this n and alpha: {top}", markup=False, style="dim")
    render_checks(summary["checks"], summary["checks_summary"])


def register(app: typer.Typer) -> None:
    app.command("certify")(certify_cmd)
