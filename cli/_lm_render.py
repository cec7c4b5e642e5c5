"""Console tables for language-model attack runs and image-corruption runs (``robfilt attack``)."""

from __future__ import annotations

import math

from rich.table import Table

from ._common import console


def _ppl_cell(entry: dict, clean_ppl: float | None = None) -> str:
    ppl, acc = entry["ppl"], entry["acc"]
    if ppl is None or not math.isfinite(ppl):
        return "-"
    ratio = f" x{ppl / clean_ppl:.2f}" if clean_ppl and clean_ppl > 0 else ""
    return f"{ppl:.2f}{ratio} ({100 * acc:.1f}%)"


def _setting(entry: dict) -> str:
    if entry.get("kind") == "contamination":
        return f"{entry['attack']} rate={entry['eps']:g}"
    return f"{entry['attack']} eps={entry['eps']:g}"


def render_lm_summary(summary: dict) -> None:
    """Perplexity (x clean, next-token accuracy %) per attack and eps/rate, one column per model; then checks."""
    from .attack import render_checks

    out = console()
    models = summary["models"]
    settings: list[tuple[str, str, float]] = []
    for m in models.values():
        for r in m["results"]:
            key = (r.get("kind", ""), r["attack"], r["eps"])
            if key not in settings:
                settings.append(key)
    settings.sort(key=lambda k: (k[0] != "contamination", k[1], k[2]))
    scale = summary.get("eps_mode", "relative")
    table = Table(
        title=(
            f"perplexity (x clean) and next-token accuracy on {summary['n_examples']} {summary['data']} test "
            f"sequences of {summary.get('seq_chars', '?')} characters; embedding attacks: {summary['norm']}, "
            f"{scale} eps, {summary.get('steps', '?')} steps"
        )
    )
    table.add_column("attack")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", *[_ppl_cell(m["clean"]) for m in models.values()])
    for kind, attack, eps in settings:
        cells = []
        for m in models.values():
            hit = next(
                (r for r in m["results"] if (r.get("kind", ""), r["attack"], r["eps"]) == (kind, attack, eps)), None
            )
            cells.append(_ppl_cell(hit, m["clean"]["ppl"]) if hit else "-")
        table.add_row(_setting({"kind": kind, "attack": attack, "eps": eps}), *cells)
    out.print(table)
    scales = summary.get("eps_scale") or {}
    if scales and summary.get("eps"):
        per = ", ".join(f"{k} {v:.3g}" for k, v in scales.items())
        out.print(f"eps scale ({summary.get('eps_scale_definition', '')}): {per}", markup=False, style="dim")
    render_checks(summary["checks"], summary["checks_summary"])


def _fmt(value: float | None, pct: bool = True) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{100 * value:.1f}" if pct else f"{value:.3f}"


def render_corruption_summary(summary: dict) -> None:
    """Accuracy % per corruption x severity for every model, then clean / mean / mCE, then the checks."""
    from .attack import render_checks

    out = console()
    models = summary["models"]
    sev = summary["severities"]
    table = Table(title=f"accuracy % under corruptions on {summary['n_examples']} {summary['data']} test examples")
    table.add_column("model")
    table.add_column("corruption")
    for s in sev:
        table.add_column(f"s={s}", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("CE", justify="right")
    for label, m in models.items():
        for i, (name, c) in enumerate(m["corruptions"].items()):
            cells = {b["severity"]: b["acc"] for b in c["by_severity"]}
            table.add_row(
                label if i == 0 else "",
                name,
                *[_fmt(cells.get(s)) for s in sev],
                _fmt(c["mean_acc"]),
                _fmt(c.get("ce"), pct=False),
                end_section=i == len(m["corruptions"]) - 1,
            )
    out.print(table)
    base = summary.get("baseline")
    overview = Table(title=f"corruption robustness (mCE relative to {base})" if base else "corruption robustness")
    for col in ("model", "clean %", "mean corrupted %", "mCE", "relative mCE"):
        overview.add_column(col, justify="left" if col == "model" else "right")
    for label, m in models.items():
        overview.add_row(
            label,
            _fmt(m["clean"]["acc"]),
            _fmt(m["mean_acc"]),
            _fmt(m.get("mce"), pct=False),
            _fmt(m.get("relative_mce"), pct=False),
        )
    out.print(overview)
    if not base:
        out.print("mCE needs the baseline model 'deit' in --model.", markup=False, style="dim")
    render_checks(summary["checks"], summary["checks_summary"])
