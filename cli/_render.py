"""Console tables of run summaries: image attacks, LM attacks, corruptions, and the sanity checks under each."""

from __future__ import annotations

import math

from rich.table import Table

from robustbench_filters.core.budgets import eps_text

from ._common import console

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def _pct(cell: dict) -> str:
    return f"{100 * cell['acc']:.1f} [{100 * cell['lo']:.1f}, {100 * cell['hi']:.1f}]"


def render_summary(summary: dict) -> None:
    """The comparison table (accuracy % with 95% Wilson intervals) and the sanity checks."""
    out = console()
    models = summary["models"]
    if summary.get("family") == "lm":
        return render_lm_summary(summary)
    if summary.get("kind") == "corruption":
        return render_corruption_summary(summary)
    table = Table(
        title=f"accuracy % [95% Wilson CI] on {summary['n_examples']} {summary['data']} test examples ({summary['norm']})"
    )
    table.add_column("attack")
    table.add_column("eps", justify="right")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", "0", *[_pct(m["clean"]) for m in models.values()])
    cols = sorted({(r["attack"], r["eps"]) for m in models.values() for r in m["robust"]})
    cells = {label: {(r["attack"], r["eps"]): r for r in m["robust"]} for label, m in models.items()}
    weak = set()
    for attack, eps in cols:
        row = [_pct(cells[label][(attack, eps)]) if (attack, eps) in cells[label] else "-" for label in models]
        strength = next((c[(attack, eps)].get("strength") for c in cells.values() if (attack, eps) in c), None)
        weak |= {attack} if strength == "weak" else set()
        table.add_row(attack + (" (weaker)" if strength == "weak" else ""), eps_text(eps), *row)
    out.print(table)
    if weak:
        out.print(
            f"[yellow]{', '.join(sorted(weak))}: weaker than the default attack (autoattack-fast); their robust "
            "accuracy is an upper bound.[/]"
        )
    render_ledger(models)
    render_checks(summary["checks"], summary["checks_summary"])


def _passes(cost: dict) -> str:
    return f"{cost['fwd_per_example'] + cost['bwd_per_example']:.1f}" + ("" if cost.get("exact", True) else "~")


def render_ledger(models: dict) -> None:
    """The compute ledger: forward + backward passes per example, which stage broke how many examples, and the
    convergence check's tally, per model, attack and eps (absent for runs from before the ledger)."""
    entries = [(label, r) for label, m in models.items() for r in m["robust"] if "cost" in r]
    if not entries:
        return
    table = Table(title="compute ledger: model passes (forward + backward) per example, and who broke the examples")
    for col in ("model", "attack", "eps", "passes/ex", "total passes", "broken by (% of examples)", "convergence"):
        table.add_column(col, justify="right" if col in ("eps", "passes/ex", "total passes") else "left")
    for label, r in entries:
        n = max(r["n"], 1)
        broken = ", ".join(f"{k} {100 * v / n:.0f}%" for k, v in r["broken_by"].items())
        conv = r.get("convergence")
        table.add_row(
            label, r["attack"], f"{r['eps']:.4g}", _passes(r["cost"]), f"{r['cost']['fwd'] + r['cost']['bwd']:.0f}",
            broken or "-", f"{conv['broken']}/{conv['checked']} broken" if conv else "-",
        )  # fmt: skip
    console().print(table)
    totals = [
        f"{label} {attack} {c['per_example']:.0f}/ex"
        + (
            f" (+{c['convergence_passes'] / max(m['clean']['n'], 1):.0f}/ex convergence check)"
            if c["convergence_passes"]
            else ""
        )
        for label, m in models.items()
        for attack, c in m.get("cost", {}).items()
    ]
    if totals:
        console().print("passes over the whole eps grid: " + "; ".join(totals), style="dim", markup=False)


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


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _ppl_cell(entry: dict, clean_ppl: float | None = None) -> str:
    """'12.31 [11.80, 12.90] x1.42 (41.2%)': perplexity [95% bootstrap CI], ratio to clean, next-token accuracy.

    Summaries written before the interval was recorded have no ``ppl_lo``/``ppl_hi``; they show the point value.
    """
    ppl, acc = entry["ppl"], entry["acc"]
    if not _finite(ppl):
        return "-"
    lo, hi = entry.get("ppl_lo"), entry.get("ppl_hi")
    interval = f" [{lo:.2f}, {hi:.2f}]" if _finite(lo) and _finite(hi) else ""
    ratio = f" x{ppl / clean_ppl:.2f}" if clean_ppl and clean_ppl > 0 else ""
    return f"{ppl:.2f}{interval}{ratio} ({100 * acc:.1f}%)"


def _setting(entry: dict) -> str:
    if entry.get("kind") == "contamination":
        return f"{entry['attack']} rate={entry['eps']:g}"
    return f"{entry['attack']} eps={eps_text(entry['eps'])}"


def render_lm_summary(summary: dict) -> None:
    """Perplexity [95% CI] (x clean, next-token accuracy %) per attack and eps/rate, one column per model; then
    the checks."""
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
    what = "token perplexity" if summary.get("perplexity_metric") else "perplexity"
    table = Table(
        title=(
            f"{what} [95% bootstrap CI over sequences] (x clean) and next-token accuracy on {summary['n_examples']} {summary['data']} test "
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
    _eps_scale_line(summary)
    for label, metric in (summary.get("perplexity_metric") or {}).items():
        out.print(f"{label}: {metric}", markup=False, style="dim")
    render_lm_eval(summary, settings)
    render_checks(summary["checks"], summary["checks_summary"])


def _eps_scale_line(summary: dict) -> None:
    scales = summary.get("eps_scale") or {}
    if scales and summary.get("eps"):
        per = ", ".join(f"{k} {v:.3g}" for k, v in scales.items())
        console().print(f"eps scale ({summary.get('eps_scale_definition', '')}): {per}", markup=False, style="dim")


def _lm_eval_cell(entry: dict | None) -> str:
    """'812.4 [700.1, 950.2] · 3.21 · 1.68': word_perplexity [95% CI] · byte_perplexity · bits_per_byte."""
    if not entry or not _finite(entry.get("word_perplexity")):
        return "-"
    lo, hi = entry.get("word_perplexity_lo"), entry.get("word_perplexity_hi")
    interval = f" [{lo:.4g}, {hi:.4g}]" if _finite(lo) and _finite(hi) else ""
    return f"{entry['word_perplexity']:.4g}{interval} · {entry['byte_perplexity']:.4g} · {entry['bits_per_byte']:.3f}"


def render_lm_eval(summary: dict, settings: list[tuple[str, str, float]]) -> None:
    """lm-eval's metrics of the models scored lm-eval style (Hugging Face models), per attack and eps/rate."""
    models = {k: m for k, m in summary["models"].items() if "word_perplexity" in m["clean"]}
    if not models:
        return
    table = Table(
        title="lm-eval metrics on the same sequences: word_perplexity [95% CI] · byte_perplexity · bits_per_byte "
        f"(rolling windows; embedding attacks: {summary['norm']}, {summary.get('eps_mode', 'relative')} eps, scale "
        "above)"
    )
    table.add_column("attack")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", *[_lm_eval_cell(m["clean"]) for m in models.values()])
    for kind, attack, eps in settings:
        cells = [
            _lm_eval_cell(next((r for r in m["results"] if (r.get("kind", ""), r["attack"], r["eps"]) ==
                                (kind, attack, eps)), None))
            for m in models.values()
        ]  # fmt: skip
        table.add_row(_setting({"kind": kind, "attack": attack, "eps": eps}), *cells)
    console().print(table)


def _fmt(value: float | None, pct: bool = True) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{100 * value:.1f}" if pct else f"{value:.3f}"


def _acc_cell(cell: dict | None) -> str:
    """Accuracy % with its 95% Wilson interval when the summary has one."""
    if cell is None or not _finite(cell.get("acc")):
        return "-"
    return _pct(cell) if _finite(cell.get("lo")) and _finite(cell.get("hi")) else _fmt(cell["acc"])


def render_corruption_summary(summary: dict) -> None:
    """Accuracy % [95% CI] per corruption x severity for every model, then clean / mean / mCE, then the checks.

    The mean corrupted accuracy carries a t-interval across examples (each example scored once, over all its
    corrupted copies); a corruption's mean over severities is shown beside its per-severity intervals.
    """
    out = console()
    models = summary["models"]
    sev = summary["severities"]
    table = Table(
        title=f"accuracy % [95% Wilson CI] under corruptions on {summary['n_examples']} {summary['data']} test examples"
    )
    table.add_column("model")
    table.add_column("corruption")
    for s in sev:
        table.add_column(f"s={s}", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("CE", justify="right")
    for label, m in models.items():
        for i, (name, c) in enumerate(m["corruptions"].items()):
            cells = {b["severity"]: b for b in c["by_severity"]}
            table.add_row(
                label if i == 0 else "",
                name,
                *[_acc_cell(cells.get(s)) for s in sev],
                _fmt(c["mean_acc"]),
                _fmt(c.get("ce"), pct=False),
                end_section=i == len(m["corruptions"]) - 1,
            )
    out.print(table)
    base = summary.get("baseline")
    overview = Table(title=f"corruption robustness (mCE relative to {base})" if base else "corruption robustness")
    for col in (
        "model",
        "clean % [95% Wilson CI]",
        "mean corrupted % [95% t-CI, clipped to [0, 100]]",
        "mCE",
        "relative mCE",
    ):
        overview.add_column(col, justify="left" if col == "model" else "right")
    for label, m in models.items():
        overview.add_row(
            label,
            _acc_cell(m["clean"]),
            _acc_cell({"acc": m["mean_acc"], "lo": m.get("mean_acc_lo"), "hi": m.get("mean_acc_hi")}),
            _fmt(m.get("mce"), pct=False),
            _fmt(m.get("relative_mce"), pct=False),
        )
    out.print(overview)
    if not base:
        out.print("mCE needs the baseline model 'deit' in --model.", markup=False, style="dim")
    render_checks(summary["checks"], summary["checks_summary"])
