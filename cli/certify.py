"""robfilt certify: randomized-smoothing certificates (Cohen et al. 2019) for image models, or (``--method
ibp|crown-ibp|crown``) verified robust accuracy of the models themselves by bound propagation."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from robustbench_filters.configs import CertifyConfig, VerifiedConfig
from robustbench_filters.summaries import CertifySummary, Summary, VerifiedSummary

from ._common import console
from ._options import config_options
from ._render import render_checks
from ._run import RunCommand, run_options


def _config(given: dict[str, Any]) -> Any:
    from robustbench_filters.configs import build, certify_config_class

    return build(certify_config_class(given), given)


def _certify() -> Any:
    from robustbench_filters.api.evaluate import certify

    return certify


@config_options(CertifyConfig, VerifiedConfig, cli_defaults={"models": "deit,deit-grc"})
@run_options("Run folder (default: runs/certify-<time>).")
def certify_cmd(**options: Any) -> None:
    """Certified robustness with sanity checks: L2 certified accuracy of Gaussian-smoothed models per radius
    (default), or with --method ibp/crown-ibp/crown the verified, robust and clean accuracy per Linf eps."""
    CERTIFY(options)


def render_verified(summary: Summary) -> None:
    """Clean >= robust (default attack) >= verified accuracy per model and eps, the share neither verified nor
    broken, then the checks (a verified example the attack breaks fails the soundness check: exit 3)."""
    assert isinstance(summary, VerifiedSummary)
    how = summary.method + (f", refresh {summary.refresh}" if summary.method == "crown" else "")
    table = Table(
        title=f"verified robust accuracy % on {summary.n_examples} {summary.data} test examples (Linf; bounds: "
        f"{how}; broken: {summary.attack})"
    )
    for col in ("model", "eps", "clean", "robust", "verified", "unknown", "verified/clean", "contradicted"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for label, entries in summary.models.items():
        for e in entries:
            table.add_row(label, f"{e.eps:g}", f"{100 * e.clean_acc:.1f}", f"{100 * e.robust_acc:.1f}",
                          f"{100 * e.verified_acc:.1f}", f"{100 * e.unknown_share:.1f}",
                          f"{100 * e.verified_of_clean:.1f}", str(e.contradicted))  # fmt: skip
    console().print(table)
    passes = ", ".join(f"{m}: {p:g}" for m, p in summary.bound_passes.items())
    console().print(f"model-equivalent passes per bound: {passes}", markup=False, style="dim")
    render_checks(summary.checks, summary.checks_summary)


def _render(summary: Summary, config: Any) -> None:
    (render_verified if isinstance(summary, VerifiedSummary) else render_certificates)(summary)


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


CERTIFY = RunCommand("certify", _config, _certify, _render)


def register(app: typer.Typer) -> None:
    app.command("certify")(certify_cmd)
