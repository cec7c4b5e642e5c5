"""The study's curves over all training seeds: the mean as a thick line, every seed as a thin one.

Drawn from the per-seed scores table (:mod:`.scores`), not from one seed's run folders, so the figure shows
how much training alone moves each curve. Accuracy is averaged arithmetically; perplexities and Lipschitz
constants geometrically (their seed averages are taken on the log scale in the tables too). Styles are the
reporter's: colour and marker per variant, DeiT solid and filled, LM dashed and hollow; panels whose values
span decades get log axes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..report.figures import eps_axis, log_if_spread
from ..report.style import (
    ONE_COLUMN,
    SEQLEN_STYLE,
    TWO_COLUMN,
    Palette,
    label_figure,
    legend_below,
    new_figure,
    paper_style,
    tidy_grid,
)

SEED_ALPHA = 0.35
SEED_LW = 0.6
_COND = re.compile(r"^(?P<attack>[\w-]+)@(?P<x>[-+.\deE]+)$")


def _select(scores: pd.DataFrame, family: str, metric: str) -> pd.DataFrame:
    return scores[(scores["family"] == family) & (scores["metric"] == metric)]


def _attack_points(sel: pd.DataFrame, attack: str, zero_from: str | None) -> pd.DataFrame:
    """Rows of ``attack@x`` with x parsed; ``zero_from`` (e.g. 'clean') supplies x = 0 when the grid lacks it."""
    parsed = sel["condition"].str.extract(_COND)
    mine = sel[parsed["attack"] == attack].assign(x=parsed.loc[parsed["attack"] == attack, "x"].astype(float))
    if zero_from is not None and not (mine["x"] == 0).any():
        mine = pd.concat([mine, sel[sel["condition"] == zero_from].assign(x=0.0)])
    return mine


def _draw(ax: Axes, points: pd.DataFrame, models: Sequence[str], transform: Callable, pal: Palette) -> list[float]:
    """Per model: thin line per seed, thick mean line; returns the plotted means (for the log-axis decision)."""
    means: list[float] = []
    for model in models:
        sub = points[points["model"] == model]
        if sub.empty:
            continue
        style = pal.line(model)
        for _, seed in sub.groupby("seed", sort=True):
            seed = seed.sort_values("x")
            ax.plot(seed["x"], transform(seed["value"]), color=style["color"], linestyle=style["linestyle"],
                    lw=SEED_LW, alpha=SEED_ALPHA)  # fmt: skip
        mean = sub.groupby("x", sort=True)["value"].mean()
        ax.plot(mean.index, transform(mean.to_numpy()), label=model, **style)
        means += list(transform(mean.to_numpy()))
    return means


def _attacks(sel: pd.DataFrame) -> list[str]:
    names = sel["condition"].str.extract(_COND)["attack"].dropna()
    return list(dict.fromkeys(names))


def accuracy_seeds_figure(
    scores: pd.DataFrame, models: Sequence[str], sources: Sequence[str], subtitle: str, *, paper: bool = False
) -> Figure | None:
    """Clean and robust accuracy vs eps per attack, mean over seeds with each seed's curve."""
    sel = _select(scores, "image", "acc")
    attacks = _attacks(sel)
    if not attacks:
        return None
    pal = Palette()
    with paper_style():
        fig = new_figure(TWO_COLUMN if len(attacks) > 1 else ONE_COLUMN, 2.7, paper=paper)
        axes = fig.subplots(1, len(attacks), squeeze=False, sharey=True)[0]
        for ax, attack in zip(axes, attacks, strict=True):
            points = _attack_points(sel, attack, "clean")
            _draw(ax, points, models, lambda v: 100 * np.asarray(v, float), pal)
            ax.set_title(attack)
            eps_axis(ax, points["x"].tolist())
            ax.set_ylim(0, 100)
            tidy_grid(ax, False)
        axes[0].set_ylabel("accuracy (%)")
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig)
    return fig


def perplexity_seeds_figure(
    scores: pd.DataFrame, models: Sequence[str], sources: Sequence[str], subtitle: str, *, paper: bool = False
) -> Figure | None:
    """Perplexity vs eps (embedding attacks) or contamination rate (word swap): geometric mean and each seed."""
    sel = _select(scores, "lm", "log_ppl")
    attacks = _attacks(sel)
    if not attacks:
        return None
    pal = Palette()
    with paper_style():
        fig = new_figure(TWO_COLUMN, 2.7, paper=paper)
        axes = fig.subplots(1, len(attacks), squeeze=False)[0]
        for ax, attack in zip(axes, attacks, strict=True):
            points = _attack_points(sel, attack, "clean")
            means = _draw(ax, points, models, geo, pal)
            ax.set_title(attack)
            if attack == "wordswap":
                ax.set_xlabel("contamination rate")
            else:
                eps_axis(ax, points["x"].tolist(), "\u00d7 mean embedding norm")
            log = log_if_spread(ax, means)
            ax.set_ylabel("perplexity" + (" (log scale)" if log else ""))
            tidy_grid(ax, log)
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig)
    return fig


def _block_points(sel: pd.DataFrame) -> pd.DataFrame:
    block = sel["condition"].str.extract(r"(\d+)$")[0].astype(float)
    return sel.assign(x=block).dropna(subset=["x"])


LIPSCHITZ_CURVES: tuple[tuple[str, str, Callable], ...] = (
    ("lip_layer_lower_mean", "empirical gain per block (mean over examples)", np.log),
    ("lip_layer_log10_upper", "certified block constant", lambda v: np.asarray(v, float) * math.log(10)),
)


def lipschitz_seeds_figure(
    scores: pd.DataFrame, models: Sequence[str], sources: Sequence[str], subtitle: str, *, paper: bool = False
) -> Figure | None:
    """Per block: empirical gain and certified block constant, both families, geometric mean and each seed."""
    panels = [(m, t, f) for m, t, f in LIPSCHITZ_CURVES if not scores[scores["metric"] == m].empty]
    if not panels:
        return None
    pal = Palette()
    with paper_style():
        fig = new_figure(TWO_COLUMN, 2.7, paper=paper)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (metric, title, to_log) in zip(axes, panels, strict=True):
            sel = scores[(scores["metric"] == metric) & scores["family"].isin(["image", "lm"])]
            points = _block_points(sel)
            points = points.assign(value=to_log(points["value"].to_numpy(float)))  # average on the log scale
            means = _draw(ax, points, models, geo, pal)
            log = log_if_spread(ax, means)
            ax.set_title(title)
            ax.set_xlabel("block")
            ax.set_xticks(sorted(points["x"].unique()))
            ax.set_ylabel("Lipschitz constant (l2" + (", log scale)" if log else ")"))
            tidy_grid(ax, log)
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig)
    return fig


def _n_points(sel: pd.DataFrame) -> pd.DataFrame:
    n = sel["condition"].str.extract(r"^N=(\d+)$")[0].astype(float)
    points = sel.assign(x=n).dropna(subset=["x"])
    return points.assign(value=np.log(points["value"].to_numpy(float)))


def geo(values) -> np.ndarray:
    """Back from the log scale: the mean of logs becomes a geometric mean."""
    return np.exp(np.asarray(values, float))


def seqlen_seeds_figure(
    scores: pd.DataFrame, models: Sequence[str], sources: Sequence[str], subtitle: str, *, paper: bool = False
) -> Figure | None:
    """Perturbation vs N (log-log: the slope is the growth exponent): trained LMs, and one attention layer."""
    lm = _n_points(_select(scores, "lm", "seqlen_gain"))
    layer = _n_points(_select(scores, "layer", "seqlen_perturbation"))
    panels = [p for p in (("trained LMs: last-token logit gain", lm), ("one attention layer", layer)) if len(p[1])]
    if not panels:
        return None
    pal = Palette()
    with paper_style():
        fig = new_figure(TWO_COLUMN if len(panels) > 1 else ONE_COLUMN, 2.7, paper=paper)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (title, points) in zip(axes, panels, strict=True):
            if points is layer:
                kinds = list(dict.fromkeys(points["model"]))
                for kind in kinds:
                    style = SEQLEN_STYLE.get(kind, {"color": "0.3", "marker": ".", "linestyle": "-"})
                    sub = points[points["model"] == kind]
                    for _, seed in sub.groupby("seed", sort=True):
                        seed = seed.sort_values("x")
                        ax.plot(seed["x"], geo(seed["value"]), color=style["color"], linestyle=style["linestyle"],
                                lw=SEED_LW, alpha=SEED_ALPHA)  # fmt: skip
                    mean = sub.groupby("x", sort=True)["value"].mean()
                    ax.plot(mean.index, geo(mean.to_numpy()), label=kind, **style)
            else:
                _draw(ax, points, [m for m in models if m in set(points["model"])], geo, pal)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(title)
            ax.set_xlabel("sequence length N (log scale)")
            ax.set_ylabel("output change (log scale)")
            tidy_grid(ax, True)
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig)
    return fig
