"""Report figures: each function takes a tidy table (from :mod:`.tables`) and returns a matplotlib Figure.

Every figure states its sample size and threat model in a line above the panels (``subtitle``; the builder
writes it from the runs, the default names at least n), carries a footer naming the runs (or weights) its
numbers came from, uses the fixed variant and family styles of :mod:`.style`, and shows uncertainty where the
table has it (Wilson bands for accuracy, bootstrap bands for perplexity, +-1 sd over trials for the
sequence-length study). A panel whose values span decades gets a log axis; budgets on the k/255 grid are
labelled as such, like the tables. Nothing here reads files or calls pyplot; :func:`save_figure` writes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..io import atomic_write
from .style import (
    DPI,
    ONE_COLUMN,
    SEQLEN_STYLE,
    TWO_COLUMN,
    Palette,
    add_footer,
    add_subtitle,
    grid_shape,
    new_figure,
    paper_style,
    spans_decades,
    tidy_grid,
)
from .tables import CLEAN, eps_label, model_order

if TYPE_CHECKING:  # attention pulls in torch and timm; figures only need the maps
    from .attention import AttentionMaps

FIGURE_FORMATS: tuple[str, ...] = ("pdf", "png")
BAND_ALPHA = 0.18
EPS_SYMBOL = "\u03b5"  # a plain Unicode epsilon (DejaVu has it), no mathtext needed


def _panels(n: int, max_cols: int = 3) -> tuple[int, int, float]:
    rows, cols = grid_shape(n, max_cols)
    width = ONE_COLUMN if cols == 1 else TWO_COLUMN
    return rows, cols, width


def _with_clean(table: pd.DataFrame, model: str, attack: str) -> pd.DataFrame:
    """The attack's points for one model, starting at the clean value (eps 0) unless the attack has its own."""
    mine = table[(table["model"] == model) & (table["attack"] == attack)]
    if not (mine["eps"] == 0).any():
        mine = pd.concat([table[(table["model"] == model) & (table["attack"] == CLEAN)], mine])
    return mine.sort_values("eps", kind="stable")


def on_255_grid(eps: Sequence[float]) -> bool:
    """True when every non-zero budget prints as k/255 (:func:`.tables.eps_label`), as the tables show it."""
    nonzero = [float(e) for e in eps if float(e) != 0]
    return bool(nonzero) and all(eps_label(e).endswith("/255") for e in nonzero)


def eps_axis(ax: Axes, eps: Sequence[float], scale: str = "[0, 1] scale") -> None:
    """Label the budget axis; on the k/255 grid the ticks are the grid's budgets written as k/255."""
    grid = sorted({float(e) for e in eps})
    if on_255_grid(grid):
        ax.set_xticks(grid, [eps_label(e) for e in grid], rotation=45 if len(grid) > 5 else 0)
        ax.set_xlabel(f"{EPS_SYMBOL} (k/255)")
    else:
        ax.set_xlabel(f"{EPS_SYMBOL} ({scale})")


def log_if_spread(ax: Axes, values: Sequence[float], axis: str = "y") -> bool:
    """Log scale on ``axis`` when the values span decades (all positive, max/min > 30)."""
    if spans_decades(values):
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def _default_subtitle(table: pd.DataFrame, unit: str) -> str:
    n = int(table["n"].max()) if "n" in table.columns and len(table) else 0
    return f"n = {n} {unit}" if n else "n not recorded"


def robust_accuracy_figure(acc: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None) -> Figure:
    """Accuracy vs eps, one panel per attack, one line per model; eps 0 is the clean accuracy."""
    attacks = [a for a in dict.fromkeys(acc["attack"]) if a != CLEAN]
    models, pal = model_order(acc), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.55 + 2.0 * rows)
        axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
        for k, attack in enumerate(attacks):
            ax = axes.flat[k]
            for model in models:
                sub = _with_clean(acc, model, attack)
                if sub.empty:
                    continue
                ax.plot(sub["eps"], 100 * sub["acc"], label=model, **pal.line(model))
                ax.fill_between(
                    sub["eps"], 100 * sub["lo"], 100 * sub["hi"], color=pal.color(model), alpha=BAND_ALPHA, lw=0
                )
            ax.set_title(attack)
            eps_axis(ax, acc.loc[acc["attack"].isin([attack, CLEAN]), "eps"])
            ax.set_ylim(0, 100)
            tidy_grid(ax, False)
        for ax in axes.flat[len(attacks) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy (%)")
        axes.flat[0].legend(frameon=False, loc="upper right")
        add_subtitle(fig, subtitle or _default_subtitle(acc, "examples"))
        add_footer(fig, sources)
    return fig


def perplexity_figure(ppl: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None) -> Figure:
    """Perplexity vs contamination rate (or embedding eps), one panel per attack; rate 0 is clean text."""
    attacks = [a for a in dict.fromkeys(ppl["attack"]) if a != CLEAN]
    models, pal = model_order(ppl), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.55 + 2.0 * rows)
        axes = fig.subplots(rows, cols, squeeze=False)
        for k, attack in enumerate(attacks):
            ax = axes.flat[k]
            kinds = set(ppl.loc[ppl["attack"] == attack, "kind"])
            shown: list[float] = []
            for model in models:
                sub = _with_clean(ppl, model, attack)
                if sub.empty:
                    continue
                ax.plot(sub["eps"], sub["ppl"], label=model, **pal.line(model))
                shown += sub["ppl"].tolist()
                if sub["ppl_lo"].notna().all():
                    ax.fill_between(
                        sub["eps"], sub["ppl_lo"], sub["ppl_hi"], color=pal.color(model), alpha=BAND_ALPHA, lw=0
                    )
            ax.set_title(attack)
            if "contamination" in kinds:
                ax.set_xlabel("contamination rate")
            else:
                eps_axis(ax, ppl.loc[ppl["attack"] == attack, "eps"], "embedding space")
            log = log_if_spread(ax, shown)
            ax.set_ylabel("perplexity (log scale)" if log else "perplexity")
            tidy_grid(ax, log)
        for ax in axes.flat[len(attacks) :]:
            ax.set_visible(False)
        axes.flat[0].legend(frameon=False, loc="upper left")
        add_subtitle(fig, subtitle or _default_subtitle(ppl, "sequences"))
        add_footer(fig, sources)
    return fig


LIPSCHITZ_PANELS: tuple[tuple[str, str], ...] = (
    ("lower_mean", "empirical gain (mean over examples)"),
    ("local_upper_median", "certified local constant (median)"),
)


def lipschitz_profile_figure(layers: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None) -> Figure:
    """Per block, one panel per quantity: empirical gain (mean over examples), certified local constant (median).

    Both families may share the figure: colour and marker give the variant, line style and marker fill the
    family (DeiT solid and filled, LM dashed and hollow).
    """
    models, pal = model_order(layers), Palette()
    panels = [(c, t) for c, t in LIPSCHITZ_PANELS if c in layers.columns and layers[c].notna().any()]
    with paper_style():
        fig = new_figure(ONE_COLUMN if len(panels) == 1 else TWO_COLUMN, 2.6)
        axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
        blocks = sorted(int(b) for b in layers["block"].unique())
        for ax, (col, title) in zip(axes, panels, strict=False):
            flag = "local_upper_vacuous" if col == "local_upper_median" else None
            vacuous = layers[flag].fillna(False).astype(bool) if flag in layers.columns else None
            for model in models:
                sub = layers[layers["model"] == model].sort_values("block")
                ax.plot(sub["block"], sub[col], label=model, **pal.line(model))
            if vacuous is not None and vacuous.any():  # never a vacuous bound drawn like a result
                bad = layers[vacuous]
                ax.plot(bad["block"], bad[col], ls="none", marker="x", color="0.15", ms=7, mew=1.2, zorder=4)
                title += "\n(x: vacuous, > 1e6 × the gain)"
            log = log_if_spread(ax, layers[col].tolist())
            ax.set_title(title)
            ax.set_xlabel("block")
            ax.set_xticks(blocks)
            ax.set_ylabel("Lipschitz constant (l2" + (", log scale)" if log else ")"))
            tidy_grid(ax, log)
        axes[0].legend(frameon=False, ncol=2 if len(models) > 4 else 1)
        add_subtitle(fig, subtitle or _default_subtitle(layers, "examples per model"))
        add_footer(fig, sources)
    return fig


def seqlen_figure(study: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None) -> Figure:
    """Output perturbation of one attention layer vs sequence length, per attention kind (+-1 sd bands).

    Always log-log: the claim is about the growth exponent, which is the slope on these axes.
    """
    with paper_style():
        fig = new_figure(ONE_COLUMN, 2.55)
        ax = fig.subplots()
        for kind in dict.fromkeys(study["kind"]):
            sub = study[study["kind"] == kind].sort_values("n")
            style = SEQLEN_STYLE.get(kind, {"color": "0.3", "marker": ".", "linestyle": "-"})
            ax.plot(sub["n"], sub["mean_perturbation"], label=kind, **style)
            if "std_perturbation" in sub.columns:
                lo = (sub["mean_perturbation"] - sub["std_perturbation"]).clip(lower=1e-300)
                ax.fill_between(
                    sub["n"],
                    lo,
                    sub["mean_perturbation"] + sub["std_perturbation"],
                    color=style["color"],
                    alpha=0.15,
                    lw=0,
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (log scale)")
        ax.set_ylabel("RMS output change (log scale)")
        tidy_grid(ax, True)
        ax.legend(frameon=False)
        if subtitle is None:
            trials = int(study["trials"].max()) if "trials" in study.columns else 0
            noise = float(study["noise"].iloc[0]) if "noise" in study.columns else None
            subtitle = f"n = {trials} trials per N" if trials else "n not recorded"
            subtitle += f"; input noise {noise:g}" if noise is not None else ""
        add_subtitle(fig, subtitle)
        add_footer(fig, sources)
    return fig


def attention_figure(
    maps: Sequence[AttentionMaps], image: np.ndarray, sources: Sequence[str], subtitle: str | None = None
) -> Figure:
    """Rows: models; columns: the input image, then CLS attention per layer on the patch grid."""
    n_layers = max(m.maps.shape[0] for m in maps)
    with paper_style():
        fig = new_figure(TWO_COLUMN, 0.5 + 1.25 * len(maps))
        axes = fig.subplots(len(maps), n_layers + 1, squeeze=False)
        vmax = max(float(m.maps.max()) for m in maps)
        im = None
        for r, m in enumerate(maps):
            axes[r, 0].imshow(np.asarray(image).squeeze(), cmap="gray", vmin=0, vmax=1)
            axes[r, 0].set_ylabel(m.model)
            for layer in range(n_layers):
                ax = axes[r, layer + 1]
                if layer < m.maps.shape[0]:
                    im = ax.imshow(m.maps[layer], cmap="viridis", vmin=0, vmax=vmax)
                if r == 0:
                    ax.set_title(f"layer {layer + 1}")
            if r == 0:
                axes[r, 0].set_title("input")
        for ax in axes.flat:
            ax.set_xticks([])
            ax.set_yticks([])
        if im is not None:
            fig.colorbar(im, ax=axes[:, 1:], shrink=0.8, label="CLS attention (head mean)")
        add_subtitle(fig, subtitle or "n = 1 clean test image (no attack)")
        add_footer(fig, sources)
    return fig


def _metadata(fmt: str) -> dict | None:
    """No creation date in PDF/SVG: the same numbers give the same bytes (reports diff cleanly in git)."""
    if fmt == "pdf":
        return {"Creator": "robustbench_filters", "CreationDate": None}
    if fmt == "svg":
        return {"Creator": "robustbench_filters", "Date": None}
    return None


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """Write ``stem.<fmt>`` per format under the paper style: TrueType fonts in PDFs, 300 dpi PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with paper_style():
        for fmt in formats:
            path = out_dir / f"{stem}.{fmt}"
            atomic_write(path, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=DPI, metadata=_metadata(fmt)))
            paths.append(path)
    return paths


def figure_bytes(fig: Figure, fmt: str = "svg") -> bytes:
    """The figure rendered in memory (for the HTML report), under the same style as :func:`save_figure`."""
    buf = io.BytesIO()
    with paper_style():
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=_metadata(fmt))
    return buf.getvalue()
