"""Claim (c) of the study judged on the certified local Lipschitz bound of linear bound propagation (issue 43).

    .venv/bin/python scripts/study_claim_c_crown.py --n 4 --refresh deep --out reports/lipschitz_gap/study_claim_c

The study judges "boosting (GRC) lowers the Lipschitz constant" on the layerwise estimate (not certified) and on
certified global bounds (vacuous). This script judges it on the certified local constant that
:func:`robustbench_filters.crown.local_lipschitz` gives (l2, pixels -> logits, on B_2(x0, rho) ∩ [0, 1]^d), with the
study's own checkpoints and the study's rule:

- models: every seed of the committed study in ``--study``, its ``deit`` and ``deit-grc`` checkpoints, reused from
  ``<study>/checkpoints`` when their cards match the study's recipe (what ``make study`` leaves there), else trained
  as the study trains them. Each checkpoint's SHA-256 must equal the one the study recorded: numbers about other
  weights would not be about the study's models, so a mismatch stops the script;
- examples: the first ``--n`` of the seeded permutation of the Fashion-MNIST test split that ``robfilt lipschitz``
  selects (the study's evaluation seed 0), the same images for every model and seed;
- per seed, the paired difference of the median log10 bound over the examples (``deit-grc - deit``, in decades),
  judged across seeds by :func:`robustbench_filters.study.claims.judge` (delta 0.05 decades), oriented so that
  positive is as claimed. The exact ``||J(x0)||`` (a lower bound) is computed beside each bound, to show how far
  above the constant the bound lies.

Every (seed, model, example) bound is one job; ``--workers`` processes compute them with one torch thread each.
Writes ``bounds.csv`` (one row per job) and ``summary.md`` into ``--out`` (refused when it holds other files);
``--summarize-only`` rewrites ``summary.md`` from ``bounds.csv``. The committed run (n 4, deep, rho 1e-3) took 27
minutes on 2 cores beside a CI run (139 s per bound on one thread, 16,922 model passes).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pandas as pd

MODELS = ("deit", "deit-grc")
DELTA = 0.05  # decades: the study's smallest effect that matters for a Lipschitz bound


def _checkpoint(study: Path, model: str, seed: int) -> tuple[Path, str]:
    """The study's checkpoint of ``model`` for ``seed`` (reused or trained as the study does) and its hash, checked
    against the study's record."""
    from robustbench_filters.study.checkpoints import ensure_checkpoint
    from robustbench_filters.study.plan import full_plan

    manifest = json.loads((study / "study.json").read_text())
    plan = full_plan(len(manifest["plan"]["seeds"]))
    recorded = manifest["pieces"][f"train/{model}/s{seed}"]["weights_sha256"]
    info = ensure_checkpoint(plan, model, seed, study / "checkpoints")
    if info.weights_sha256 != recorded:
        raise SystemExit(
            f"{model} seed {seed}: the checkpoint's SHA-256 {info.weights_sha256[:12]} is not the one the study "
            f"recorded ({recorded[:12]}); run make study first, so that the bounds are about the study's models."
        )
    return info.path, info.weights_sha256


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` images of the seeded permutation ``robfilt lipschitz`` selects (seed 0), as float64."""
    import torch

    from robustbench_filters.data import load_images
    from robustbench_filters.runs.units import select_examples

    data = load_images("fashion-mnist", split="test")
    idx = select_examples(len(data.x), n, 0, ordered=False)
    return torch.as_tensor(data.x)[idx].double().numpy(), idx.numpy()


def _bound(job: dict) -> dict:
    """One job: the crown local constant and the exact ||J(x0)|| of one model on one image (one torch thread)."""
    import torch

    torch.set_num_threads(1)
    from robustbench_filters.crown import local_lipschitz
    from robustbench_filters.lipschitz import jacobian_norm_exact, make_target
    from robustbench_filters.models import load_checkpoint, set_fused_attn

    model = set_fused_attn(load_checkpoint(job["path"], name=job["model"], size="micro"), False).eval()
    x = torch.as_tensor(np.asarray(job["x"]))[None]
    exact = float(jacobian_norm_exact(make_target(model, dtype=torch.float64), x)[0])
    t0 = time.perf_counter()
    (b,) = local_lipschitz(model, x, job["rho"], refresh=job["refresh"])
    logging.info("seed %d %s example %d: crown %.4g, exact %.4g (%.0f s)", job["seed"], job["model"],
                 job["example_id"], b.upper, exact, time.perf_counter() - t0)  # fmt: skip
    return {"seed": job["seed"], "model": job["model"], "example_id": job["example_id"], "rho": job["rho"],
            "refresh": job["refresh"], "weights_sha256": job["sha"], "exact_centre": exact, "crown_upper": b.upper,
            "crown_centre": b.centre, "crown_error": b.error, "passes": b.passes, "seconds": b.seconds}  # fmt: skip


def judge_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, str, str, tuple[float, float, float]]:
    """Per seed the median log10 bound of each model and the difference; the study's verdict across seeds."""
    from robustbench_filters.stats.intervals import mean_interval
    from robustbench_filters.study.claims import judge

    per = (
        rows.assign(log10_crown=np.log10(rows["crown_upper"]), log10_exact=np.log10(rows["exact_centre"]))
        .groupby(["seed", "model"])[["log10_crown", "log10_exact"]]
        .median()
        .unstack("model")
    )
    table = pd.DataFrame({
        "seed": [str(int(seed)) for seed in per.index],
        **{f"{m}: log10 crown": per[("log10_crown", m)].to_numpy() for m in MODELS},
        **{f"{m}: log10 exact": per[("log10_exact", m)].to_numpy() for m in MODELS},
    })  # fmt: skip
    table["difference (deit-grc - deit)"] = table["deit-grc: log10 crown"] - table["deit: log10 crown"]
    oriented = [-d for d in table["difference (deit-grc - deit)"]]  # lower is as claimed
    verdict, why = judge(oriented, DELTA)
    mean, lo, hi = mean_interval(list(table["difference (deit-grc - deit)"]))
    return table, verdict.value, why, (mean, lo, hi)


def _summary(rows: pd.DataFrame, args: argparse.Namespace) -> str:
    table, verdict, why, (mean, lo, hi) = judge_rows(rows)
    above = np.log10(rows["crown_upper"]) - np.log10(rows["exact_centre"])
    lines = [
        "# Claim (c) on the certified local bound of linear bound propagation",
        "",
        f"`scripts/study_claim_c_crown.py --n {args.n} --refresh {args.refresh} --rho {args.rho}`: the study's "
        f"`deit` and `deit-grc` checkpoints of every seed (their SHA-256 equal to the study's records), the first "
        f"{args.n} images of `robfilt lipschitz`'s selection, l2 ball of radius {args.rho} cut to [0, 1]. Medians "
        "over the images, log10; the study's rule across seeds (delta 0.05 decades, positive = as claimed).",
        "",
        f"**Verdict: {verdict}** ({why}). deit-grc - deit: {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] decades "
        f"(per seed: {', '.join(f'{d:+.2f}' for d in table['difference (deit-grc - deit)'])}).",
        "",
        table.to_markdown(index=False, floatfmt=".3f"),
        "",
        f"The bounds lie {np.median(above):.2f} decades (median; worst {above.max():.2f}) above the exact "
        f"||J(x0)||, so none is vacuous. Median cost per bound: {rows['passes'].median():,.0f} model passes, "
        f"{rows['seconds'].median():.0f} s on one thread.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=Path("reports/study"))
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--rho", type=float, default=1e-3)
    parser.add_argument("--refresh", default="deep")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("reports/lipschitz_gap/study_claim_c"))
    parser.add_argument("--summarize-only", action="store_true", help="rewrite summary.md from --out's bounds.csv")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.summarize_only:
        (args.out / "summary.md").write_text(_summary(pd.read_csv(args.out / "bounds.csv"), args))
        print((args.out / "summary.md").read_text())
        return
    if args.out.exists() and set(p.name for p in args.out.iterdir()) - {"bounds.csv", "summary.md"}:
        raise SystemExit(f"--out {args.out} holds files this script did not write; pick another --out.")
    seeds = json.loads((args.study / "study.json").read_text())["plan"]["seeds"]
    xs, ids = _inputs(args.n)
    jobs = []
    for seed in seeds:
        for model in MODELS:
            path, sha = _checkpoint(args.study, model, seed)
            jobs += [{"seed": seed, "model": model, "path": str(path), "sha": sha, "example_id": int(i),
                      "x": x.tolist(), "rho": args.rho, "refresh": args.refresh} for x, i in zip(xs, ids, strict=True)]  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        rows = pd.DataFrame(pool.map(_bound, jobs, chunksize=1))
    if not all(math.isfinite(v) for v in rows["crown_upper"]):
        raise SystemExit("a bound is not finite; see the log")
    if (rows["crown_upper"] < rows["exact_centre"] * (1 - 1e-9)).any():
        raise SystemExit("a certified bound fell below the exact ||J(x0)||: a soundness bug")
    args.out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(args.out / "bounds.csv", index=False)
    (args.out / "summary.md").write_text(_summary(rows, args))
    print((args.out / "summary.md").read_text())


if __name__ == "__main__":
    main()
