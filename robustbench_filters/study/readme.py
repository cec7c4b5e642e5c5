"""The study's README text, generated from the numbers: one function per section.

Nothing in the README is typed by hand: the claims table comes from :mod:`.claims`, every other table from the
per-seed scores (:mod:`.tables`), the settings from the plan, the wall times from the manifest. Negative and
inconclusive verdicts are listed exactly like positive ones, in the same table. :mod:`.writeup` draws the figures
and writes the files.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..core.family import Family
from ..stats import vacuity
from ..train.loop import DEFAULT_RECIPES
from . import plan as P
from .claims import MIN_SEEDS, ClaimResult, Verdict
from .plan import StudyPlan
from .scores import StudyScores, vacuous_cells
from .tables import METRICS, interval_cell, markdown, mcnemar_table, paired_table, seed_table

REPORT_DIR = "report"
_SEED_CAP = (
    "Mean [95% t-interval] across training seeds, clipped to what the quantity can take (accuracies to [0, 100] %, "
    "bounds, gains and radii at 0); just the value with one seed."
)


def _cmd(plan: StudyPlan) -> str:
    if plan.name not in ("full", "quick"):
        return f"run_study(<plan {plan.name!r}>)"
    quick = " --quick" if plan.name == "quick" else ""
    return f"robfilt study{quick} --seeds {len(plan.seeds)}"


def claims_table(claims: list[ClaimResult], primary: bool) -> pd.DataFrame:
    rows = []
    for c in claims:
        if c.spec.primary != primary:
            continue
        diff_fmt = METRICS[c.spec.comparisons[0].metric][1]
        diffs, seeds, per_seed = [], [], []
        for r in c.results:
            cmp_ = r.comparison
            who = f"{cmp_.variant} - {cmp_.baseline}"
            if not r.diffs:
                diffs.append(f"{who}: not measured")
                continue
            diffs.append(f"{who}: {interval_cell(list(r.diffs.values()), diff_fmt)}")
            per_seed.append(", ".join(diff_fmt(v) for v in r.diffs.values()))
            seeds.append(len(r.diffs))
        rows.append(
            {
                "claim": f"({c.spec.id}) {c.spec.claim}",
                "scope": c.spec.scope,
                "evidence": c.spec.evidence,
                "difference, mean [95% CI]": "; ".join(diffs),
                "per seed": "; ".join(per_seed) or "-",
                "seeds": min(seeds) if seeds else 0,
                "verdict": f"**{c.verdict.value}**",
                "why": c.reason,
            }
        )
    return pd.DataFrame(rows)


def _zoo_length(family: Family) -> str:
    recipe = DEFAULT_RECIPES[family]
    return f"{recipe.epochs} epochs at batch {recipe.batch_size}" if recipe.epochs else f"{recipe.steps} steps"


def _recipes(plan: StudyPlan) -> pd.DataFrame:
    fields = ("epochs", "steps", "batch_size", "lr", "weight_decay", "warmup_frac", "augment", "tokenizer")
    rows = []
    for family, models, recipe, data in (
        ("vision", plan.vision_models, plan.vision_recipe, plan.vision_data),
        ("language", plan.lm_models, plan.lm_recipe, plan.lm_data),
    ):
        if models:
            d = dataclasses.asdict(recipe)
            cells = {k: "-" if d[k] is None else str(d[k]) for k in fields}  # str: no 6.0 from a NaN-mixed column
            rows.append({"family": family, "models": ", ".join(models), "data": data, **cells})
    return pd.DataFrame(rows)


def reused_training(manifest: dict) -> tuple[int, float | None]:
    """How many checkpoints the study reused from elsewhere, and the seconds their cards say they took to train
    (None when a record lacks it): time this study did not spend, reported apart from its own."""
    reused = [
        rec.get("card_wall_s") for rec in manifest.get("pieces", {}).values() if rec.get("trained_by_study") is False
    ]
    return len(reused), None if None in reused else sum(float(v) for v in reused)


def _wall_times(manifest: dict) -> pd.DataFrame:
    """Seconds per kind of piece spent by this study, then (apart from the total) the training time of the
    checkpoints it reused from elsewhere, as their cards record it ("not recorded" when a record lacks it)."""
    groups: dict[str, float] = {}
    for pid, rec in manifest.get("pieces", {}).items():
        kind = pid.split("/", 1)[0]
        groups[kind] = groups.get(kind, 0.0) + float(rec.get("wall_s") or 0.0)
    groups["total"] = sum(groups.values())
    rows = [{"piece": k, "seconds": f"{v:.0f}", "minutes": f"{v / 60:.1f}"} for k, v in groups.items()]
    n_reused, known = reused_training(manifest)
    if n_reused:
        rows.append(
            {
                "piece": f"not in the total: training of the {n_reused} reused checkpoints (their cards)",
                "seconds": "not recorded" if known is None else f"{known:.0f}",
                "minutes": "not recorded" if known is None else f"{known / 60:.1f}",
            }
        )
    return pd.DataFrame(rows)


def _counts(claims: list[ClaimResult]) -> str:
    prim = [c for c in claims if c.spec.primary]
    parts = [f"{sum(c.verdict is v for c in prim)} {v.value}" for v in Verdict]
    return ", ".join(parts)


def _figures_section(
    plan: StudyPlan, figures: list[tuple[str, str]], report_figures: list[tuple[str, str]]
) -> list[str]:
    lines = ["## Figures", ""]
    if figures:
        lines += [
            f"Drawn from all {len(plan.seeds)} training seed(s) ({', '.join(map(str, plan.seeds))}): the mean as a "
            "thick line, every seed as a thin one (accuracy: arithmetic mean; perplexity and Lipschitz constants: "
            "geometric). PDF versions are next to the PNGs in `figures/`.",
            "",
        ]
        lines += [line for title, path in figures[1:] for line in (f"![{title}]({path})", "")]
    else:
        lines += ["No study figures (see 'Notes').", ""]
    if report_figures:
        links = ", ".join(f"[{title}]({path})" for title, path in report_figures)
        lines += [
            f"The reporter's report of the first seed's runs (seed {plan.seeds[0]}; per-example tables, Wilson "
            f"intervals, McNemar tests) is in [`{REPORT_DIR}/index.md`]({REPORT_DIR}/index.md); its figures: "
            f"{links}.",
            "",
        ]
    return lines


def _section(title: str, caption: str, table: pd.DataFrame) -> list[str]:
    return [f"### {title}", "", caption, "", markdown(table).rstrip(), ""]


def _intro(plan: StudyPlan, claims: list[ClaimResult], figures: list[tuple[str, str]]) -> list[str]:
    """Title, scope and the claims tables: what a reader needs before any detail."""
    when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return [
        "# Study: do BSA and the boosting residual make transformers more robust?",
        "",
        f"Generated {when} by `{_cmd(plan)}` (plan `{plan.name}`, {len(plan.seeds)} training seed(s): "
        f"{', '.join(map(str, plan.seeds))}). Every number below is recomputed from the run folders under `runs/`; "
        "`results.json` and `scores.csv` hold the same numbers for re-analysis.",
        "",
        "**Scope.** Micro models (DeiT on 28x28 Fashion-MNIST, a 3-layer character LM on Jane Austen) trained with a "
        "short recipe on 2 CPU cores. BSA and the boosting residual (GRC) are this project's formulation of the paper's "
        "principles (docs/design.md); the paper's exact equations, models, data and protocols were not available. "
        "A verdict here is about these models at this scale, not about the paper's ImageNet / WikiText-103 results.",
        "",
        "## Claims",
        "",
        f"Primary evidence ({_counts(claims)}):",
        "",
        markdown(claims_table(claims, primary=True)).rstrip(),
        "",
        *_headline(figures),
        "Secondary evidence (the same claims in the other family, or on one synthetic layer):",
        "",
        markdown(claims_table(claims, primary=False)).rstrip(),
        "",
    ]


def _verdict_rule() -> list[str]:
    """How a verdict follows from the per-seed differences (kept next to the numbers it explains)."""
    return [
        "### How a verdict is made",
        "",
        "For each claim, every training seed gives one paired difference d = metric(variant) - metric(baseline), "
        "both models measured on the same examples. Oriented so that positive means 'as the paper claims', the mean "
        "and the 95% Student-t interval [lo, hi] across seeds (a paired t-interval; `stats.mean_interval`; for "
        "accuracies clipped to the possible differences [-100, 100] points, which never changes a verdict) decide:",
        "",
        "- **supported**: lo > 0 (the interval excludes 0 in the claimed direction);",
        "- **not supported**: hi < 0 (the interval excludes 0 in the opposite direction), or the mean is <= 0 and "
        "hi < delta (the estimate is zero or goes the other way, and the interval excludes the claimed effect size delta);",
        f"- **inconclusive at this scale**: otherwise, including fewer than {MIN_SEEDS} seeds and unmeasured pieces.",
        "",
        "delta: 1 percentage point of accuracy, 1% of perplexity (0.01 in log ppl), 0.05 decades of a Lipschitz bound, "
        "0.05 in a growth exponent. 'Together is best' must beat every other variant: supported only if every "
        "comparison is, not supported if any comparison is not. The per-example McNemar tests below (one per seed) "
        "are reported next to the across-seed intervals but do not enter the verdicts: the claims are about "
        "architectures, so the seed-to-seed variation of training is the relevant noise. Differences are shown in "
        "percentage points (accuracy), as ratios x (perplexity: exp of the log-ppl difference), in decades (log10 "
        "Lipschitz bounds) or as plain differences (growth exponents).",
        "",
    ]


def attack_words(config: Any) -> str:
    """'FGSM, PGD-20' from a run config: each attack by name, iterative ones with their step count."""
    steps = config.steps or 20  # None: each attack's own; PGD's is 20
    named = [a.upper() if a == "fgsm" else f"{a.upper()}-{steps}" if a.startswith("pgd") else a
             for a in config.attacks if a != "wordswap"]  # fmt: skip
    return ", ".join(named)


def _what_was_run(plan: StudyPlan, manifest: dict) -> list[str]:
    """Recipes, measurement settings and compute time, all read from the plan and the manifest."""
    v, vc, lm, sq = plan.vision_attack, plan.vision_corruption, plan.lm_attack, plan.seqlen
    lv, ll = plan.lipschitz_vision, plan.lipschitz_lm
    return [
        "## What was run",
        "",
        "Training recipes (the zoo trains for "
        f"{_zoo_length(Family.IMAGE)} (DeiT) and {_zoo_length(Family.LM)} (LM); the study uses these shorter ones so "
        "that three seeds of eight models fit in two hours on two cores):",
        "",
        markdown(_recipes(plan)).rstrip(),
        "",
        f"- Vision: {attack_words(v)} ({v.norm.value}) at eps {', '.join(f'{e:g}' for e in v.eps)} "
        f"on {int(v.n_examples)} test examples; corruptions (all, severities {', '.join(map(str, vc.severities))}) on "
        f"{int(vc.n_examples)} examples.",
        f"- Language: clean perplexity, word swap ('{lm.replacement}') at rates {', '.join(f'{r:g}' for r in lm.rates)}, "
        f"embedding {attack_words(lm)} (per-token {lm.norm.value}, eps relative to the mean embedding norm) at "
        f"{', '.join(f'{e:g}' for e in lm.eps)}, on {int(lm.n_examples)} test sequences of block_size + 1 characters.",
        f"- Lipschitz: {lv.method} lower bounds on {int(lv.n_examples)} images, {ll.method} lower bounds "
        f"on {int(ll.n_examples)} text windows of {ll.seq_len} tokens; certified global upper bounds; per-block "
        "profiles.",
        *_crown_line(plan),
        f"- Sequence length: trained LMs at N = {', '.join(map(str, sq.lm_ns))} ({sq.lm_windows} windows, per-token "
        f"noise {sq.lm_noise:g} x the mean embedding norm); one synthetic attention layer (seeded by the training "
        f"seed) at N = {', '.join(map(str, sq.layer_ns))}.",
        f"- All evaluation uses seed {plan.eval_seed}, so every model of every training seed sees the same examples.",
        "",
        "Compute time recorded in `study.json` (summed over the pieces and over resumed calls). A checkpoint this "
        "study trained counts the time it took (trainings that ran side by side in worker processes each count "
        "their own, so their sum exceeds the wall-clock time they took together); one it reused from elsewhere "
        "took no time here, and its training time, from its card, is listed apart from the total:",
        "",
        markdown(_wall_times(manifest)).rstrip(),
        "",
    ]


def _crown_line(plan: StudyPlan) -> list[str]:
    """The CROWN piece's settings, when the plan has it."""
    c = plan.lipschitz_crown
    if c is None or not P.has_crown_piece(plan):
        return []
    rhos = ", ".join(f"{r:g}" for r in c.gap_rhos)
    return [
        f"- Certified local Lipschitz bound of linear bound propagation (CROWN, refresh {c.gap_crown_refresh}, l2 ball "
        f"of radius {rhos}) on the first {int(c.n_examples)} of those images, for {', '.join(P.crown_models(plan))} "
        "(claim c; about a minute per image and model on one core)."
    ]


def _notes_and_checks(notes: list[str], checks: pd.DataFrame) -> list[str]:
    """Notes, then the engines' failed sanity checks: shown, never hidden."""
    lines = ["### Notes", "", *(f"- {n}" for n in notes), ""] if notes else []
    lines += ["### Sanity checks", ""]
    if checks.empty:
        return lines + [
            "Every sanity check of every measurement passed (attack strength, eps-balls, gradients, ...).",
            "",
        ]
    return lines + [
        f"{len(checks)} sanity check(s) of the engines did not pass; the numbers of these pieces and models are "
        "less reliable:",
        "",
        markdown(checks).rstrip(),
        "",
    ]


def _vision_section(plan: StudyPlan, data: StudyScores) -> list[str]:
    s, vbase = data.scores, plan.vision_models[0] if plan.vision_models else "deit"
    lines = ["## Vision (DeiT micro)", ""]
    lines += _section("Clean and robust accuracy (%)", _SEED_CAP, seed_table(s, "image", "acc", plan.vision_models))
    lines += _section(
        f"Paired differences vs {vbase} (percentage points)",
        "Per seed: variant - baseline on the same examples; mean [95% paired t-interval] across seeds.",
        paired_table(s, "image", "acc", vbase),
    )
    lines += _section(
        f"McNemar exact tests vs {vbase}, per seed",
        "b = examples only the baseline gets right, c = only the variant; two-sided exact p.",
        mcnemar_table(data.mcnemar),
    )
    lines += _section(
        "Corruptions: accuracy (%)",
        _SEED_CAP + " Mean over severities per corruption.",
        seed_table(s, "image", "corruption_acc", plan.vision_models),
    )
    return lines + _section(
        f"Mean corruption error vs {vbase}", _SEED_CAP, seed_table(s, "image", "mce", plan.vision_models)
    )


def _lm_section(plan: StudyPlan, data: StudyScores) -> list[str]:
    s, lbase = data.scores, plan.lm_models[0] if plan.lm_models else "lm"
    lines = ["## Language (LM micro)", ""]
    lines += _section(
        "Perplexity",
        "Geometric mean [95% interval] across seeds (log scale). Conditions: attack@eps (embedding) or wordswap@rate.",
        seed_table(s, "lm", "log_ppl", plan.lm_models),
    )
    lines += _section(
        f"Perplexity ratio vs {lbase}",
        "Per seed: variant / baseline perplexity on the same sequences; geometric mean [95% paired t-interval].",
        paired_table(s, "lm", "log_ppl", lbase),
    )
    return lines + _section(
        "Perplexity increase over clean",
        "Perplexity under attack / clean perplexity of the same model (mean over eps, or rates > 0).",
        seed_table(s, "lm", "log_ppl_increase", plan.lm_models),
    )


def _labelled(
    scores: pd.DataFrame, fam: str, metric: str, models: Sequence[str], label: str
) -> tuple[pd.DataFrame, str]:
    """seed_table with every vacuous certified cell shown as ``vacuous (...)``, and the caption saying why."""
    table = seed_table(scores, fam, metric, models, label=label)
    bad = vacuous_cells(scores, fam, metric)
    if table.empty or not bad:
        return table, _SEED_CAP
    for model in table.columns[1:]:
        table[model] = [
            vacuity.label(v, (model, c) in bad, "log") for v, c in zip(table[model], table[label], strict=True)
        ]
    return table, f"{_SEED_CAP} {vacuity.SHORT} (in at least one seed)."


def _lipschitz_section(plan: StudyPlan, data: StudyScores) -> list[str]:
    """Lower bounds, the layerwise estimate and certified bounds per family, then the smoothing certificates."""
    s = data.scores
    lines = ["## Lipschitz bounds", ""]
    for fam, models, title in (("image", plan.vision_models, "Vision"), ("lm", plan.lm_models, "Language")):
        for metric in ("lip_lower_mean", "lip_lower_max", "lip_log10_layerwise", "lip_log10_crown", "lip_log10_upper"):
            if not s[(s["family"] == fam) & (s["metric"] == metric)].empty:
                table, cap = _labelled(s, fam, metric, models, "condition")
                lines += _section(f"{title}: {METRICS[metric][2]}", cap, table)
        for metric in ("lip_layer_lower_mean", "lip_layer_log10_upper"):
            table, cap = _labelled(s, fam, metric, models, "block")
            lines += _section(f"{title}, per block: {METRICS[metric][2]}", cap, table)
    cert = plan.certify
    sigmas = ", ".join(f"{s:g}" for s in cert.sigmas)
    cert_cap = (
        f"Randomized smoothing (Cohen et al. 2019) of the study's DeiTs at sigma {sigmas}: n0 = {cert.n0}, "
        f"n = {cert.n}, alpha = {cert.alpha:g}, {int(cert.n_examples)} test images; the radius counts 0 where the true "
        "class is not certified. " + _SEED_CAP
    )
    for metric in ("certified_radius_mean", "certified_acc"):
        if not s[(s["family"] == "image") & (s["metric"] == metric)].empty:
            table = seed_table(s, "image", metric, plan.vision_models)
            lines += _section(f"Smoothed DeiTs: {METRICS[metric][2]}", cert_cap, table)
    return lines


def _seqlen_section(plan: StudyPlan, data: StudyScores) -> list[str]:
    s = data.scores
    lines = ["## Perturbation vs sequence length", ""]
    lines += _section(
        "Trained LMs: growth exponent",
        "Slope of log(mean last-token logit gain) on log N; lower = grows more slowly. " + _SEED_CAP,
        seed_table(s, "lm", "seqlen_slope", plan.lm_models),
    )
    lines += _section("Trained LMs: gain per N", _SEED_CAP, seed_table(s, "lm", "seqlen_gain", plan.lm_models))
    lines += _section(
        "One attention layer (synthetic): growth exponent",
        "softmax+pos: softmax attention on content + sinusoidal positions; bsa-gaussian: Gaussian BSA on content; "
        "softmax: no positions. " + _SEED_CAP,
        seed_table(s, "layer", "seqlen_slope"),
    )
    return lines + _section(
        "One attention layer: RMS output change per N", _SEED_CAP, seed_table(s, "layer", "seqlen_perturbation")
    )


_FILES = [
    "## Files",
    "",
    "- `study.json`: the plan and every piece's status, input fingerprint, folder and wall time (resume state).",
    "- `checkpoints/`: the trained models (safetensors + card with recipe, data checksum and seed).",
    "- `figures/`: the study's figures (PDF with TrueType fonts, PNG at 300 dpi), drawn from every seed.",
    "- `runs/s<seed>/<piece>/`: run folders with per-example rows (`rows.parquet`) and `summary.json`.",
    "- `results.json`, `scores.csv`: the per-seed numbers and the claims, machine-readable.",
    "",
]


def render_readme(
    plan: StudyPlan,
    manifest: dict,
    data: StudyScores,
    claims: list[ClaimResult],
    figures: list[tuple[str, str]],
    notes: list[str],
    report_figures: Sequence[tuple[str, str]] = (),
    changes: Sequence[str] = (),
) -> str:
    """The README. ``figures``: the study's all-seed figures (the first is the claims forest plot);
    ``report_figures``: the reporter's first-seed figures, linked (not shown) for detail; ``changes``: the verdicts
    that changed since the previous write-up (:mod:`.changes`)."""
    lines = [
        *_intro(plan, claims, figures),
        *changes,
        *_verdict_rule(),
        *_what_was_run(plan, manifest),
        *_notes_and_checks(notes, data.failed_checks),
        *_vision_section(plan, data),
        *_lm_section(plan, data),
        *_lipschitz_section(plan, data),
        *_seqlen_section(plan, data),
        *_figures_section(plan, figures, list(report_figures)),
        *_FILES,
    ]
    return "\n".join(lines)


def _headline(figures: list[tuple[str, str]]) -> list[str]:
    if not figures:
        return []
    title, path = figures[0]
    return [
        "Every comparison behind the verdicts, per training seed (dots), with the 95% interval across seeds (bar) "
        "and its mean (diamond), oriented so that right of zero is the claimed direction; colour = verdict:",
        "",
        f"![{title}]({path})",
        "",
    ]
