"""Report figures: each function takes a tidy table (from :mod:`.tables`) and returns a matplotlib Figure.

Every figure carries a footer naming the runs (or weights) its numbers came from, uses the fixed variant
colours of :mod:`.style`, and shows uncertainty where the table has it (Wilson bands for accuracy, bootstrap
bands for perplexity, +-1 sd over trials for the sequence-length study). Nothing here reads files or calls
pyplot; :func:`save_figure` writes the formats asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..io import atomic_write
from .style import (
    ONE_COLUMN,
    SEQLEN_STYLE,
    TWO_COLUMN,
    Palette,
    add_footer,
    grid_shape,
    new_figure,
    paper_style,
)
from .tables import CLEAN, model_order

if TYPE_CHECKING:  # attention pulls in torch and timm; figures only need the maps
    from .attention import AttentionMaps

FIGURE_FORMATS: tuple[str, ...] = ("pdf", "png")
BAND_ALPHA = 0.18


def _panels(n: int, height_per_row: float = 2.0, max_cols: int = 3) -> tuple[int, int, float]:
    rows, cols = grid_shape(n, max_cols)
    width = ONE_COLUMN if cols == 1 else TWO_COLUMN
    return rows, cols, width


def _with_clean(table: pd.DataFrame, model: str, attack: str) -> pd.DataFrame:
    """The attack's points for one model, starting at the clean value (eps 0) unless the attack has its own."""
    mine = table[(table["model"] == model) & (table["attack"] == attack)]
    if not (mine["eps"] == 0).any():
        mine = pd.concat([table[(table["model"] == model) & (table["attack"] == CLEAN)], mine])
    return mine.sort_values("eps", kind="stable")


def robust_accuracy_figure(acc: pd.DataFrame, sources: Sequence[str]) -> Figure:
    """Accuracy vs eps, one panel per attack, one line per model; eps 0 is the clean accuracy."""
    attacks = [a for a in dict.fromkeys(acc["attack"]) if a != CLEAN]
    models, pal = model_order(acc), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.4 + 2.0 * rows)
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
            ax.set_xlabel("eps ([0, 1] scale)")
            ax.set_ylim(0, 100)
            ax.grid(True)
        for ax in axes.flat[len(attacks) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy (%)")
        axes.flat[0].legend(frameon=False, loc="upper right")
        add_footer(fig, sources)
    return fig


def perplexity_figure(ppl: pd.DataFrame, sources: Sequence[str]) -> Figure:
    """Perplexity vs contamination rate (or embedding eps), one panel per attack; rate 0 is clean text."""
    attacks = [a for a in dict.fromkeys(ppl["attack"]) if a != CLEAN]
    models, pal = model_order(ppl), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.4 + 2.0 * rows)
        axes = fig.subplots(rows, cols, squeeze=False)
        for k, attack in enumerate(attacks):
            ax = axes.flat[k]
            kinds = set(ppl.loc[ppl["attack"] == attack, "kind"])
            for model in models:
                sub = _with_clean(ppl, model, attack)
                if sub.empty:
                    continue
                ax.plot(sub["eps"], sub["ppl"], label=model, **pal.line(model))
                if sub["ppl_lo"].notna().all():
                    ax.fill_between(
                        sub["eps"], sub["ppl_lo"], sub["ppl_hi"], color=pal.color(model), alpha=BAND_ALPHA, lw=0
                    )
            ax.set_title(attack)
            ax.set_xlabel("contamination rate" if "contamination" in kinds else "eps (embedding space)")
            ax.grid(True)
        for ax in axes.flat[len(attacks) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("perplexity")
        axes.flat[0].legend(frameon=False, loc="upper left")
        add_footer(fig, sources)
    return fig


def lipschitz_profile_figure(layers: pd.DataFrame, sources: Sequence[str]) -> Figure:
    """Per block: empirical gain (mean over examples, solid) and certified local constant (median, dashed)."""
    models, pal = model_order(layers), Palette()
    with paper_style():
        fig = new_figure(ONE_COLUMN, 2.4)
        ax = fig.subplots()
        for model in models:
            sub = layers[layers["model"] == model].sort_values("block")
            color, marker = pal.color(model), pal.marker(model)
            ax.plot(sub["block"], sub["lower_mean"], color=color, marker=marker, linestyle="-", label=f"{model}")
            ax.plot(sub["block"], sub["local_upper_median"], color=color, marker=marker, linestyle="--", mfc="none")
        ax.set_yscale("log")
        ax.set_xlabel("block")
        ax.set_ylabel("Lipschitz constant (l2)")
        blocks = sorted(layers["block"].unique())
        ax.set_xticks(blocks)
        ax.grid(True, which="both")
        handles, _ = ax.get_legend_handles_labels()
        handles += [
            Line2D([], [], color="0.3", linestyle="-", label="empirical gain"),
            Line2D([], [], color="0.3", linestyle="--", label="certified (local)"),
        ]
        ax.legend(handles=handles, frameon=False, fontsize=5.5, ncol=2)
        add_footer(fig, sources)
    return fig


def seqlen_figure(study: pd.DataFrame, sources: Sequence[str]) -> Figure:
    """Output perturbation of one attention layer vs sequence length, per attention kind (+-1 sd bands)."""
    with paper_style():
        fig = new_figure(ONE_COLUMN, 2.4)
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
        ax.set_xlabel("sequence length N")
        noise = study["noise"].iloc[0] if "noise" in study.columns else None
        ax.set_ylabel("RMS output change" + (f" (input noise {noise:g})" if noise is not None else ""))
        ax.grid(True, which="both")
        ax.legend(frameon=False)
        add_footer(fig, sources)
    return fig


def attention_figure(maps: Sequence[AttentionMaps], image: np.ndarray, sources: Sequence[str]) -> Figure:
    """Rows: models; columns: the input image, then CLS attention per layer on the patch grid."""
    n_layers = max(m.maps.shape[0] for m in maps)
    with paper_style():
        fig = new_figure(TWO_COLUMN, 0.35 + 1.25 * len(maps))
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
        add_footer(fig, sources)
    return fig


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        # No creation date in the PDF: the same numbers give the same bytes (reports diff cleanly in git).
        meta = {"Creator": "robustbench_filters", "CreationDate": None} if fmt == "pdf" else None
        atomic_write(path, lambda tmp, fmt=fmt, meta=meta: fig.savefig(tmp, format=fmt, metadata=meta))
        paths.append(path)
    return paths
