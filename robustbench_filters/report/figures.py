"""Report figures: each function takes a tidy table (from :mod:`.tables`) and returns a matplotlib Figure.

Every figure states its sample size and threat model in a line above the panels (``subtitle``; the builder
writes it from the runs, the default names at least n), carries a footer naming the runs (or weights) its
numbers came from, uses the fixed variant and family styles of :mod:`.style`, and shows uncertainty where the
table has it (Wilson bands for accuracy, bootstrap bands for perplexity, +-1 sd over trials for the
sequence-length study). With ``paper=True`` the subtitle and footer are left out (the caption and
``figures/provenance.json`` carry them). A panel whose values span decades gets a log axis; budgets read as in
the tables (:func:`..core.budgets.eps_text`). Each drawn element is tagged (:func:`.style.mark`) and the ``*_caption``
functions describe only the tagged elements, so a caption never names a line that is not there. Nothing here
reads files or calls pyplot; :func:`save_figure` writes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..core.budgets import eps_text, grid_step, on_grid
from ..core.io import atomic_write
from .style import (
    DPI,
    ONE_COLUMN,
    SEQLEN_STYLE,
    TWO_COLUMN,
    Palette,
    drawn,
    family_key,
    grid_shape,
    label_figure,
    legend_below,
    mark,
    new_figure,
    paper_style,
    spans_decades,
    tidy_grid,
)
from .tables import CLEAN, model_order

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


MAX_EPS_TICKS = 9  # more measured budgets than this: matplotlib places the ticks (still labelled by eps_text)


def eps_axis(ax: Axes, eps: Sequence[float], scale: str = "[0, 1] scale") -> None:
    """Label the budget axis as the tables write budgets: '8/255' where a budget is k/255, else 3 digits.

    When any budget is on the k/255 grid the ticks sit at the measured budgets (a k/255 grid has no round
    decimal ticks); labels that would overlap their right-hand neighbour are left out (the tick stays).
    Otherwise matplotlib places round ticks and :func:`..core.budgets.eps_text` writes them.
    """
    grid = sorted({float(e) for e in eps})
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: eps_text(value)))
    if any(grid_step(e) is not None for e in grid) and len(grid) <= MAX_EPS_TICKS:
        ax.set_xticks(grid, _thinned(ax, grid, [eps_text(e) for e in grid]))
    ax.set_xlabel(f"{EPS_SYMBOL} (k/255)" if on_grid(grid) else f"{EPS_SYMBOL} ({scale})")


def _thinned(ax: Axes, ticks: Sequence[float], labels: Sequence[str]) -> list[str]:
    """Blank the labels that would run into the next kept label to their right (the largest is always kept)."""
    lo, hi = min(ticks), max(ticks)
    if hi <= lo:
        return list(labels)
    spec = ax.get_subplotspec()
    cols = spec.get_gridspec().ncols if spec is not None else 1
    width_in = ax.get_figure(root=True).get_figwidth() / cols * 0.85  # a panel's share, less its margins
    size = ax.xaxis.get_ticklabels()[0].get_fontsize() if ax.xaxis.get_ticklabels() else 6.0
    out, right = list(labels), math.inf
    for i in range(len(ticks) - 1, -1, -1):
        x = (ticks[i] - lo) / (hi - lo) * width_in
        half = len(labels[i]) * size * 0.6 / 72 / 2 + 0.03
        if x + half > right:
            out[i] = ""
        else:
            right = x - half
    return out


def log_if_spread(ax: Axes, values: Sequence[float], axis: str = "y") -> bool:
    """Log scale on ``axis`` when the values span decades (all positive, max/min > 30)."""
    if spans_decades(values):
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def _default_subtitle(table: pd.DataFrame, unit: str) -> str:
    n = int(table["n"].max()) if "n" in table.columns and len(table) else 0
    return f"n = {n} {unit}" if n else "n not recorded"


def _sentence(*parts: str) -> str:
    return "; ".join(p for p in parts if p) + "."


def robust_accuracy_figure(
    acc: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None, *, paper: bool = False
) -> Figure:
    """Accuracy vs eps, one panel per attack, one line per model; eps 0 is the clean accuracy."""
    attacks = [a for a in dict.fromkeys(acc["attack"]) if a != CLEAN]
    models, pal = model_order(acc), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.55 + 2.0 * rows, paper=paper)
        axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
        for k, attack in enumerate(attacks):
            ax = axes.flat[k]
            for model in models:
                sub = _with_clean(acc, model, attack)
                if sub.empty:
                    continue
                mark(ax.plot(sub["eps"], 100 * sub["acc"], label=model, **pal.line(model))[0], "accuracy")
                if sub["lo"].notna().all():
                    band = ax.fill_between(
                        sub["eps"], 100 * sub["lo"], 100 * sub["hi"], color=pal.color(model), alpha=BAND_ALPHA, lw=0
                    )
                    mark(band, "wilson band")
            ax.set_title(attack)
            eps_axis(ax, acc.loc[acc["attack"].isin([attack, CLEAN]), "eps"])
            ax.set_ylim(0, 100)
            tidy_grid(ax, False)
        for ax in axes.flat[len(attacks) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy (%)")
        label_figure(fig, subtitle or _default_subtitle(acc, "examples"), sources, paper=paper)
        legend_below(fig)
    return fig


def robust_accuracy_caption(fig: Figure) -> str:
    bands = "bands: 95% Wilson intervals" if "wilson band" in drawn(fig) else ""
    return _sentence("Accuracy vs perturbation budget per attack (eps 0 = clean)", bands)


def perplexity_figure(
    ppl: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None, *, paper: bool = False
) -> Figure:
    """Perplexity vs contamination rate (or embedding eps), one panel per attack; rate 0 is clean text."""
    attacks = [a for a in dict.fromkeys(ppl["attack"]) if a != CLEAN]
    models, pal = model_order(ppl), Palette()
    rows, cols, width = _panels(max(1, len(attacks)))
    with paper_style():
        fig = new_figure(width, 0.55 + 2.0 * rows, paper=paper)
        axes = fig.subplots(rows, cols, squeeze=False)
        for k, attack in enumerate(attacks):
            ax = axes.flat[k]
            kinds = set(ppl.loc[ppl["attack"] == attack, "kind"])
            shown: list[float] = []
            for model in models:
                sub = _with_clean(ppl, model, attack)
                if sub.empty:
                    continue
                line = ax.plot(sub["eps"], sub["ppl"], label=model, **pal.line(model))[0]
                mark(line, "contamination" if "contamination" in kinds else "embedding attack")
                shown += sub["ppl"].tolist()
                if sub["ppl_lo"].notna().all():
                    band = ax.fill_between(
                        sub["eps"], sub["ppl_lo"], sub["ppl_hi"], color=pal.color(model), alpha=BAND_ALPHA, lw=0
                    )
                    mark(band, "bootstrap band")
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
        label_figure(fig, subtitle or _default_subtitle(ppl, "documents"), sources, paper=paper)
        legend_below(fig)
    return fig


def perplexity_caption(fig: Figure) -> str:
    tags = drawn(fig)
    x = " or ".join(w for w, t in (("contamination rate", "contamination"), ("embedding eps", "embedding attack"))
                    if t in tags)  # fmt: skip
    bands = "bands: 95% bootstrap intervals" if "bootstrap band" in tags else ""
    return _sentence(f"Perplexity vs {x or 'budget'} per attack", bands)


LIPSCHITZ_PANELS: tuple[tuple[str, str], ...] = (
    ("lower_mean", "empirical gain (mean over examples)"),
    ("local_upper_median", "certified local constant (median)"),
)


def lipschitz_profile_figure(
    layers: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None, *, paper: bool = False
) -> Figure:
    """Per block, one panel per quantity: empirical gain (mean over examples), certified local constant (median).

    Both families may share the figure: colour and marker give the variant, line style and marker fill the
    family (DeiT solid and filled, LM dashed and hollow).
    """
    models, pal = model_order(layers), Palette()
    panels = [(c, t) for c, t in LIPSCHITZ_PANELS if c in layers.columns and layers[c].notna().any()]
    with paper_style():
        fig = new_figure(ONE_COLUMN if len(panels) == 1 else TWO_COLUMN, 2.6, paper=paper)
        axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
        blocks = sorted(int(b) for b in layers["block"].unique())
        for ax, (col, title) in zip(axes, panels, strict=False):
            flag = "local_upper_vacuous" if col == "local_upper_median" else None
            vacuous = layers[flag].fillna(False).astype(bool) if flag in layers.columns else None
            for model in models:
                sub = layers[layers["model"] == model].sort_values("block")
                line = ax.plot(sub["block"], sub[col], label=model, **pal.line(model))[0]
                mark(line, f"{col} {family_key(model)}")
            if vacuous is not None and vacuous.any():  # never a vacuous bound drawn like a result
                bad = layers[vacuous]
                x = ax.plot(bad["block"], bad[col], ls="none", marker="x", color="0.15", ms=7, mew=1.2, zorder=4)
                mark(x[0], "vacuous")
                title += "\n(x: vacuous, > 1e6 × the gain)"
            log = log_if_spread(ax, layers[col].tolist())
            ax.set_title(title)
            ax.set_xlabel("block")
            ax.set_xticks(blocks)
            ax.set_ylabel("Lipschitz constant (l2" + (", log scale)" if log else ")"))
            tidy_grid(ax, log)
        label_figure(fig, subtitle or _default_subtitle(layers, "examples per model"), sources, paper=paper)
        legend_below(fig)
    return fig


def lipschitz_profile_caption(fig: Figure) -> str:
    tags = drawn(fig)
    what = [t for c, t in (("lower_mean", "empirical gain (mean over examples)"),
                           ("local_upper_median", "certified local constant (median)"))
            if any(tag.startswith(c + " ") for tag in tags)]  # fmt: skip
    families = {tag.rsplit(" ", 1)[1] for tag in tags if tag.startswith(("lower_mean ", "local_upper_median "))}
    style = "colour and marker: variant"
    if families == {"deit", "lm"}:
        style += "; solid and filled: DeiT, dashed and hollow: LM"
    vac = "x: a vacuous certified bound (more than 1e6 × the empirical gain)" if "vacuous" in tags else ""
    return _sentence("Per block: " + " and ".join(what), style, vac)


def seqlen_figure(
    study: pd.DataFrame, sources: Sequence[str], subtitle: str | None = None, *, paper: bool = False
) -> Figure:
    """Output perturbation of one attention layer vs sequence length, per attention kind (+-1 sd bands).

    Always log-log: the claim is about the growth exponent, which is the slope on these axes.
    """
    with paper_style():
        fig = new_figure(ONE_COLUMN, 2.55, paper=paper)
        ax = fig.subplots()
        for kind in dict.fromkeys(study["kind"]):
            sub = study[study["kind"] == kind].sort_values("n")
            style = SEQLEN_STYLE.get(kind, {"color": "0.3", "marker": ".", "linestyle": "-"})
            mark(ax.plot(sub["n"], sub["mean_perturbation"], label=kind, **style)[0], "mean")
            if "std_perturbation" in sub.columns and sub["std_perturbation"].notna().all():
                lo = (sub["mean_perturbation"] - sub["std_perturbation"]).clip(lower=1e-300)
                band = ax.fill_between(
                    sub["n"],
                    lo,
                    sub["mean_perturbation"] + sub["std_perturbation"],
                    color=style["color"],
                    alpha=0.15,
                    lw=0,
                )
                mark(band, "sd band")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (log scale)")
        ax.set_ylabel("RMS output change (log scale)")
        tidy_grid(ax, True)
        if subtitle is None:
            trials = int(study["trials"].max()) if "trials" in study.columns else 0
            noise = float(study["noise"].iloc[0]) if "noise" in study.columns else None
            subtitle = f"n = {trials} trials per N" if trials else "n not recorded"
            subtitle += f"; input noise {noise:g}" if noise is not None else ""
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig)
    return fig


def seqlen_caption(fig: Figure) -> str:
    spread = "mean +- 1 sd over trials" if "sd band" in drawn(fig) else "mean over trials"
    return f"Output change of one attention sublayer vs sequence length ({spread}; log-log axes)."


def attention_figure(
    maps: Sequence[AttentionMaps],
    image: np.ndarray,
    sources: Sequence[str],
    subtitle: str | None = None,
    *,
    paper: bool = False,
) -> Figure:
    """Rows: models; columns: the input image, then CLS attention per layer on the patch grid."""
    n_layers = max(m.maps.shape[0] for m in maps)
    with paper_style():
        fig = new_figure(TWO_COLUMN, 0.5 + 1.25 * len(maps), paper=paper)
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
        label_figure(fig, subtitle or ATTENTION_SUBTITLE, sources, paper=paper)
    return fig


ATTENTION_SUBTITLE = "n = 1 clean test image (no attack)"


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
