"""Write the numbers of README.md and docs/*.md from the files they describe, so no number is typed by hand.

A generated block sits between two markers, and everything between them is rewritten::

    <!-- robfilt:begin verdicts -->
    ...
    <!-- robfilt:end verdicts -->

Blocks and their sources:

- ``verdicts``: the study's primary claims, from ``reports/study/results.json`` and ``study.json`` (README.md);
- ``verdicts-all``: every claim, primary and secondary, from the same files (docs/study.md);
- ``zoo``: test metrics and training times of the bundled checkpoints, from their cards (docs/models.md);
- ``zoo-noise``: the noise-trained checkpoints' certificates, from their cards (docs/smoothing.md);
- ``bench`` and ``bench-gpu``: every benchmark target, from ``reports/bench/*.json`` and ``reports/bench/gpu/``
  (docs/benchmarks.md);
- ``gate-plan``: what each check of this repository's gate can detect, from ``robustness.toml`` and its baseline
  (docs/gate.md);
- ``gate-mde``: the smallest accuracy drop each gate mode detects, per n, from ``scripts/gate_mde_table.py``
  (docs/gate.md);
- ``hf-variants``: BSA/GRC conversions of a GPT-2 vs the plain one fine-tuned by the same recipe, from
  ``reports/hf/variants.json`` (``scripts/hf_variants.py`` runs docs/hf-models.md's block; docs/hf-models.md).

``python scripts/readme_numbers.py`` rewrites the blocks; ``--check`` only says which are stale (exit 1).
tests/test_docs_numbers.py fails when a committed block differs from what this script writes, so after
``make study``, ``make bench``, ``make zoo`` or a new gate baseline run this script and commit the result.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- robfilt:begin (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- robfilt:end (?P=name) -->)", re.S)

#: the unit a claim's difference is written in, by metric (the formatting itself is the study's own)
UNITS = {"acc_mean": " points", "corruption_acc": " points", "lip_log10_layerwise": " decades",
         "lip_log10_upper": " decades", "lip_log10_crown": " decades"}  # fmt: skip


def documents(root: Path = ROOT) -> list[Path]:
    """The files that may hold generated blocks."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# --- the study ------------------------------------------------------------------------------------------------
def _study(root: Path) -> tuple[dict, dict]:
    folder = root / "reports" / "study"
    return json.loads((folder / "results.json").read_text()), json.loads((folder / "study.json").read_text())


def _difference(comparison: dict) -> str:
    from robustbench_filters.study.tables import METRICS

    metric = comparison["metric"]
    fmt = METRICS[metric][1]
    who = f"{comparison['variant']} - {comparison['baseline']}"
    if not comparison["diffs"]:
        return f"{who}: not measured"
    interval = f"{fmt(comparison['mean'])} [{fmt(comparison['lo'])}, {fmt(comparison['hi'])}]"
    if len(comparison["diffs"]) < 2:
        interval = fmt(comparison["mean"])
    return f"{who}: {interval}{UNITS.get(metric, '')}"


def _provenance(results: dict, manifest: dict) -> str:
    plan = results["plan"]
    seeds = ", ".join(str(s) for s in plan["seeds"])
    from robustbench_filters.study.readme import reused_training

    minutes = sum(float(p.get("wall_s") or 0.0) for p in manifest["pieces"].values()) / 60
    n_reused, reused_s = reused_training(manifest)
    day = manifest.get("updated", manifest["created"])[:10]
    extra = ""
    if n_reused and reused_s is None:
        extra = f" ({n_reused} checkpoints were reused from earlier training, whose time is not in that figure)"
    elif n_reused:
        extra = f", plus {reused_s / 60:.1f} minutes that the {n_reused} checkpoints it reused took to train"
    return (
        f"From `reports/study/results.json`: plan `{plan['name']}`, {plan['size']} models, training seeds {seeds}, "
        f"{len(manifest['pieces'])} pieces in {minutes:.1f} minutes of compute{extra}, last updated {day}."
    )


def _claims_table(claims: list[dict], scope: bool) -> list[str]:
    """The README's short table (claim, difference, verdict), or with ``scope`` also its scope and evidence."""
    head = (
        "| claim | scope | evidence | difference across seeds, mean [95% CI] | verdict |"
        if scope
        else "| claim | difference across seeds, mean [95% CI] | verdict |"
    )
    lines = [head, "|---|---|---|---|---|" if scope else "|---|---|---|"]
    for c in claims:
        cells = [f"({c['id']}) {c['claim']}"]
        if scope:
            cells += [c["scope"], c.get("evidence", "-")]
        else:
            cells[0] += f" ({c['scope'].split(':', 1)[0]})"
        cells += ["; ".join(_difference(r) for r in c["comparisons"]), f"**{c['verdict']}**"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdicts(root: Path) -> str:
    results, manifest = _study(root)
    primary = [c for c in results["claims"] if c["primary"]]
    return "\n".join([_provenance(results, manifest), "", *_claims_table(primary, scope=False)]) + "\n"


def verdicts_all(root: Path) -> str:
    results, manifest = _study(root)
    lines = [_provenance(results, manifest), ""]
    for title, primary in (("Primary evidence", True), ("Secondary evidence", False)):
        claims = [c for c in results["claims"] if c["primary"] is primary]
        lines += [f"{title}:", "", *_claims_table(claims, scope=True), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# --- the zoo --------------------------------------------------------------------------------------------------
def zoo(root: Path) -> str:
    from robustbench_filters.core.names import MODEL_NAMES, ZOO_MODELS
    from robustbench_filters.models.zoo_index import zoo_entry

    lines = [
        "| zoo model (micro) | test metric | test examples / tokens | training time in the card |",
        "|---|---|---|---|",
    ]
    for name in (*MODEL_NAMES, *ZOO_MODELS):
        entry = zoo_entry(name, "micro")
        if entry is None:
            lines.append(f"| {name} | no bundled weights | - | - |")
            continue
        m, minutes = entry["metrics"], entry["recipe"]["wall_time_s"] / 60
        if "test_acc_pgd20" in m:  # adversarially trained: clean, and PGD-20 at its training eps
            eps = entry["recipe"]["train_eps"]
            metric = (
                f"{100 * m['test_acc']:.1f}% accuracy, {100 * m['test_acc_pgd20']:.1f}% under PGD-20 at Linf {eps:g}"
            )
            n = f"{m['test_n']} images"
        elif "test_acc" in m:
            metric, n = f"{100 * m['test_acc']:.1f}% accuracy", f"{m['test_n']} images"
        elif "test_documents" in m:  # whole documents in rolling windows (robfilt attack's clean rows give the same)
            metric = f"{m['test_ppl']:.2f} perplexity per character"
            n = f"{m['test_documents']} documents, {m['test_tokens']} characters"
        else:
            metric, n = f"{m['test_ppl']:.2f} perplexity per character", f"{m['test_tokens']} characters"
        lines.append(f"| `{name}` | {metric} | {n} | {minutes:.1f} min |")
    return "\n".join(lines) + "\n"


def zoo_noise(root: Path) -> str:
    from robustbench_filters.core.names import MODEL_NAMES
    from robustbench_filters.models.zoo_index import noise_zoo

    head = "| noise-trained model | clean test acc | certified acc at r = {radii} | abstain | train / certify time |"
    lines: list[str] = []
    for name in MODEL_NAMES:
        for tag, entry in noise_zoo(name, "micro").items():
            cert, m = entry["certification"], entry["metrics"]
            if not lines:
                radii = " / ".join(f"{r:g}" for r in cert["radii"])
                lines = [head.format(radii=radii), "|---|---|---|---|---|"]
            accs = " / ".join(f"{100 * a:.1f}" for a in cert["certified_acc"])
            times = f"{entry['recipe']['wall_time_s'] / 60:.1f} / {cert['wall_time_s'] / 60:.1f} min"
            lines.append(
                f"| `{name}` (`zoo:{tag}`) | {100 * m['test_acc']:.1f}% ({m['test_n']}) | {accs} % "
                f"({cert['n_examples']}) | {100 * cert['abstain_rate']:.1f}% | {times} |"
            )
    return "\n".join(lines) + "\n"


# --- the benchmarks -------------------------------------------------------------------------------------------
def _bench_key(path: Path) -> tuple[int, str]:
    return int(re.match(r"b(\d+)_", path.name).group(1)), str(path.parent)  # type: ignore[union-attr]


def _machine(m: dict) -> str:
    torch = str(m.get("torch", "?")).split("+")[0]
    device = (
        m["cuda"] if m.get("cuda") else f"{m.get('cpu_cores', '?')} CPU cores, {m.get('torch_threads', '?')} thread"
    )
    return f"{device}, torch {torch}, load {m.get('load_avg_1min', '?')}, {str(m.get('when', ''))[:10]}"


def _bench_table(root: Path, pattern: str) -> str:
    lines = ["| benchmark | measured | value | target | met | run |", "|---|---|---|---|---|---|"]
    for path in sorted((root / "reports" / "bench").glob(pattern), key=_bench_key):
        report = json.loads(path.read_text())
        title = report["title"].split(":", 1)[0]
        link = f"[{title}](../{path.relative_to(root).with_suffix('.md').as_posix()})"
        run = _machine(report["machine"])
        if not report["targets"]:
            lines.append(f"| {link} | no target | - | - | - | {run} |")
        for what, t in report["targets"].items():
            met = "yes" if t["met"] else "**missed**"
            lines.append(f"| {link} | {what} | {t['value']:g} | {t['target']} | {met} | {run} |")
    return "\n".join(lines) + "\n"


def bench(root: Path) -> str:
    return _bench_table(root, "b*_*.json")


def bench_gpu(root: Path) -> str:
    return _bench_table(root, "gpu/**/b*_*.json")


# --- the gate -------------------------------------------------------------------------------------------------
def gate_plan(root: Path) -> str:
    """What each check of the repository's gate detects (80% power), as ``robfilt check`` prints it before its runs."""
    from robustbench_filters.gate.run import plan_gate
    from robustbench_filters.gate.spec import load_spec
    from robustbench_filters.gating.baseline import read_baseline

    spec = load_spec(root / "robustness.toml")
    baseline = read_baseline(spec.baseline) if spec.baseline is not None and spec.baseline.exists() else None
    rows: dict[tuple, list[str]] = {}
    for c in plan_gate(spec, baseline, spec.policy):
        detects = c.mde_text.split(" (", 1)[0].replace(" with 80% power", "")
        rows.setdefault((c.kind, c.family, c.condition, c.metric, c.mode, c.n, detects), []).append(c.model)
    lines = [
        "| check | models | condition | metric | mode | n | can detect (80% power) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (kind, fam, cond, metric, mode, n, detects), models in rows.items():
        lines.append(f"| {kind} ({fam}) | {', '.join(models)} | {cond} | {metric} | {mode} | {n} | {detects} |")
    return "\n".join(lines) + "\n"


def gate_mde(root: Path) -> str:
    """``scripts/gate_mde_table.py`` with its defaults (accuracy 0.5, alpha 0.05, discordance 0.1 and 0.2)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gate_mde_table", root / "scripts" / "gate_mde_table.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.table(0.5, [64, 128, 256, 500, 1000], [0.1, 0.2], 0.05) + "\n"


# --- Hugging Face variants ------------------------------------------------------------------------------------
def _ppl(entry: Any, clean: float | None = None) -> str:
    cell = f"{entry.ppl:.2f} [{entry.ppl_lo:.2f}, {entry.ppl_hi:.2f}]"
    return cell + (f" x{entry.ppl / clean:.3f}" if clean else "")


def hf_variants(root: Path) -> str:
    """The fine-tuned GPT-2 variants vs the plain one fine-tuned alike, from ``reports/hf/variants.json`` (the
    summary of docs/hf-models.md's comparison, run as written by ``scripts/hf_variants.py``)."""
    from robustbench_filters.summaries.kinds import read_summary

    path = root / "reports" / "hf" / "variants.json"
    s = read_summary(json.loads(path.read_text()), "attack", "lm", str(path.relative_to(root)))
    pgd, rate = max(s.eps), max(s.rates)
    lines = [
        f"| model ({s.n_examples} test documents) | clean token perplexity [95% CI] | PGD eps {pgd:g} (x clean) "
        f"| word swap rate {rate:g} (x clean) | clean word perplexity | passes per document (PGD) |",
        "|---|---|---|---|---|---|",
    ]
    for label, m in s.models.items():
        clean = m.clean
        at = {(r.attack, r.eps): r for r in m.results}
        lines.append(
            f"| `{label}` | {_ppl(clean)} | {_ppl(at[('pgd', pgd)], clean.ppl)} | "
            f"{_ppl(at[('wordswap', rate)], clean.ppl)} | {clean.word_perplexity:.4g} | "
            f"{m.cost['pgd']['per_example']:.0f} |"
        )
    counts = s.checks_summary
    lines += [
        "",
        f"Embedding PGD: {s.steps} steps, {s.norm}, eps relative to each model's mean embedding norm; "
        f"sanity checks: {counts.passes} pass, {counts.warn} warn, {counts.fail} fail.",
    ]
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[Path], str]] = {
    "hf-variants": hf_variants,
    "verdicts": verdicts,
    "verdicts-all": verdicts_all,
    "zoo": zoo,
    "zoo-noise": zoo_noise,
    "bench": bench,
    "bench-gpu": bench_gpu,
    "gate-plan": gate_plan,
    "gate-mde": gate_mde,
}


def render(text: str, root: Path = ROOT, where: str = "<text>") -> str:
    """``text`` with every generated block rewritten from its source."""

    def body(match: re.Match) -> str:
        name = match.group("name")
        if name not in GENERATORS:
            raise SystemExit(f"{where}: unknown generated block {name!r}; known: {', '.join(GENERATORS)}.")
        return f"{match.group(1)}{GENERATORS[name](root)}{match.group(4)}"

    return BLOCK.sub(body, text)


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list stale blocks (exit 1 if any)")
    args = parser.parse_args(argv)
    stale = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        new = render(text, where=str(path.relative_to(ROOT)))
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "stale" if args.check else "rewrote"
    print(f"{verb}: {', '.join(stale)}" if stale else "every generated block is current")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
