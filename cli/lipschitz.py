"""robfilt lipschitz: lower bounds, certified upper bounds and per-layer profiles per model."""

from __future__ import annotations

import math
from typing import Any

import typer
from rich.table import Table

from robustbench_filters.configs import LipschitzConfig
from robustbench_filters.stats.vacuity import SHORT, label
from robustbench_filters.summaries import LipschitzSummary, Summary
from robustbench_filters.summaries.lipschitz import GapMedian, LipschitzLayer, LipschitzModel
from robustbench_filters.summaries.record import present

from ._common import console
from ._options import config_options
from ._render import render_checks
from ._run import RunCommand, run_options


def _sci(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def _with_ci(entry: LipschitzModel | LipschitzLayer) -> str:
    """'12.3 [11.9, 12.8]': the mean lower bound and its 95% t-interval across examples (just the mean for one)."""
    lo, hi = present(entry.lower_mean_lo), present(entry.lower_mean_hi)
    ci = f" [{_sci(lo)}, {_sci(hi)}]" if lo is not None and hi is not None else ""
    return _sci(entry.lower_mean) + ci


def _config(given: dict[str, Any]) -> Any:
    from robustbench_filters.configs import build

    return build(LipschitzConfig, given)


def _estimate() -> Any:
    from robustbench_filters.api.evaluate import estimate_lipschitz

    return estimate_lipschitz


def _render(summary: Summary, config: Any) -> None:
    assert isinstance(summary, LipschitzSummary)
    render_lipschitz_summary(summary, f"{config.method}, l2, rho={config.rho:g}", config.per_layer, config.gap)
    render_checks(summary.checks, summary.checks_summary)


#: the run folder is a temporary one unless --out is given, and --json names it "path"
LIPSCHITZ = RunCommand("lipschitz", _config, _estimate, _render, default_folder=False, folder_key="path")


@config_options(LipschitzConfig, required=("models",))
@run_options("Write a run folder here (default: a temporary folder).")
def lipschitz(**options: Any) -> None:
    """Lower bound (mean, max), certified upper bound and their ratio, per model.

    Inputs are [0, 1] pixels for image models and token embeddings for LMs (output: last-position logits).
    """
    LIPSCHITZ(options)


def _caption(vacuous: bool) -> str | None:
    return SHORT if vacuous else None


def render_lipschitz_summary(summary: LipschitzSummary, setting: str, per_layer: bool, gap: bool) -> None:
    """Per model (and per block with ``per_layer``): the mean lower bound with its 95% interval across examples,
    the max lower bound, the certified local and global bounds (labelled when vacuous, never a bare number); then
    the gap table with ``gap``."""
    models = summary.models
    flags = [present(s.local_upper_vacuous) or present(s.global_upper_vacuous) for s in models.values()]
    table = Table(title=f"Lipschitz bounds ({setting})", caption=_caption(any(flags)))
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
    for name, s in models.items():
        table.add_row(
            name,
            str(s.n_examples),
            _with_ci(s),
            _sci(s.lower_max),
            label(_sci(s.local_upper_median), present(s.local_upper_vacuous)),
            label(_sci(s.global_upper), present(s.global_upper_vacuous)),
            _sci(s.ratio_upper_lower),
        )
    out_console = console()
    out_console.print(table)
    if per_layer:
        rows = [(name, row) for name, s in models.items() for row in s.layers]
        vac = any(present(row.local_upper_vacuous) or present(row.global_upper_vacuous) for _, row in rows)
        layers = Table(title="per block: empirical gain at the hidden states vs certified block constant",
                       caption=_caption(vac))  # fmt: skip
        for col in (
            "model",
            "block",
            "gain mean [95% t-CI, clipped at 0]",
            "gain max",
            "local upper (median)",
            "global upper",
        ):
            layers.add_column(col, justify="left" if col in ("model", "block") else "right")
        for name, row in rows:
            layers.add_row(
                name,
                row.layer,
                _with_ci(row),
                _sci(row.lower_max),
                label(_sci(row.local_upper_median), present(row.local_upper_vacuous)),
                label(_sci(row.global_upper), present(row.global_upper_vacuous)),
            )
        out_console.print(layers)
    if gap:
        _gap_table(present(summary.gap_log10_median, []))


def _gap_table(records: list[GapMedian]) -> None:
    """log10 medians: how much is lost to loose layer bounds, how much to composing them, and what linear bound
    propagation (CROWN, which never composes per-stage norms) gets back."""
    vacuous = ("local_upper_vacuous", "local_crown_vacuous", "global_upper_vacuous")
    vac = any(present(getattr(r, k)) for r in records for k in vacuous)
    table = Table(title="where the certified bounds lose (log10, median over examples)",
                  caption="vacuous = more than 6 decades (1e6 x) above the empirical value" if vac else None)  # fmt: skip
    cols = ("model", "layer", "rho", "empirical", "layerwise (not certified)", "certified local",
            "certified local (CROWN)", "certified global")  # fmt: skip
    keys = ("empirical", "layerwise_estimate", "local_upper", "local_crown", "global_upper")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "layer") else "right")
    for r in records:
        vals = [f"{v:.2f}" if v is not None else "-" for v in (present(getattr(r, k)) for k in keys)]
        for i, key in ((2, "local_upper_vacuous"), (3, "local_crown_vacuous"), (4, "global_upper_vacuous")):
            vals[i] = label(vals[i], present(getattr(r, key)), "log")
        table.add_row(r.model, r.layer, f"{r.rho:g}", *vals)
    console().print(table)


def register(app: typer.Typer) -> None:
    """Add ``robfilt lipschitz`` to the app."""
    app.command("lipschitz")(lipschitz)
