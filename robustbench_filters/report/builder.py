"""``build_report``: run folders in, a folder of tables, figures and an ``index.md`` (optionally ``index.html``) out.

Everything is recomputed from the per-example rows, so a report never disagrees with the runs it names, and
tables from several runs line up example by example. Items whose inputs are missing (no LM run, no per-layer
Lipschitz rows, ...) are skipped and listed in ``index.md`` with the reason, rather than failing the report.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..errors import RobfiltError, unknown
from . import context as C
from . import figures as F
from . import index as I
from . import render as R
from . import tables as T
from .index import ReportResult
from .runs import CERTIFY, IMAGE, LIPSCHITZ, LM, SEQLEN, RunSet, load_runs

log = logging.getLogger(__name__)

ATTENTION_MODELS: tuple[str, str] = ("deit", "deit-bsa")


def _check_formats(values: Sequence[str], allowed: Sequence[str], what: str) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(v.strip().lower().lstrip(".") for v in values))
    for v in values:
        if v not in allowed:
            raise unknown(what, v, allowed)
    return values


class _Builder:
    def __init__(
        self, runset: RunSet, out: Path, formats: tuple[str, ...], fig_formats: tuple[str, ...], html: bool = False
    ) -> None:
        self.rs, self.out, self.html = runset, out, html
        self.formats, self.fig_formats = formats, fig_formats
        self.result = ReportResult(out=out, index=out / "index.md", runs=runset.ids(), notes=list(runset.notes))
        self.sections: list[I.Section] = []

    def table(self, name: str, title: str, caption: str, tidy: pd.DataFrame, layout: pd.DataFrame, family: str) -> None:
        if not self.formats:
            return
        sources = self.rs.ids(family)
        paths = R.write_table(self.out / "tables", name, tidy, layout, caption, sources, self.formats)
        self.result.tables[name] = paths
        self.sections.append(I.Section(title, caption, table=name, inline=R.markdown(layout), layout=layout))

    def figure(self, name: str, title: str, caption: str, make) -> None:
        if not self.fig_formats and not self.html:
            return
        fig = make()
        if self.fig_formats:
            self.result.figures[name] = F.save_figure(fig, self.out / "figures", name, self.fig_formats)
        svg = F.figure_bytes(fig, "svg") if self.html else None
        self.sections.append(I.Section(title, caption, figure=name, svg=svg))

    def skip(self, what: str, why: str) -> None:
        log.info("report: skipping %s (%s)", what, why)
        self.result.skipped.append(f"{what}: {why}")

    # -- families -----------------------------------------------------------------------------------------
    def image(self, baseline: str | None, attention: bool | None) -> None:
        rows = self.rs.rows.get(IMAGE)
        if rows is None:
            for item in ("robust accuracy table and figure", "paired comparison", "corruption accuracy"):
                self.skip(item, "no image attack run given")
            if attention:
                self.skip("attention maps", "no image run given (the maps use the run's weights)")
            return
        src = self.rs.ids(IMAGE)
        acc = T.accuracy_table(rows)
        if acc.empty:
            self.skip("robust accuracy table", "the image runs hold no attack rows")
        else:
            n = int(acc["n"].max())
            self.table(
                "robust_accuracy",
                "Clean and robust accuracy",
                f"Accuracy (%) with 95% Wilson intervals on {n} examples; eps on the [0, 1] pixel scale.",
                acc,
                R.accuracy_layout(acc),
                IMAGE,
            )
            if (acc["attack"] != T.CLEAN).any():
                self.figure(
                    "robust_accuracy_vs_eps",
                    "Robust accuracy vs eps",
                    "Accuracy vs perturbation budget per attack (eps 0 = clean); bands: 95% Wilson intervals.",
                    lambda: F.robust_accuracy_figure(acc, src, C.image_subtitle(self.rs.families[IMAGE], rows, n)),
                )
            else:
                self.skip("robust accuracy figure", "only clean rows")
        ledger = T.ledger_table(rows)
        if not ledger.empty:
            self.table(
                "compute_ledger",
                "Compute ledger",
                "Model passes (forward + backward) per example and in total, and the share of the examples each "
                "stage broke (clean: misclassified unattacked); exact = counted per example.",
                ledger,
                R.generic_layout(ledger),
                IMAGE,
            )
        names = list(dict.fromkeys(m.split(" [", 1)[0] for m in T.model_order(rows)))
        if baseline is not None and baseline not in names:
            raise unknown("baseline model", baseline, names)
        paired = T.paired_table(rows, baseline)
        if paired.empty:
            self.skip("paired comparison", "needs a baseline and at least one variant on the same examples")
        else:
            base = ", ".join(dict.fromkeys(paired["baseline"]))
            self.table(
                "paired_vs_baseline",
                f"Variants vs {base} (paired)",
                f"Paired difference in accuracy vs {base} on the same examples; b = only {base} right, "
                "c = only the variant right; McNemar's exact two-sided p-value.",
                paired,
                R.paired_layout(paired),
                IMAGE,
            )
        self._corruptions(rows, IMAGE, baseline)
        models = set(T.model_order(rows))
        if attention is None:
            attention = all(m in models for m in ATTENTION_MODELS)
            if not attention:
                self.skip("attention maps", "the image runs do not include both deit and deit-bsa")
        if attention:
            self._attention()

    def _corruptions(self, rows: pd.DataFrame, family: str, baseline: str | None = None) -> None:
        table = T.corruption_table(rows)
        if table.empty:
            self.skip(f"corruption table ({family})", "no corruption rows")
            return
        means = T.corruption_means(table)
        what = "perplexity [95% bootstrap CI]" if "ppl" in table.columns else "accuracy (%) [95% Wilson CI]"
        self.table(
            f"corruption_{family}",
            f"Corruptions ({family})",
            f"{what} per corruption and severity; 'mean' averages the corruptions at each severity.",
            pd.concat([table, means], ignore_index=True),
            R.corruption_layout(table, means),
            family,
        )
        errors = T.corruption_error_table(table, baseline)
        if not errors.empty:
            base = errors["baseline"].iloc[0]
            self.table(
                f"corruption_error_{family}",
                f"Corruption error vs {base}",
                f"CE per corruption = sum over severities of the model's error / {base}'s error (Hendrycks & "
                f"Dietterich 2019, {base} in AlexNet's place); mCE = mean over corruptions; lower is better.",
                errors,
                R.corruption_error_layout(errors),
                family,
            )

    def _attention(self) -> None:
        from .attention import maps_from_run

        run = next(
            (
                r
                for r in self.rs.families.get(IMAGE, [])
                if set(ATTENTION_MODELS) <= set((r.summary.get("attention") or {}))
            ),
            None,
        )
        if run is None:
            self.skip("attention maps", "no image run recorded CLS attention maps for deit and deit-bsa")
            return
        maps, image = maps_from_run(run, ATTENTION_MODELS)
        if image is None:
            self.skip("attention maps", "the run recorded no input image (only images up to 64x64 are stored)")
            return
        example = run.summary["attention"].get("_example_id")
        sources = [m.source for m in maps] + [f"image: {run.summary.get('data')} test[{example}]"]
        self.figure(
            "attention_maps",
            "Attention maps: softmax vs BSA",
            "CLS-token attention per layer (mean over heads) on the 7x7 patch grid, for one bundled test image.",
            lambda: F.attention_figure(maps, image, sources),
        )

    def lm(self) -> None:
        rows = self.rs.rows.get(LM)
        if rows is None:
            self.skip("perplexity table and figure", "no LM run given")
            return
        table = T.perplexity_table(rows)
        if table.empty:
            self.skip("perplexity table", "the LM runs hold no nll rows")
        else:
            self.table(
                "perplexity",
                "Perplexity under attack and contamination",
                "Perplexity exp(sum nll / sum tokens) with 95% bootstrap intervals over examples, per attack and "
                "eps (embedding attacks) or contamination rate (text attacks).",
                table,
                R.perplexity_layout(table),
                LM,
            )
            if (table["attack"] != T.CLEAN).any():
                src = self.rs.ids(LM)
                sub = C.lm_subtitle(self.rs.families[LM], rows, int(table["n"].max()))
                self.figure(
                    "perplexity_vs_rate",
                    "Perplexity vs contamination rate",
                    "Perplexity vs contamination rate (or embedding eps) per attack; bands: 95% bootstrap intervals.",
                    lambda: F.perplexity_figure(table, src, sub),
                )
            else:
                self.skip("perplexity figure", "only clean rows")
        self._corruptions(rows, LM)

    def lipschitz(self) -> None:
        rows = self.rs.rows.get(LIPSCHITZ)
        if rows is None:
            self.skip("Lipschitz table and per-layer profile", "no Lipschitz run given")
        else:
            table = T.lipschitz_table(rows)
            self.table(
                "lipschitz_bounds",
                "Lipschitz bounds",
                "Per-example lower bounds on the local l2 Lipschitz constant (mean, max), certified local constant "
                "(median), certified global constant, and the certified l2 radius (mean).",
                table,
                R.lipschitz_layout(table),
                LIPSCHITZ,
            )
            layers = T.lipschitz_layer_table(rows)
            if layers.empty:
                self.skip("per-layer Lipschitz profile", "the Lipschitz runs have no per-layer rows (--per-layer)")
            else:
                self.table(
                    "lipschitz_layers",
                    "Per-block Lipschitz profile",
                    "Per block: empirical gain at the hidden states (mean, max) and certified block constants.",
                    layers,
                    R.lipschitz_layer_layout(layers),
                    LIPSCHITZ,
                )
                src = self.rs.ids(LIPSCHITZ)
                self.figure(
                    "lipschitz_profile",
                    "Per-layer Lipschitz profile",
                    "Per block: empirical gain (mean over examples) and certified local constant (median); "
                    "colour and marker: variant; solid and filled: DeiT, dashed and hollow: LM.",
                    lambda: F.lipschitz_profile_figure(layers, src, C.lipschitz_subtitle(rows)),
                )
            self._lipschitz_gap(rows)
        rows = self.rs.rows.get(SEQLEN)
        if rows is None:
            self.skip("perturbation vs sequence length", "no sequence-length study run given")
            return
        study = T.seqlen_table(rows)
        self.table(
            "seqlen",
            "Perturbation vs sequence length",
            "RMS output change of one attention layer for a fixed input noise, per sequence length and kind.",
            study,
            R.seqlen_layout(study),
            SEQLEN,
        )
        src = self.rs.ids(SEQLEN)
        self.figure(
            "perturbation_vs_seqlen",
            "Perturbation vs sequence length (figure)",
            "Output change of one attention sublayer vs sequence length (mean +- 1 sd over trials).",
            lambda: F.seqlen_figure(study, src, C.seqlen_subtitle(study)),
        )

    def _lipschitz_gap(self, rows: pd.DataFrame) -> None:
        """Where the certified bounds lose (rows of ``robfilt lipschitz --gap``): table and figure."""
        from . import lipschitz_gap as G

        gap = G.gap_rows_of(rows)
        if gap.empty:
            self.skip("Lipschitz gap", "no gap rows (robfilt lipschitz --gap)")
            return
        table = G.gap_table(gap)
        caption = (
            "log10 of the median over examples, per model, block and ball radius rho: empirical gain (a lower "
            "bound), the product of exact per-sublayer norms (layerwise estimate, not certified), the certified "
            "local and global bounds, and the decades lost to composition and to the layer bounds."
        )
        self.table("lipschitz_gap", "Where the certified Lipschitz bounds lose", caption, table, G.gap_layout(table),
                   LIPSCHITZ)  # fmt: skip
        src = self.rs.ids(LIPSCHITZ)
        self.figure(
            "lipschitz_gap",
            "Where the certified Lipschitz bounds lose (figure)",
            "Per block and for the whole model (medians, log axis): the vertical segments are the losses.",
            lambda: G.lipschitz_gap_figure(gap, sources=src),
        )

    def certify(self) -> None:
        from . import certified as CT

        runs = self.rs.families.get(CERTIFY, [])
        rows = self.rs.rows.get(CERTIFY)
        if not runs or rows is None:
            self.skip("certified accuracy", "no certify run given")
            return
        table = CT.certified_table(rows)
        self.table(
            "certified_accuracy",
            "Certified accuracy of the smoothed classifiers",
            "Fraction of examples whose true class is certified at L2 radius r by randomized smoothing (Cohen et "
            "al. 2019), with exact 95% Clopper-Pearson intervals over examples; abstain = CERTIFY abstained.",
            table,
            CT.certified_layout(table),
            CERTIFY,
        )
        curve, smoothed = CT.certified_curve(rows), CT.smoothed_attack_table(rows)
        base = CT.base_l2_table(runs, self.rs.families.get(IMAGE, []))
        c = runs[0].manifest["config"]
        subtitle = (
            f"n = {int(table['n'].iloc[0])} test images · certified L2 radius, n0 = {c.get('n0')}, n = {c.get('n')}, "
            f"α = {c.get('alpha')} · empirical: SmoothAdv PGD on the smoothed classifier"
            + (" and L2 PGD on the base model" if len(base) else "")
        )
        src = self.rs.ids(CERTIFY) + (
            [f"{len(base['model'].unique())} base model(s) from image runs"] if len(base) else []
        )
        self.figure(
            "certified_accuracy_vs_radius",
            "Certified vs empirical robust accuracy",
            "Certified accuracy (solid) must lie below the empirical robust accuracy of the smoothed classifier under "
            "SmoothAdv PGD (points) and, when measured on the same weights, of the base model under L2 PGD (dashed).",
            lambda: CT.certified_figure(curve, smoothed, base, src, subtitle),
        )

    def remove_stale(self) -> None:
        """Delete tables/figures an earlier report left in this folder, so index.md and the folder agree."""
        written = {p for paths in (*self.result.tables.values(), *self.result.figures.values()) for p in paths}
        known = {f".{f}" for f in (*R.FORMATS, "pdf", "png", "svg")}
        for sub in ("tables", "figures"):
            folder = self.out / sub
            for path in sorted(folder.glob("*")) if folder.is_dir() else ():
                if path.is_file() and path.suffix in known and path not in written:
                    log.info("report: removing stale %s", path)
                    path.unlink()
        stale_html = self.out / "index.html"
        if not self.html and stale_html.is_file():
            log.info("report: removing stale %s", stale_html)
            stale_html.unlink()

    # -- index ---------------------------------------------------------------------------------------------
    def checks_notes(self) -> None:
        for run in self.rs.runs:
            counts = run.summary.get("checks_summary")
            if counts and not counts.get("passed", True):
                failed = [f"{c['model']}: {c['name']}" for c in run.summary.get("checks", []) if c["status"] == "fail"]
                self.result.notes.append(
                    f"run {run.run_id}: {counts.get('fail', len(failed))} sanity check(s) FAILED ({'; '.join(failed)}); "
                    "treat its numbers as unreliable."
                )

    def index(self) -> Path:
        return I.write_markdown(self.result, self.rs.runs, self.sections)

    def index_html(self) -> Path:
        """The same report as one self-contained page (figures inline, sortable tables, every sanity check)."""
        return I.write_html(self.result, self.rs.runs, self.sections)


def build_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    formats: Sequence[str] = R.FORMATS,
    figures: Sequence[str] = F.FIGURE_FORMATS,
    allow_mixed: bool = False,
    *,
    baseline: str | None = None,
    attention: bool | None = None,
    html: bool = False,
) -> ReportResult:
    """Write tables, figures and ``index.md`` for the given run folders into ``out``.

    Args:
        run_dirs: finished run folders (attack, LM, Lipschitz, sequence-length study).
        out: report folder; created if needed, its report files are replaced.
        formats: table formats, any of md, csv, tex (empty: no tables).
        figures: figure formats, any of pdf, png, svg (empty: no figures).
        allow_mixed: accept runs of one family made on different examples (then no paired tests across them).
        baseline: the model variants are compared with (default: deit / lm / the first model).
        attention: draw softmax-vs-BSA attention maps (default: when the image runs hold deit and deit-bsa).
        html: also write ``index.html``, one self-contained page with the figures inline and sortable tables.
    """
    formats = _check_formats(formats, R.FORMATS, "table format")
    fig_formats = _check_formats(figures, ("pdf", "png", "svg"), "figure format")
    runset = load_runs(run_dirs, allow_mixed=allow_mixed)
    out = Path(out)
    if (out / "manifest.json").exists():
        raise RobfiltError(f"--out {out} is a run folder; write the report to another folder, e.g. reports/NAME.")
    if out.exists() and not out.is_dir():
        raise RobfiltError(f"--out {out} is a file; pass a folder path.")
    out.mkdir(parents=True, exist_ok=True)
    builder = _Builder(runset, out, formats, fig_formats, html=html)
    builder.image(baseline, attention)
    builder.lm()
    builder.lipschitz()
    builder.certify()
    builder.checks_notes()
    builder.remove_stale()
    builder.index()
    if html:
        builder.index_html()
    log.info(
        "report written to %s (%d tables, %d figures)", out, len(builder.result.tables), len(builder.result.figures)
    )
    return builder.result
