"""Console tables of run summaries: image attacks, LM attacks, corruptions, and the sanity checks under each.

Every table reads the typed summary a run returns (:mod:`robustbench_filters.summaries`), by attribute."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.table import Table

from robustbench_filters.core.budgets import eps_text
from robustbench_filters.summaries import (
    Check,
    ChecksSummary,
    CorruptionSummary,
    ImageAttackSummary,
    LMAttackSummary,
    Summary,
)
from robustbench_filters.summaries.image import ImageModelResults
from robustbench_filters.summaries.lm import LMAttackResult, LMModelResults, LMScores
from robustbench_filters.summaries.record import present

from ._common import console

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def _conv_cell(conv: dict) -> str:
    """The convergence tally of one row: broken of checked, and how many held at a larger eps."""
    above = conv.get("covered", 0)
    return f"{conv['broken']}/{conv['checked']} broken" + (f" ({above} at a larger eps)" if above else "")


def _pct(acc: float, lo: float, hi: float) -> str:
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def render_summary(summary: Summary) -> None:
    """The comparison table of an attack or corruption run, then its sanity checks."""
    if isinstance(summary, LMAttackSummary):
        return render_lm_summary(summary)
    if isinstance(summary, CorruptionSummary):
        return render_corruption_summary(summary)
    assert isinstance(summary, ImageAttackSummary), type(summary).__name__
    return render_image_summary(summary)


def render_image_summary(summary: ImageAttackSummary) -> None:
    """Accuracy % with 95% Wilson intervals per attack and eps, one column per model; the ledger; the checks."""
    out = console()
    models = summary.models
    table = Table(
        title=f"accuracy % [95% Wilson CI] on {summary.n_examples} {summary.data} test examples ({summary.norm})"
    )
    table.add_column("attack")
    table.add_column("eps", justify="right")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", "0", *[_pct(m.clean.acc, m.clean.lo, m.clean.hi) for m in models.values()])
    cells = {label: {(r.attack, r.eps): r for r in m.robust} for label, m in models.items()}
    weak = set()
    for attack, eps in sorted({key for c in cells.values() for key in c}):
        row = [_pct(c[(attack, eps)].acc, c[(attack, eps)].lo, c[(attack, eps)].hi) if (attack, eps) in c else "-"
               for c in cells.values()]  # fmt: skip
        strength = next((present(c[(attack, eps)].strength) for c in cells.values() if (attack, eps) in c), None)
        weak |= {attack} if strength == "weak" else set()
        table.add_row(attack + (" (weaker)" if strength == "weak" else ""), eps_text(eps), *row)
    out.print(table)
    if weak:
        out.print(
            f"[yellow]{', '.join(sorted(weak))}: weaker than the default attack (apgd-adaptive); their robust "
            "accuracy is an upper bound.[/]"
        )
    render_ledger(models)
    render_checks(summary.checks, summary.checks_summary)


def _passes(cost: dict[str, Any]) -> str:
    return f"{cost['fwd_per_example'] + cost['bwd_per_example']:.1f}" + ("" if cost.get("exact", True) else "~")


def render_ledger(models: dict[str, ImageModelResults]) -> None:
    """The compute ledger: forward + backward passes per example, which stage broke how many examples, and the
    convergence check's tally, per model, attack and eps (absent for runs from before the ledger)."""
    entries = [(label, r) for label, m in models.items() for r in m.robust if present(r.cost)]
    if not entries:
        return
    table = Table(title="compute ledger: model passes (forward + backward) per example, and who broke the examples")
    for col in ("model", "attack", "eps", "passes/ex", "total passes", "broken by (% of examples)", "convergence"):
        table.add_column(col, justify="right" if col in ("eps", "passes/ex", "total passes") else "left")
    for label, r in entries:
        n = max(r.n, 1)
        broken = ", ".join(f"{k} {100 * v / n:.0f}%" for k, v in present(r.broken_by, {}).items())
        conv = present(r.convergence)
        table.add_row(
            label, r.attack, f"{r.eps:.4g}", _passes(r.cost), f"{r.cost['fwd'] + r.cost['bwd']:.0f}",
            broken or "-", _conv_cell(conv) if conv else "-",
        )  # fmt: skip
    console().print(table)
    totals = [
        f"{label} {attack} {c['per_example']:.0f}/ex"
        + (f" (+{c['convergence_passes'] / max(m.clean.n, 1):.0f}/ex convergence check)" if c["convergence_passes"]
           else "")
        for label, m in models.items()
        for attack, c in present(m.cost, {}).items()
    ]  # fmt: skip
    if totals:
        console().print("passes over the whole eps grid: " + "; ".join(totals), style="dim", markup=False)


def render_checks(checks: list[Check], counts: ChecksSummary) -> None:
    out = console()
    table = Table(title="sanity checks")
    for col in ("model", "check", "status", "detail"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.model, c.name, f"[{STATUS_STYLE[c.status]}]{c.status.upper()}[/]", c.detail)
    out.print(table)
    verdict = (
        "all checks passed" if counts.passed else f"{counts.fail} CHECK(S) FAILED: treat these numbers as unreliable"
    )
    style = "green" if counts.passed else "bold red"
    out.print(f"[{style}]{verdict}[/] ({counts.passes} pass, {counts.warn} warn, {counts.fail} fail)")


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _ppl_cell(entry: LMScores | LMAttackResult, clean_ppl: float | None = None) -> str:
    """'12.31 [11.80, 12.90] x1.42 (41.2%)': perplexity [95% bootstrap CI], ratio to clean, next-token accuracy."""
    if not _finite(entry.ppl):
        return "-"
    interval = f" [{entry.ppl_lo:.2f}, {entry.ppl_hi:.2f}]" if _finite(entry.ppl_lo) and _finite(entry.ppl_hi) else ""
    ratio = f" x{entry.ppl / clean_ppl:.2f}" if clean_ppl and clean_ppl > 0 else ""
    return f"{entry.ppl:.2f}{interval}{ratio} ({100 * entry.acc:.1f}%)"


def _setting(kind: str, attack: str, eps: float) -> str:
    if kind == "contamination":
        return f"{attack} rate={eps:g}"
    return f"{attack} eps={eps_text(eps)}"


def _lm_settings(summary: LMAttackSummary) -> list[tuple[str, str, float]]:
    """Every (kind, attack, eps or rate) of the run: contaminations first, then by attack and budget."""
    settings: list[tuple[str, str, float]] = []
    for m in summary.models.values():
        for r in m.results:
            if (r.kind, r.attack, r.eps) not in settings:
                settings.append((r.kind, r.attack, r.eps))
    return sorted(settings, key=lambda k: (k[0] != "contamination", k[1], k[2]))


def _lm_result(results: list[LMAttackResult], setting: tuple[str, str, float]) -> LMAttackResult | None:
    return next((r for r in results if (r.kind, r.attack, r.eps) == setting), None)


def render_lm_summary(summary: LMAttackSummary) -> None:
    """Perplexity [95% CI] (x clean, next-token accuracy %) per attack and eps/rate, one column per model; then
    the checks."""
    out = console()
    models = summary.models
    settings = _lm_settings(summary)
    metric = present(summary.perplexity_metric, {})
    what = "token perplexity" if metric else "perplexity"
    chars = present(summary.seq_chars)
    if chars is not None:  # runs from before documents: fixed-length character chunks
        examples = f"{summary.n_examples} {summary.data} test sequences of {chars} characters"
    else:
        split = present(summary.split, "test")
        split = {"valid": "val"}.get(split, split)  # the split files call the validation part "valid"
        examples = f"{summary.n_examples} {summary.data} documents (split {split}, rolling token windows)"
    unit = "sequences" if chars is not None else "documents"
    title = (
        f"{what} [95% bootstrap CI over {unit}] (x clean) and next-token accuracy on {examples}; embedding attacks: "
        f"{summary.norm}, {summary.eps_mode} eps, {summary.steps} steps"
    )

    def cell(entry: LMAttackResult | None, clean: LMScores) -> str:
        return _ppl_cell(entry, clean.ppl) if entry is not None else "-"

    out.print(_lm_table(title, models, settings, cell, _ppl_cell))
    if summary.eps_scale and summary.eps:
        per = ", ".join(f"{k} {v:.3g}" for k, v in summary.eps_scale.items())
        out.print(f"eps scale ({summary.eps_scale_definition}): {per}", markup=False, style="dim")
    for label, line in metric.items():
        out.print(f"{label}: {line}", markup=False, style="dim")
    _lm_cost_line(models)
    render_lm_eval(summary, settings)
    render_checks(summary.checks, summary.checks_summary)


def _lm_cost_line(models: dict[str, LMModelResults]) -> None:
    """'compute, model passes (forward + backward) per document: lm clean 4.1, pgd 172.4, wordswap 8.2'."""
    parts = []
    for label, m in models.items():
        clean = present(m.clean.cost, {}).get("fwd_per_example")
        costs = [f"clean {clean:.1f}"] if clean is not None else []
        costs += [f"{attack} {c['per_example']:.1f}" for attack, c in present(m.cost, {}).items()]
        if costs:
            parts.append(f"{label} {', '.join(costs)}")
    if parts:
        line = "; ".join(parts)
        console().print(f"compute, model passes (forward + backward) per document: {line}", markup=False, style="dim")


def _lm_eval_cell(entry: LMScores | LMAttackResult | None) -> str:
    """'812.4 [700.1, 950.2] · 3.21 · 1.68': word_perplexity [95% CI] · byte_perplexity · bits_per_byte."""
    metrics = entry.lm_eval() if entry is not None else {}
    if not _finite(metrics.get("word_perplexity", (None,))[0]):
        return "-"
    word, lo, hi = metrics["word_perplexity"]
    interval = f" [{lo:.4g}, {hi:.4g}]" if _finite(lo) and _finite(hi) else ""
    byte, bits = metrics["byte_perplexity"][0], metrics["bits_per_byte"][0]
    return f"{word:.4g}{interval} · {byte:.4g} · {bits:.3f}"


def render_lm_eval(summary: LMAttackSummary, settings: list[tuple[str, str, float]]) -> None:
    """lm-eval's metrics of the models scored lm-eval style (every model since documents; Hugging Face models
    before), per attack and eps/rate."""
    models = {k: m for k, m in summary.models.items() if "word_perplexity" in m.clean.lm_eval()}
    if not models:
        return
    title = (
        "lm-eval metrics on the same documents: word_perplexity [95% CI] · byte_perplexity · bits_per_byte "
        f"(rolling windows; embedding attacks: {summary.norm}, {summary.eps_mode} eps, scale above)"
    )
    console().print(_lm_table(title, models, settings, lambda entry, _: _lm_eval_cell(entry), _lm_eval_cell))


def _lm_table(
    title: str,
    models: dict[str, LMModelResults],
    settings: list[tuple[str, str, float]],
    cell: Callable[[LMAttackResult | None, LMScores], str],
    clean_cell: Callable[[LMScores], str],
) -> Table:
    """One row per setting (clean first), one column per model: ``cell(entry or None, the model's clean entry)``."""
    table = Table(title=title)
    table.add_column("attack")
    for label in models:
        table.add_column(label, justify="right")
    table.add_row("clean", *[clean_cell(m.clean) for m in models.values()])
    for setting in settings:
        table.add_row(_setting(*setting), *[cell(_lm_result(m.results, setting), m.clean) for m in models.values()])
    return table


def _fmt(value: float | None, pct: bool = True) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{100 * value:.1f}" if pct else f"{value:.3f}"


def _acc_cell(acc: float | None, lo: float | None = None, hi: float | None = None) -> str:
    """Accuracy % with its 95% interval when there is one."""
    if not _finite(acc):
        return "-"
    return _pct(acc, lo, hi) if _finite(lo) and _finite(hi) else _fmt(acc)  # type: ignore[arg-type]


def render_corruption_summary(summary: CorruptionSummary) -> None:
    """Accuracy % [95% CI] per corruption x severity for every model, then clean / mean / mCE, then the checks.

    The mean corrupted accuracy carries a t-interval across examples (each example scored once, over all its
    corrupted copies); a corruption's mean over severities is shown beside its per-severity intervals.
    """
    out = console()
    models = summary.models
    sev = summary.severities
    table = Table(
        title=f"accuracy % [95% Wilson CI] under corruptions on {summary.n_examples} {summary.data} test examples"
    )
    table.add_column("model")
    table.add_column("corruption")
    for s in sev:
        table.add_column(f"s={s}", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("CE", justify="right")
    for label, m in models.items():
        for i, (name, c) in enumerate(m.corruptions.items()):
            cells = {b.severity: b for b in c.by_severity}
            table.add_row(
                label if i == 0 else "",
                name,
                *[_acc_cell(cells[s].acc, cells[s].lo, cells[s].hi) if s in cells else "-" for s in sev],
                _fmt(c.mean_acc),
                _fmt(present(c.ce), pct=False),
                end_section=i == len(m.corruptions) - 1,
            )
    out.print(table)
    base = summary.baseline
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
            _acc_cell(m.clean.acc, m.clean.lo, m.clean.hi),
            _acc_cell(m.mean_acc, present(m.mean_acc_lo), present(m.mean_acc_hi)),
            _fmt(m.mce, pct=False),
            _fmt(m.relative_mce, pct=False),
        )
    out.print(overview)
    if not base:
        out.print("mCE needs the baseline model 'deit' in --model.", markup=False, style="dim")
    render_checks(summary.checks, summary.checks_summary)
