"""Measure what each certified-bound refinement buys on the zoo DeiTs, and where the bounds still lose.

    .venv/bin/python scripts/lipschitz_gap.py --models deit,deit-grc --n 14 --out reports/lipschitz_gap

Writes ``rows.csv`` (the gap rows of every example), ``ablation.csv`` and ``crossover.csv`` (tidy), ``gap.png``
(the figure of :mod:`robustbench_filters.report.lipschitz_gap`) and ``summary.md`` (the tables, log10 medians
over examples; ``--summarize-only`` rewrites it from the CSVs). Examples: the first ``n`` of the seeded permutation of the bundled Fashion-MNIST test split (the
same selection as ``robfilt lipschitz``). Float64 on CPU. The rho sweep runs on the first ``--sweep-n``
examples, with and without the exact attention Jacobian norms at the centre for the first ``--dense-n`` of them
(about a minute per example on one core).

``--crown-only`` adds ``crown.csv`` to a finished folder and rewrites ``summary.md``: the certified local constant of
linear bound propagation (:func:`robustbench_filters.crown.local_lipschitz`, ``--crown-refresh``, default all: about
100,000 model passes per example) beside the exact ``||J(x0)||`` (a lower bound) on the first ``--crown-n`` of the same examples, for
``--crown-models`` (the zoo ``deit-at`` too):

    .venv/bin/python scripts/lipschitz_gap.py --crown-only --crown-n 2 --out reports/lipschitz_gap --overwrite
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from robustbench_filters.core.io import atomic_write_text
from robustbench_filters.data import load_images
from robustbench_filters.lipschitz import make_target, trace_bounds
from robustbench_filters.lipschitz.research import LocalOptions, gap_rows, gap_summary, local_bounds
from robustbench_filters.models import create_model
from robustbench_filters.report.figures import save_figure
from robustbench_filters.report.lipschitz_gap import lipschitz_gap_figure
from robustbench_filters.runs.outfolder import OutputFolder

CSVS = ("rows.csv", "ablation.csv", "crossover.csv")
CROWN_CSV = "crown.csv"
CROWN_STEP = "linear bound propagation (crown.local_lipschitz, refresh {refresh}; first {n} examples)"

LADDER = [
    ("stage-wise composition + box floor", LocalOptions(token_radii=False, localize_attention=False, taylor=False)),
    ("  + per-token variance lower bounds only", LocalOptions(localize_attention=False, taylor=False)),
    ("  + localised attention only", LocalOptions(token_radii=False, taylor=False)),
    ("  + both (default first-order bound)", LocalOptions(taylor=False)),
    ("  + second-order bound (exact prefix/suffix Jacobians)", LocalOptions(taylor=True)),
]
SWEEP = [10.0**-k for k in range(1, 13)]


def _log10(t: torch.Tensor) -> np.ndarray:
    return torch.log10(t.double()).cpu().numpy()


def _inputs(n: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    data = load_images("fashion-mnist", split="test")
    idx = torch.randperm(len(data.x), generator=torch.Generator().manual_seed(seed))[:n]
    return torch.as_tensor(data.x)[idx].double(), idx.numpy()


def _ablation(name: str, target, x, rhos) -> list[dict]:
    rows = []
    base = trace_bounds(target, x, rhos, improved=False)
    glob = trace_bounds(target, x[:1], rhos[:1]).global_upper
    rows.append({"model": name, "step": "baseline (layer-by-layer, eps floor, global attention)",
                 "global": math.log10(base.global_upper), **_per_rho(base.local_upper, rhos)})  # fmt: skip
    best = base.local_upper
    for label, opts in LADDER:
        t0 = time.time()
        local = torch.minimum(base.local_upper, local_bounds(target, x, rhos, options=opts).local)
        best = torch.minimum(best, local)
        rows.append({"model": name, "step": label, "global": math.log10(glob), **_per_rho(local, rhos),
                     "seconds_per_example": (time.time() - t0) / len(x)})  # fmt: skip
    return rows


def _per_rho(values: torch.Tensor, rhos: list[float]) -> dict:
    logs = _log10(values)
    return {f"local rho={r:g}": float(np.median(logs[:, k])) for k, r in enumerate(rhos)}


def _crossover(name: str, target, x, dense: bool) -> list[dict]:
    lb = local_bounds(target, x, SWEEP, options=LocalOptions(taylor=True, dense=dense))
    out = []
    for i in range(len(x)):
        for k, rho in enumerate(SWEEP):
            out.append({"model": name, "example": i, "dense": dense, "rho": rho,
                        "log10_exact": math.log10(lb.centre[i].item()),
                        "log10_first_order": math.log10(lb.first_order[i, k].item()),
                        "log10_taylor": math.log10(lb.taylor[i, k].item()) if math.isfinite(lb.taylor[i, k]) else None,
                        "log10_local": math.log10(lb.local[i, k].item())})  # fmt: skip
    return out


def _crown(name: str, x: torch.Tensor, ids: np.ndarray, rhos: list[float], refresh: str) -> list[dict]:
    """The crown local bound and the exact ||J(x0)|| of ``name`` on each example of ``x``, at each rho."""
    from robustbench_filters.crown import local_lipschitz
    from robustbench_filters.lipschitz import jacobian_norm_exact

    model = create_model(name, "micro", checkpoint="zoo", fused_attn=False)
    exact = jacobian_norm_exact(make_target(model, dtype=torch.float64), x)
    out = []
    for rho in rhos:
        for i, b in enumerate(local_lipschitz(model, x, rho, refresh=refresh)):
            logging.info("%s rho %g example %d: crown %.4g, exact %.4g", name, rho, int(ids[i]), b.upper, exact[i])
            out.append({"model": name, "example_id": int(ids[i]), "rho": rho, "refresh": refresh,
                        "exact_centre": float(exact[i]),
                        "crown_upper": b.upper, "crown_centre": b.centre, "crown_error": b.error,
                        "passes": b.passes, "seconds": b.seconds})  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="deit,deit-grc")
    parser.add_argument("--n", type=int, default=14)
    parser.add_argument("--rhos", default="1e-3,0.1")
    parser.add_argument("--dense-n", type=int, default=2)
    parser.add_argument("--sweep-n", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="reports/lipschitz_gap")
    parser.add_argument("--summarize-only", action="store_true", help="rewrite summary.md and gap.png from the CSVs")
    parser.add_argument("--overwrite", action="store_true", help="write into an --out holding other files (kept)")
    parser.add_argument("--crown-only", action="store_true", help="add crown.csv to a finished folder (see above)")
    parser.add_argument("--crown-models", default="deit,deit-grc,deit-at")
    parser.add_argument("--crown-n", type=int, default=2)
    parser.add_argument("--crown-rhos", default="1e-3")
    parser.add_argument("--crown-refresh", default="all", help="CROWN's re-tightening (all, full, deep, ...)")
    args = parser.parse_args()
    folder = OutputFolder(args.out, "lipschitz-gap", overwrite=args.overwrite, legacy=_legacy).open()
    if args.summarize_only:
        write_summary(folder, f"zoo micro, {args.n} Fashion-MNIST test images, seed {args.seed}")
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    out = folder.out
    rhos = [float(r) for r in args.rhos.split(",")]
    if args.crown_only:
        x, ids = _inputs(args.crown_n, args.seed)
        crown_rhos = [float(r) for r in args.crown_rhos.split(",")]
        frame = pd.DataFrame(
            [r for name in args.crown_models.split(",") for r in _crown(name, x, ids, crown_rhos, args.crown_refresh)]
        )
        (crown_csv,) = folder.paths([CROWN_CSV])
        frame.to_csv(crown_csv, index=False)
        write_summary(folder, f"zoo micro, {args.n} Fashion-MNIST test images, seed {args.seed}")
        return
    x, ids = _inputs(args.n, args.seed)
    frames, ablation, crossover = [], [], []
    for name in args.models.split(","):
        model = create_model(name, "micro", checkpoint="zoo", fused_attn=False)
        target = make_target(model, dtype=torch.float64)
        logging.info("%s: ablation", name)
        ablation += _ablation(name, target, x, rhos)
        logging.info("%s: gap rows", name)
        frames.append(gap_rows(target, x, ids, rhos, generator=torch.Generator().manual_seed(args.seed)))
        logging.info("%s: rho sweep", name)
        crossover += _crossover(name, target, x[: args.sweep_n], dense=False)
        if args.dense_n:
            crossover += _crossover(name, target, x[: min(args.sweep_n, args.dense_n)], dense=True)
    rows = pd.concat(frames, ignore_index=True)
    rows_csv, ablation_csv, crossover_csv = folder.paths(CSVS)
    rows.to_csv(rows_csv, index=False)
    pd.DataFrame(ablation).to_csv(ablation_csv, index=False)
    pd.DataFrame(crossover).to_csv(crossover_csv, index=False)
    write_summary(folder, f"zoo micro, {args.n} Fashion-MNIST test images, seed {args.seed}")
    logging.info("wrote %s", out)


def _markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        cells = [f"{v:g}" if c == "rho" else f"{v:.2f}" if isinstance(v, float) else str(v) for c, v in row.items()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _legacy(folder: Path) -> set[str] | None:
    """The files this script wrote before output ledgers (summary.md marks its folder)."""
    return {*CSVS, CROWN_CSV, "summary.md", "gap.png"} if (folder / "summary.md").is_file() else None


def write_summary(folder: OutputFolder, source: str) -> None:
    """summary.md and gap.png from the CSVs (log10 medians over examples)."""
    out = folder.out
    gap_png, summary_md = folder.paths(["gap.png", "summary.md"])
    rows = pd.read_csv(out / "rows.csv")
    ablation = pd.read_csv(out / "ablation.csv").drop(columns="seconds_per_example")
    crossover = pd.read_csv(out / "crossover.csv")
    save_figure(lipschitz_gap_figure(rows, sources=[source]), out, "gap", ("png",))  # 300 dpi, the report style
    summary = gap_summary(rows)
    crossover["local_minus_exact"] = crossover["log10_local"] - crossover["log10_exact"]
    cross = crossover.pivot_table(index="rho", columns=["model", "dense"], values="local_minus_exact", aggfunc="median")
    cross.columns = [f"{m} {'dense' if d else 'default'}" for m, d in cross.columns]
    cross = cross.sort_index(ascending=False).reset_index()
    crown_text: list[str] = []
    if (out / CROWN_CSV).is_file():
        crown = pd.read_csv(out / CROWN_CSV)
        ablation = pd.concat([ablation, _crown_steps(crown, ablation)], ignore_index=True)
        ablation = ablation.sort_values("model", kind="stable").reset_index(drop=True)
        crown_text = ["## Linear bound propagation against the exact ||J(x0)|| (a lower bound)", "",
                      _markdown(_crown_table(crown)), "",
                      "A bound that is infinite or above 1e30 is vacuous. Passes: model-equivalent forward passes per "
                      "example (the bound's multiply-adds over one forward pass's).", ""]  # fmt: skip
    text = [
        f"# Certified Lipschitz bounds on the zoo DeiTs ({source})",
        "",
        "log10, median over examples. `local rho=r`: certified constant on B(x0, r) intersected with [0, 1]^d.",
        "",
        "## What each refinement buys",
        "",
        _markdown(ablation),
        "",
        "## Per layer: empirical, layerwise estimate, certified local and global",
        "",
        _markdown(summary),
        "",
        "## Certified local minus exact ||J(x0)|| (decades) as rho shrinks",
        "",
        _markdown(cross),
        "",
        *crown_text,
    ]
    atomic_write_text(summary_md, "\n".join(text))


def _crown_steps(crown: pd.DataFrame, ablation: pd.DataFrame) -> pd.DataFrame:
    """The crown bound as a step of the first table (log10 median over its examples; no global bound)."""
    rows = []
    for model, g in crown.groupby("model", sort=False):
        if model not in set(ablation["model"]):
            continue
        refresh = str(g["refresh"].iloc[0]) if "refresh" in g else "deep"  # crown.csv files before the column: deep
        row = {"model": model, "step": CROWN_STEP.format(refresh=refresh, n=g["example_id"].nunique()),
               "global": float("nan")}  # fmt: skip
        for col in ablation.columns:
            if col.startswith("local rho="):
                at = g[np.isclose(g["rho"], float(col.removeprefix("local rho=")))]
                row[col] = float(np.median(np.log10(at["crown_upper"]))) if len(at) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=ablation.columns)


def _crown_table(crown: pd.DataFrame) -> pd.DataFrame:
    """Per model and rho: log10 medians of the exact centre norm and the crown bound, their gap in decades."""
    c = crown.assign(log_exact=np.log10(crown["exact_centre"]), log_crown=np.log10(crown["crown_upper"]))
    c["decades_above"] = c["log_crown"] - c["log_exact"]
    table = c.groupby(["model", "rho"], sort=False).agg(
        n=("example_id", "nunique"),
        log10_exact=("log_exact", "median"),
        log10_crown=("log_crown", "median"),
        decades_above=("decades_above", "median"),
        worst_decades=("decades_above", "max"),
        passes=("passes", "median"),
    )
    return table.reset_index()


if __name__ == "__main__":
    main()
