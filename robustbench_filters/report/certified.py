"""Certified accuracy of smoothed classifiers, next to what attacks leave: tables and the curve figure.

Everything is recomputed from a certify run's per-example rows: certified accuracy at radius r is the fraction of
examples whose true class is certified at r (exact Clopper-Pearson intervals, as the run reports them). The
empirical side is twofold: the smoothed classifier under SmoothAdv PGD (the run's own ``attack`` rows), and,
when an image attack run with an L2 attack measured the *same weights* (their digests match), the base model's
L2 robust accuracy. A certificate is a lower bound on robust accuracy, so the certified curve must lie below both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..runs.folder import Run
from ..stats import clopper_pearson, wilson_interval
from .style import (
    ONE_COLUMN,
    TWO_COLUMN,
    Palette,
    add_footer,
    add_subtitle,
    grid_shape,
    new_figure,
    paper_style,
    tidy_grid,
)
from .tables import model_order

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def certified_table(rows: pd.DataFrame, radii: Sequence[float] = RADII) -> pd.DataFrame:
    """Certified accuracy per (model, sigma, radius) with exact 95% intervals, and the abstention rate."""
    certs = rows[rows["kind"] == "certificate"]
    records = []
    for (model, sigma), grp in certs.groupby(["model", "sigma"], sort=False):
        radius = grp["certified_correct_radius"].to_numpy(dtype=float)
        for r in radii:
            k, n = int(np.nansum(radius >= r)), len(grp)
            lo, hi = clopper_pearson(k, n)
            records.append({"model": model, "sigma": float(sigma), "radius": float(r), "n": n, "certified": k,
                            "acc": k / n, "lo": lo, "hi": hi,
                            "abstain": float(grp["abstain"].astype(bool).mean())})  # fmt: skip
    return pd.DataFrame(records)


def smoothed_attack_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The smoothed classifier's empirical robust accuracy under SmoothAdv PGD, per (model, sigma, radius)."""
    attacks = rows[rows["kind"] == "attack"]
    records = []
    for (model, sigma, r), grp in attacks.groupby(["model", "sigma", "radius"], sort=True):
        k, n = int(grp["robust"].astype(bool).sum()), len(grp)
        lo, hi = wilson_interval(k, n)
        records.append({"model": model, "sigma": float(sigma), "radius": float(r), "n": n, "acc": k / n, "lo": lo,
                        "hi": hi})  # fmt: skip
    return pd.DataFrame(records)


def base_l2_table(certify_runs: Sequence[Run], attack_runs: Sequence[Run]) -> pd.DataFrame:
    """L2 robust accuracy of the base models, from attack runs that measured the same weights on the same examples."""
    weights = {m: w for r in certify_runs for m, w in (r.manifest["config"].get("weights") or {}).items()}

    def examples(config: dict) -> tuple:  # which examples of which data (the ids hash alone could index other data)
        return config.get("data_checksum"), config.get("example_ids_sha256")

    measured = {examples(r.manifest["config"]) for r in certify_runs}
    records = []
    for run in attack_runs:
        config = run.manifest.get("config", {})
        if config.get("norm") != "l2" or examples(config) not in measured:
            continue
        same = [m for m, w in (config.get("weights") or {}).items() if weights.get(m) == w]
        rows = run.rows[run.rows["model"].isin(same) & (run.rows["kind"] != "contamination")]
        for (model, attack, eps), grp in rows.groupby(["model", "attack", "eps"], sort=True):
            k, n = int(grp["correct"].astype(bool).sum()), len(grp)
            lo, hi = wilson_interval(k, n)
            records.append({"model": model, "attack": attack, "eps": float(eps), "n": n, "acc": k / n, "lo": lo,
                            "hi": hi})  # fmt: skip
    return pd.DataFrame(records)


def certified_curve(rows: pd.DataFrame, step: float = 0.02) -> pd.DataFrame:
    """Certified accuracy on a fine radius grid, per (model, sigma), up to the largest certified radius."""
    certs = rows[rows["kind"] == "certificate"]
    top = float(np.nanmax(certs["certified_correct_radius"].to_numpy(dtype=float), initial=0.0))
    grid = np.round(np.arange(0.0, top + 2 * step, step), 10)
    return certified_table(rows, grid.tolist())


def _legend_handles(models: Sequence[str], pal: Palette, smoothed: bool, base: bool) -> list[Line2D]:
    """One entry per model (its colour and marker) and one per kind of curve: 7 entries instead of 12
    (model x kind), which covered the curves."""
    handles = [Line2D([], [], color=pal.color(m), marker=pal.marker(m), mfc="white", lw=1.2, label=m) for m in models]
    grey = {"color": "0.35", "lw": 1.0}
    handles.append(Line2D([], [], linestyle="-", label="certified (smoothed)", **grey))
    if smoothed:
        handles.append(
            Line2D([], [], linestyle="none", marker="o", mfc="white", mec="0.35", label="smoothed, SmoothAdv")
        )
    if base:
        handles.append(Line2D([], [], linestyle="--", label="base model, L2 PGD", **grey))
    return handles


def certified_figure(
    curve: pd.DataFrame, smoothed: pd.DataFrame, base: pd.DataFrame, sources: Sequence[str], subtitle: str
) -> Figure:
    """One panel per sigma: certified accuracy vs L2 radius (solid), the smoothed classifier under SmoothAdv
    (points with intervals) and the base model's L2 PGD accuracy (dashed, when measured on the same weights)."""
    sigmas = sorted(curve["sigma"].unique())
    models, pal = model_order(curve), Palette()
    rows_, cols = grid_shape(len(sigmas), 3)
    with paper_style():
        fig = new_figure(ONE_COLUMN if cols == 1 else TWO_COLUMN, 0.55 + 2.0 * rows_)
        axes = fig.subplots(rows_, cols, squeeze=False, sharey=True)
        for k, sigma in enumerate(sigmas):
            ax = axes.flat[k]
            for model in models:
                c = curve[(curve["model"] == model) & (curve["sigma"] == sigma)]
                style = pal.line(model) | {"marker": None}
                ax.step(c["radius"], 100 * c["acc"], where="post", label=f"{model} certified", **style)
                s = smoothed[(smoothed["model"] == model) & (smoothed["sigma"] == sigma)] if len(smoothed) else smoothed
                if len(s):
                    err = [100 * (s["acc"] - s["lo"]), 100 * (s["hi"] - s["acc"])]
                    ax.errorbar(s["radius"], 100 * s["acc"], yerr=err, fmt=pal.marker(model), color=pal.color(model),
                                mfc="white", capsize=2, lw=0.8, label=f"{model} smoothed, SmoothAdv")  # fmt: skip
                b = base[(base["model"] == model)].sort_values("eps") if len(base) else base
                if len(b):
                    ax.plot(b["eps"], 100 * b["acc"], color=pal.color(model), linestyle="--", marker=None, lw=0.9,
                            label=f"{model} base, L2 PGD")  # fmt: skip
            ax.set_title(f"\u03c3 = {sigma:g}")
            ax.set_xlabel("L2 radius (on the [0, 1] pixel scale)")
            ax.set_ylim(0, 100)
            tidy_grid(ax, False)
        for ax in axes.flat[len(sigmas) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy (%)")
        handles = _legend_handles(models, pal, len(smoothed) > 0, len(base) > 0)
        axes.flat[0].legend(handles=handles, loc="best", frameon=False, fontsize=5)
        add_subtitle(fig, subtitle)
        add_footer(fig, sources)
    return fig


def certified_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Rows (model, sigma), columns r = ...: 'acc [lo, hi]' in %, and the abstention rate."""
    out = []
    for (model, sigma), grp in table.groupby(["model", "sigma"], sort=False):
        row = {"model": model, "sigma": f"{sigma:g}"}
        for _, r in grp.iterrows():
            row[f"r = {r['radius']:g}"] = f"{100 * r['acc']:.1f} [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"
        row["abstain"] = f"{100 * grp['abstain'].iloc[0]:.1f}%"
        out.append(row)
    return pd.DataFrame(out)


__all__ = ["base_l2_table", "certified_curve", "certified_figure", "certified_layout", "certified_table",
           "smoothed_attack_table"]  # fmt: skip
