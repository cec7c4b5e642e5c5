"""robfilt models list | show.

``list`` reads the zoo cards only (:mod:`robustbench_filters.models.zoo_index`), so it answers without importing torch;
``show`` builds the model to count its parameters.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from robustbench_filters.models.zoo_index import list_table

from ._common import JsonOpt, QuietOpt, console, print_json, setup_logging

app = typer.Typer(help="List the model variants and show their configs.", no_args_is_help=True)


def _fmt_metrics(metrics: dict) -> str:
    parts = []
    for key in ("test_acc", "test_ppl"):
        if key in metrics:
            value = metrics[key]
            parts.append(f"acc {100 * value:.1f}%" if key == "test_acc" else f"ppl {value:.2f}")
    return ", ".join(parts) or "trained"


def _fmt_certified(entry: dict) -> str:
    """'acc 80.1%, certified 75.2/60.3/41.0% at r=0/0.25/0.5' for a noise-trained zoo entry."""
    metrics, cert = entry.get("metrics") or {}, entry.get("certification")
    parts = [_fmt_metrics(metrics)]
    if cert:
        accs = "/".join(f"{100 * a:.1f}" for a in cert["certified_acc"])
        radii = "/".join(f"{r:g}" for r in cert["radii"])
        parts.append(f"certified {accs}% at r={radii} (sigma {cert['sigma']:g}, {cert['n_examples']} ex.)")
    else:
        parts.append("not certified yet")
    return ", ".join(parts)


@app.command("list")
def list_cmd(json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """All model names, their sizes, and which have bundled zoo weights (with test metrics)."""
    setup_logging(quiet, json_out)
    rows = list_table()
    if json_out:
        print_json(rows)
        return
    table = Table(title="robfilt models")
    for col in (
        "name",
        "family",
        "BSA",
        "GRC",
        "sizes",
        "zoo weights (test)",
        "noise-trained zoo (smoothed)",
        "timm names (timm:<name>)",
    ):
        table.add_column(col)
    for r in rows:
        zoo = "; ".join(f"{s}: {_fmt_metrics(m)}" for s, m in r["zoo"].items()) or "-"
        noisy = "; ".join(f"{k}: {_fmt_certified(e)}" for k, e in r.get("zoo_noise", {}).items()) or "-"
        table.add_row(
            r["name"],
            r["family"],
            "yes" if r["bsa"] else "-",
            "yes" if r["grc"] else "-",
            ", ".join(r["sizes"]),
            zoo,
            noisy,
            "\n".join(r["timm"].values()) or "-",
        )
    console().print(table)


@app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="Model name, e.g. deit-bsa-grc.")],
    size: Annotated[str, typer.Option("--size", help="micro, tiny, small or base.")] = "micro",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Config, parameter count and the BSA/GRC formulas of one variant."""
    from robustbench_filters.models.describe import show

    setup_logging(quiet, json_out)
    info = show(name, size)
    if json_out:
        print_json(info)
        return
    out = console()
    out.print(f"[bold]{info['name']}[/bold] ({info['family']}, {info['size']}): {info['num_params']:,} parameters")
    for line in info["formulas"]:
        out.print(f"  {line}", markup=False)
    table = Table(show_header=True)
    table.add_column("field")
    table.add_column("value")
    for k, v in info["config"].items():
        table.add_row(k, str(v))
    out.print(table)
    if info.get("timm"):
        out.print(f"timm name: {info['timm']} (timm.create_model, or --model timm:{info['timm']})", markup=False)
    if info["zoo"]:
        out.print(f"zoo weights: {info['zoo']['path']}  metrics: {info['zoo']['metrics']}", markup=False)
    for tag, entry in info.get("zoo_noise", {}).items():
        out.print(f"zoo:{tag} weights: {entry['path']}  {_fmt_certified(entry)}", markup=False)
    out.print(f"note: {info['note']}", markup=False, style="dim")
