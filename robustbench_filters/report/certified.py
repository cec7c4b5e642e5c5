"""Certified accuracy of smoothed classifiers, next to what attacks leave: tables and the curve figure.

Everything is recomputed from a certify run's per-example rows: certified accuracy at radius r is the fraction of
examples whose true class is certified at r (exact Clopper-Pearson intervals, as the run reports them). The
empirical side is twofold: the smoothed classifier under SmoothAdv PGD (the run's own ``attack`` rows), and,
when an image attack run with an L2 attack measured the *same weights* (their digests match), the base model's
L2 robust accuracy. A certificate is a lower bound on robust accuracy, so the certified curve must lie below both.

The curve is exact: certified accuracy only changes at the examples' certified radii, so it is drawn as a step at
each of them and ends at the largest (nothing is certified beyond it). Table columns at radii beyond every
certified radius are marked with a dagger: their 0% says only that no certificate reaches that far.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerErrorbar
from matplotlib.lines import Line2D

from ..runs.folder import Run
from ..stats.intervals import clopper_pearson, wilson_interval
from .style import (
    ONE_COLUMN,
    TWO_COLUMN,
    Palette,
    drawn,
    grid_shape,
    label_figure,
    legend_below,
    mark,
    new_figure,
    paper_style,
    tidy_grid,
)
from .tables import model_order

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)
BEYOND = "\u2020"  # dagger on a table column past every certified radius
GREY = "0.35"


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
                            "hi": hi, "run": run.run_id})  # fmt: skip
    return pd.DataFrame(records)


def largest_certified_radius(rows: pd.DataFrame) -> float:
    """The largest radius at which any example's true class is certified (0.0 when none is)."""
    certs = rows[rows["kind"] == "certificate"] if "kind" in rows.columns else rows
    radius = certs["certified_correct_radius"].to_numpy(dtype=float)
    return float(np.nanmax(radius)) if np.isfinite(radius).any() else 0.0


def certified_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Certified accuracy at 0 and at every certified radius, per (model, sigma): the exact step function.

    Certified accuracy at r counts the examples certified at a radius >= r, so it is constant between two
    consecutive certified radii and drops right after each; the last row of a group is its largest certified
    radius. No grid: a grid either misses steps or runs past the largest radius.
    """
    certs = rows[rows["kind"] == "certificate"]
    frames = []
    for _, grp in certs.groupby(["model", "sigma"], sort=False):
        radius = grp["certified_correct_radius"].to_numpy(dtype=float)
        steps = np.unique(radius[np.isfinite(radius) & (radius > 0)])
        frames.append(certified_table(grp, [0.0, *steps.tolist()]))
    return pd.concat(frames, ignore_index=True) if frames else certified_table(certs)


def _errorbar_key(color: str) -> ErrorbarContainer:
    """A legend key for 'points with 95% intervals' without a marker shape (each model has its own marker)."""
    data = Line2D([], [], linestyle="none", marker="none", color=color)
    caps = (Line2D([], [], linestyle="none", marker="_", color=color, markersize=4),) * 2
    bars = LineCollection([], colors=color, linewidths=0.8)
    return ErrorbarContainer((data, caps, (bars,)), has_yerr=True, label="smoothed, SmoothAdv PGD (95% CI)")


def _legend(fig: Figure, axes: Sequence, models: Sequence[str]) -> None:
    """Keys built from what was drawn: per model its colour and line, with the marker of its SmoothAdv points
    when those are drawn; then one grey key per kind of element the figure holds."""
    lines: dict[str, Line2D] = {}
    points: dict[str, Line2D] = {}
    for ax in axes:
        for artist in ax.get_lines():
            model = str(artist.get_label()).rsplit(" | ", 1)[0]
            if artist.get_gid() == "certified":
                lines.setdefault(model, artist)
            elif artist.get_gid() == "smoothadv":
                points.setdefault(model, artist)
    handles: list = []
    for m in models:
        ref, pt = lines.get(m), points.get(m)
        if ref is None and pt is None:
            continue
        handles.append(
            Line2D([], [], color=(ref or pt).get_color(), linestyle="-" if ref is not None else "none",
                   lw=(ref or pt).get_linewidth(), marker=pt.get_marker() if pt is not None else "none",
                   mfc=pt.get_markerfacecolor() if pt is not None else "none",
                   mec=pt.get_markeredgecolor() if pt is not None else "none", label=m)
        )  # fmt: skip
    tags = drawn(fig)
    if "certified" in tags:
        handles.append(Line2D([], [], color=GREY, lw=1.0, linestyle="-", label="certified (smoothed)"))
    if "smoothadv" in tags:
        handles.append(_errorbar_key(GREY))
    if "base-l2" in tags:
        handles.append(Line2D([], [], color=GREY, lw=0.9, linestyle="--", label="base model, L2 PGD"))
    legend_below(fig, handles, ncol=2, handler_map={ErrorbarContainer: HandlerErrorbar(xerr_size=0.5)})


def certified_figure(
    curve: pd.DataFrame,
    smoothed: pd.DataFrame,
    base: pd.DataFrame,
    sources: Sequence[str],
    subtitle: str,
    *,
    paper: bool = False,
) -> Figure:
    """One panel per sigma: certified accuracy vs L2 radius (solid steps at the certified radii, ending at the
    largest), the smoothed classifier under SmoothAdv (points with intervals) and the base model's L2 PGD
    accuracy (dashed, when measured on the same weights). The legend sits below the panels, off the data."""
    sigmas = sorted(curve["sigma"].unique())
    models, pal = model_order(curve), Palette()
    rows_, cols = grid_shape(len(sigmas), 3)
    with paper_style():
        fig = new_figure(ONE_COLUMN if cols == 1 else TWO_COLUMN, 1.0 + 2.0 * rows_, paper=paper)
        axes = fig.subplots(rows_, cols, squeeze=False, sharey=True)
        for k, sigma in enumerate(sigmas):
            ax = axes.flat[k]
            for model in models:
                c = curve[(curve["model"] == model) & (curve["sigma"] == sigma)].sort_values("radius")
                if len(c):
                    style = pal.line(model) | {"marker": None}
                    steps = ax.step(c["radius"], 100 * c["acc"], where="pre", label=f"{model} | certified", **style)
                    mark(steps[0], "certified")
                s = smoothed[(smoothed["model"] == model) & (smoothed["sigma"] == sigma)] if len(smoothed) else smoothed
                if len(s):
                    err = [100 * (s["acc"] - s["lo"]), 100 * (s["hi"] - s["acc"])]
                    bars = ax.errorbar(s["radius"], 100 * s["acc"], yerr=err, fmt=pal.marker(model),
                                       color=pal.color(model), mfc="white", capsize=2, lw=0.8,
                                       label=f"{model} | smoothed, SmoothAdv")  # fmt: skip
                    mark(bars.lines[0], "smoothadv").set_label(f"{model} | smoothed, SmoothAdv")
                b = base[(base["model"] == model)].sort_values("eps") if len(base) else base
                if len(b):
                    dashed = ax.plot(b["eps"], 100 * b["acc"], color=pal.color(model), linestyle="--", marker=None,
                                     lw=0.9, label=f"{model} | base, L2 PGD")  # fmt: skip
                    mark(dashed[0], "base-l2")
            ax.set_title(f"\u03c3 = {sigma:g}")
            ax.set_xlabel("L2 radius ([0, 1] pixel scale)")
            ax.set_xlim(left=0)
            ax.set_ylim(0, 100)
            tidy_grid(ax, False)
        for ax in axes.flat[len(sigmas) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy (%)")
        label_figure(fig, subtitle, sources, paper=paper)
        _legend(fig, list(axes.flat[: len(sigmas)]), models)
    return fig


def certified_caption(fig: Figure) -> str:
    """What the certified figure shows, from the elements it holds (never a line that is not drawn)."""
    tags = drawn(fig)
    text = (
        "Certified accuracy of the smoothed classifiers (solid steps at each example's certified L2 radius; a curve "
        "ends at its largest certified radius)"
    )
    empirical = []
    if "smoothadv" in tags:
        empirical.append("of the smoothed classifier under SmoothAdv PGD (markers, 95% Wilson intervals)")
    if "base-l2" in tags:
        empirical.append("of the base model under L2 PGD on the same weights and examples (dashed)")
    if empirical:
        text += "; a certificate is a lower bound, so it must lie below the empirical robust accuracy "
        text += " and ".join(empirical)
    return text + "."


def certified_layout(table: pd.DataFrame, largest: float | None = None) -> pd.DataFrame:
    """Rows (model, sigma), columns r = ...: 'acc [lo, hi]' in %, and the abstention rate.

    A column whose radius is beyond ``largest`` (the run's largest certified radius) gets a dagger; the
    caption's footnote is :func:`beyond_note`.
    """
    out = []
    for (model, sigma), grp in table.groupby(["model", "sigma"], sort=False):
        row = {"model": model, "sigma": f"{sigma:g}"}
        for _, r in grp.iterrows():
            dagger = BEYOND if largest is not None and r["radius"] > largest else ""
            row[f"r = {r['radius']:g}{dagger}"] = f"{100 * r['acc']:.1f} [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"
        row["abstain"] = f"{100 * grp['abstain'].iloc[0]:.1f}%"
        out.append(row)
    return pd.DataFrame(out)


def beyond_note(table: pd.DataFrame, largest: float) -> str:
    """The footnote for dagger-marked columns ('' when no column is beyond the largest certified radius)."""
    if table.empty or not (table["radius"] > largest).any():
        return ""
    return f" {BEYOND} beyond every certified radius (the largest is {largest:.3g}): no example is certified there."


__all__ = ["base_l2_table", "beyond_note", "certified_caption", "certified_curve", "certified_figure",
           "certified_layout", "certified_table", "largest_certified_radius", "smoothed_attack_table"]  # fmt: skip
