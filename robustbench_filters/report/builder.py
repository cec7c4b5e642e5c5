"""``build_report``: run folders in, a folder of tables, figures and an ``index.md`` (optionally ``index.html``) out.

Everything is recomputed from the per-example rows, so a report never disagrees with the runs it names, and
tables from several runs line up example by example. Items whose inputs are missing (no LM run, no per-layer
Lipschitz rows, ...) are skipped and listed in ``index.md`` with the reason, rather than failing the report.

With ``paper=True`` the figures carry no setting line and no source line (a paper's caption states them); both
stay in ``index.md``/``index.html`` and in ``figures/provenance.json``, which names every figure's runs and hashes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .. import vacuity
from ..errors import RobfiltError, unknown
from ..runs.folder import Run
from ..runs.outfolder import OutputFolder, legacy_report_files
from ..summaries import CERTIFY, IMAGE, LIPSCHITZ, LM, SEQLEN
from ..summaries.image import ImageAttackSummary
from . import context as C
from . import figures as F
from . import index as I
from . import provenance as PV
from . import render as R
from . import tables as T
from .index import ReportResult
from .runs import RunSet, load_runs

log = logging.getLogger(__name__)

ATTENTION_MODELS: tuple[str, str] = ("deit", "deit-bsa")


def _check_formats(values: Sequence[str], allowed: Sequence[str], what: str) -> tuple[str, ...]:
    values = tuple(v.strip().lower().lstrip(".") for v in ((values,) if isinstance(values, str) else values))
    for i, v in enumerate(values):
        if v not in allowed:
            raise unknown(what, v, allowed)
        if v in values[:i]:
            raise RobfiltError(f"{what} {v!r} is listed twice; list each format once.")
    return values


def _vacuous_note(table: pd.DataFrame) -> str:
    """The vacuity rule, appended to a caption whose table labels a certified number vacuous."""
    cols = [c for c in table.columns if c.endswith("_vacuous")]
    if not cols or not table[cols].fillna(False).to_numpy().any():
        return ""
    return f" {vacuity.SHORT}."


class _Builder:
    def __init__(
        self,
        runset: RunSet,
        folder: OutputFolder,
        formats: tuple[str, ...],
        fig_formats: tuple[str, ...],
        html: bool = False,
        paper: bool = False,
    ) -> None:
        out = folder.out
        self.rs, self.folder, self.out, self.html, self.paper = runset, folder, out, html, paper
        self.formats, self.fig_formats = formats, fig_formats
        self.provenance: dict[str, dict[str, Any]] = {}
        self.result = ReportResult(out=out, index=out / "index.md", runs=runset.ids(), notes=list(runset.notes))
        self.sections: list[I.Section] = []

    def table(self, name: str, title: str, caption: str, tidy: pd.DataFrame, layout: pd.DataFrame, family: str) -> None:
        if not self.formats:
            return
        sources = self.rs.ids(family)
        self.folder.paths(f"tables/{name}.{fmt}" for fmt in self.formats)
        paths = R.write_table(self.out / "tables", name, tidy, layout, caption, sources, self.formats)
        self.result.tables[name] = paths
        self.sections.append(I.Section(title, caption, table=name, inline=R.markdown(layout), layout=layout))

    def figure(
        self,
        name: str,
        title: str,
        caption: str | Callable[[Any], str],
        make: Callable[[bool], Any],
        sources: Sequence[str],
        subtitle: str,
        runs: Sequence[Run],
    ) -> None:
        """Draw ``make(paper)``; a callable ``caption`` reads the drawn figure, so it names only what is there.

        The setting (``subtitle``) and ``sources`` go to the index pages and ``figures/provenance.json`` in both
        modes, since a paper figure does not show them.
        """
        if not self.fig_formats and not self.html:
            return
        fig = make(self.paper)
        text = caption(fig) if callable(caption) else caption
        files: list = []
        if self.fig_formats:
            self.folder.paths(f"figures/{name}.{fmt}" for fmt in self.fig_formats)
            files = F.save_figure(fig, self.out / "figures", name, self.fig_formats)
        if files:
            self.result.figures[name] = files
        self.provenance[name] = PV.provenance_entry(fig, title, text, subtitle, sources, runs, files, self.paper)
        svg = F.figure_bytes(fig, "svg") if self.html else None
        self.sections.append(I.Section(title, text, figure=name, svg=svg, setting=subtitle, sources=list(sources)))

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
                sub = C.image_subtitle(self.rs.families[IMAGE], rows, n)
                self.figure(
                    "robust_accuracy_vs_eps",
                    "Robust accuracy vs eps",
                    F.robust_accuracy_caption,
                    lambda paper: F.robust_accuracy_figure(acc, src, sub, paper=paper),
                    src,
                    sub,
                    self.rs.families[IMAGE],
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

        for run in self.rs.families.get(IMAGE, []):
            summary = run.typed_summary
            if isinstance(summary, ImageAttackSummary) and set(ATTENTION_MODELS) <= set(
                summary.recorded_attention().maps
            ):
                break
        else:
            self.skip("attention maps", "no image run recorded CLS attention maps for deit and deit-bsa")
            return
        maps, image = maps_from_run(run, ATTENTION_MODELS)
        if image is None:
            self.skip("attention maps", "the run recorded no input image (only images up to 64x64 are stored)")
            return
        example = summary.recorded_attention().example_id
        sources = [m.source for m in maps] + [f"image: {summary.data} test[{example}]"]
        grid = "x".join(str(d) for d in maps[0].maps.shape[1:])
        self.figure(
            "attention_maps",
            "Attention maps: softmax vs BSA",
            f"CLS-token attention per layer (mean over heads) on the {grid} patch grid, for one bundled test image.",
            lambda paper: F.attention_figure(maps, image, sources, F.ATTENTION_SUBTITLE, paper=paper),
            sources,
            F.ATTENTION_SUBTITLE,
            [run],
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
            context = C.lm_subtitle(self.rs.families[LM], rows, int(table["n"].max()))
            self.table(
                "perplexity",
                "Perplexity under attack and contamination",
                "Token perplexity exp(sum nll / sum tokens) (per character for robfilt's character-level LMs) with "
                "95% bootstrap intervals over examples, per attack and eps (embedding attacks) or contamination rate "
                f"(text attacks); {context}.",
                table,
                R.perplexity_layout(table),
                LM,
            )
            if "word_perplexity" in table.columns and table["word_perplexity"].notna().any():
                self.table(
                    "lm_eval",
                    "lm-eval perplexities under attack and contamination",
                    "lm-eval's word_perplexity [95% bootstrap CI], byte_perplexity and bits_per_byte (rolling "
                    "log-likelihood windows; words and bytes of the clean text), for the models scored that way "
                    f"(Hugging Face models); {context}.",
                    table,
                    R.lm_eval_layout(table),
                    LM,
                )
            if (table["attack"] != T.CLEAN).any():
                src = self.rs.ids(LM)
                sub = C.lm_subtitle(self.rs.families[LM], rows, int(table["n"].max()))
                self.figure(
                    "perplexity_vs_rate",
                    "Perplexity vs contamination rate",
                    F.perplexity_caption,
                    lambda paper: F.perplexity_figure(table, src, sub, paper=paper),
                    src,
                    sub,
                    self.rs.families[LM],
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
                "(median), certified global constant, and the certified l2 radius (mean)." + _vacuous_note(table),
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
                    "Per block: empirical gain at the hidden states (mean, max) and certified block constants."
                    + _vacuous_note(layers),
                    layers,
                    R.lipschitz_layer_layout(layers),
                    LIPSCHITZ,
                )
                src, sub = self.rs.ids(LIPSCHITZ), C.lipschitz_subtitle(rows)
                self.figure(
                    "lipschitz_profile",
                    "Per-layer Lipschitz profile",
                    F.lipschitz_profile_caption,
                    lambda paper: F.lipschitz_profile_figure(layers, src, sub, paper=paper),
                    src,
                    sub,
                    self.rs.families[LIPSCHITZ],
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
        src, sub = self.rs.ids(SEQLEN), C.seqlen_subtitle(study)
        self.figure(
            "perturbation_vs_seqlen",
            "Perturbation vs sequence length (figure)",
            F.seqlen_caption,
            lambda paper: F.seqlen_figure(study, src, sub, paper=paper),
            src,
            sub,
            self.rs.families[SEQLEN],
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
        if table[["local_upper_vacuous", "global_upper_vacuous"]].fillna(False).to_numpy().any():
            caption += " vacuous = a certified median more than 6 decades (1e6 ×) above the empirical one."
        self.table("lipschitz_gap", "Where the certified Lipschitz bounds lose", caption, table, G.gap_layout(table),
                   LIPSCHITZ)  # fmt: skip
        src, sub = self.rs.ids(LIPSCHITZ), G.gap_subtitle(gap)
        self.figure(
            "lipschitz_gap",
            "Where the certified Lipschitz bounds lose (figure)",
            "Per block and for the whole model (medians over examples, log axis): the vertical segments are the "
            "losses.",
            lambda paper: G.lipschitz_gap_figure(gap, sources=src, subtitle=sub, paper=paper),
            src,
            sub,
            self.rs.families[LIPSCHITZ],
        )

    def certify(self) -> None:
        from . import certified as CT

        runs = self.rs.families.get(CERTIFY, [])
        rows = self.rs.rows.get(CERTIFY)
        if not runs or rows is None:
            self.skip("certified accuracy", "no certify run given")
            return
        table, largest = CT.certified_table(rows), CT.largest_certified_radius(rows)
        self.table(
            "certified_accuracy",
            "Certified accuracy of the smoothed classifiers",
            "Fraction of examples whose true class is certified at L2 radius r by randomized smoothing (Cohen et "
            "al. 2019), with exact 95% Clopper-Pearson intervals over examples; abstain = CERTIFY abstained."
            + CT.beyond_note(table, largest),
            table,
            CT.certified_layout(table, largest),
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
        base_runs = [r for r in self.rs.families.get(IMAGE, []) if len(base) and r.run_id in set(base["run"])]
        src = self.rs.ids(CERTIFY) + [r.run_id for r in base_runs]
        self.figure(
            "certified_accuracy_vs_radius",
            "Certified vs empirical robust accuracy",
            CT.certified_caption,
            lambda paper: CT.certified_figure(curve, smoothed, base, src, subtitle, paper=paper),
            src,
            subtitle,
            [*runs, *base_runs],
        )

    def write_provenance(self) -> None:
        """``figures/provenance.json``: each figure's setting, sources and runs (with hashes), whatever the mode.
        Without figures none is written, and the folder's finish removes an earlier report's."""
        if self.result.figures:
            self.folder.path(f"figures/{PV.PROVENANCE}")
            PV.write_provenance(self.out / "figures", self.provenance, True)

    def remove_stale(self) -> None:
        """Remove the files an earlier report listed and this one did not write, so index.md and the folder
        agree; files robfilt did not write are never touched (see :class:`~..runs.outfolder.OutputFolder`)."""
        for path in self.folder.finish():
            log.info("report: removed stale %s", path)

    # -- index ---------------------------------------------------------------------------------------------
    def checks_notes(self) -> None:
        for run in self.rs.runs:
            failed = [f"{c.model}: {c.name}" for c in run.typed_summary.sanity_checks() if c.status == "fail"]
            if failed:
                self.result.notes.append(
                    f"run {run.run_id}: {len(failed)} sanity check(s) FAILED ({'; '.join(failed)}); "
                    "treat its numbers as unreliable."
                )

    def index(self) -> Path:
        self.folder.path("index.md")
        return I.write_markdown(self.result, self.rs.runs, self.sections)

    def index_html(self) -> Path:
        """The same report as one self-contained page (figures inline, sortable tables, every sanity check)."""
        self.folder.path("index.html")
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
    overwrite: bool = False,
    paper: bool = False,
) -> ReportResult:
    """Write tables, figures and ``index.md`` for the given run folders into ``out``.

    Args:
        run_dirs: finished run folders (attack, LM, Lipschitz, sequence-length study).
        out: report folder; created if needed. An earlier report there is replaced (its files only); a folder
            that is not a robfilt report, or holds files no report wrote, is refused unless ``overwrite``.
        formats: table formats, any of md, csv, tex (empty: no tables).
        figures: figure formats, any of pdf, png, svg (empty: no figures).
        allow_mixed: accept runs of one family made on different examples (then no paired tests across them).
        baseline: the model variants are compared with (default: deit / lm / the first model).
        attention: draw softmax-vs-BSA attention maps (default: when the image runs hold deit and deit-bsa).
        html: also write ``index.html``, one self-contained page with the figures inline and sortable tables.
        overwrite: write into a folder of other files too; they are kept (robfilt removes only files it wrote).
        paper: figures for a two-column paper: no setting or source line inside them (both stay in the index
            pages and ``figures/provenance.json``), one-column (3.3 in) or two-column (6.9 in) wide.
    """
    formats = _check_formats(formats, R.FORMATS, "table format")
    fig_formats = _check_formats(figures, ("pdf", "png", "svg"), "figure format")
    runset = load_runs(run_dirs, allow_mixed=allow_mixed)
    folder = OutputFolder(out, "report", overwrite=overwrite, legacy=legacy_report_files).open()
    builder = _Builder(runset, folder, formats, fig_formats, html=html, paper=paper)
    builder.image(baseline, attention)
    builder.lm()
    builder.lipschitz()
    builder.certify()
    builder.checks_notes()
    builder.write_provenance()
    builder.index()
    if html:
        builder.index_html()
    builder.remove_stale()
    log.info(
        "report written to %s (%d tables, %d figures)", folder.out, len(builder.result.tables),
        len(builder.result.figures),
    )  # fmt: skip
    return builder.result
