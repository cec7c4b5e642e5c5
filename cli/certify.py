"""robfilt certify: randomized-smoothing certificates (Cohen et al. 2019) for image models."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from robustbench_filters.configs import CertifyConfig
from robustbench_filters.core.surface import Surface
from robustbench_filters.summaries import CertifySummary, Summary

from ._common import (
    AllowFailedOpt,
    JsonOpt,
    OverwriteOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    WorkersOpt,
    console,
    progress_bar,
    run_folder,
    setup_logging,
    setup_threads,
    setup_workers,
    show_run,
    worker_pool,
)
from ._options import OUTPUT_PANEL, config_options
from ._render import render_checks


@config_options(CertifyConfig, cli_defaults={"models": "deit,deit-grc"})
def certify_cmd(
    out: Annotated[
        str | None,
        typer.Option("--out", help="Run folder (default: runs/certify-<time>).", rich_help_panel=OUTPUT_PANEL),
    ] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    allow_failed_checks: AllowFailedOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    threads: ThreadsOpt = None,
    workers: WorkersOpt = None,
    **options: Any,
) -> None:
    """Certified L2 robustness of Gaussian-smoothed models: certified accuracy per radius, with sanity checks."""
    setup_threads(threads)  # first: before anything imports torch
    from robustbench_filters.configs import build, read

    setup_logging(quiet, json_out)
    config = build(CertifyConfig, read(options, Surface.CLI))  # light: a bad reference is refused in < 1 s
    count = setup_workers(workers, config.device)
    with worker_pool(count, config), progress_bar(quiet or json_out) as hook:
        from robustbench_filters.api.evaluate import certify

        result = certify(config=config, out=run_folder(out, "certify"), resume=resume, overwrite=overwrite,
                         progress=hook, workers=count)  # fmt: skip
    show_run(result.summary, {"out": str(result.out)}, render_certificates, json_out, allow_failed_checks)


def render_certificates(summary: Summary) -> None:
    """Certified accuracy % [95% CI] per model and sigma at each radius, the abstention rate, then the checks."""
    assert isinstance(summary, CertifySummary)
    models = summary.models
    first = next(iter(models.values()))
    radii = [r.radius for r in next(iter(first.values())).certified]
    table = Table(
        title="certified accuracy % [95% Clopper-Pearson CI] of the smoothed classifiers on "
        f"{summary.n_examples} {summary.data} test examples (L2; n0={summary.n0}, n={summary.n}, "
        f"alpha={summary.alpha:g})"
    )
    for col in ("model", "sigma", *[f"r={r:g}" for r in radii], "abstain"):
        table.add_column(col, justify="left" if col in ("model", "sigma") else "right")
    for label, per_sigma in models.items():
        for s, entry in per_sigma.items():
            cells = [f"{100 * c.certified_acc:.1f} [{100 * c.ci_low:.1f}, {100 * c.ci_high:.1f}]"
                     for c in entry.certified]  # fmt: skip
            table.add_row(label, s, *cells, f"{100 * entry.abstain_rate:.1f}%")
    console().print(table)
    top = ", ".join(f"sigma {s}: {r:.3g}" for s, r in summary.max_certifiable_radius.items())
    console().print(f"largest certifiable radius at this n and alpha: {top}", markup=False, style="dim")
    render_checks(summary.checks, summary.checks_summary)


def register(app: typer.Typer) -> None:
    app.command("certify")(certify_cmd)
