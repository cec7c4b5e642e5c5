"""Which examples a reference attack broke that another attack left robust, which component broke them, and, for
those Square broke, how many queries a standalone Square run needed.

Why: B9 compares robust counts per cell. When the default leaves more than the reference, the count alone does not
say whether a longer gradient attack would close the gap (a budget question) or whether only a gradient-free
search finds those points (a question of what the default is made of: it has no black-box stage). This script
answers it from two finished run folders of the same model, data and seed (the default's and the reference's,
e.g. ``autoattack-standard``), verified like every reader:

    .venv/bin/python scripts/attack_gap.py RUN_DEFAULT RUN_REFERENCE --eps 0.15 --model "bn-at=benchmarks/robust_bn.py:robust_bn"

Square is rerun on every example the first run left robust at ``--eps`` (one batch, the reference's settings:
5000 queries, ``p_init`` 0.8, margin loss, the unrescaled schedule, seed 3, one thread). Its random draws differ
from the reference's run, which attacked another batch (the survivors of its own APGD and FAB stages), so its query
counts say how long the search takes, not which draw the reference made.
"""

from __future__ import annotations

import torch
import torchattacks
import typer

from robustbench_filters.data.images import load_images
from robustbench_filters.models.loading import load_model
from robustbench_filters.runs.folder import load_run

SQUARE = {"n_queries": 5000, "n_restarts": 1, "p_init": 0.8, "loss": "margin", "resc_schedule": False}


def _survivors(run: str, eps: float) -> dict[int, str]:
    """``example id -> fooled_by`` of every attacked row of ``run`` at ``eps`` (empty for a survivor)."""
    rows = load_run(run).rows
    rows = rows[(rows.kind != "clean") & ((rows.eps - eps).abs() < 1e-12) & rows.clean_correct]
    if rows.empty:
        raise SystemExit(f"{run} has no attacked rows at eps {eps:g}")
    return {
        int(i): ("" if ok else str(by)) for i, ok, by in zip(rows.example_id, rows.correct, rows.fooled_by, strict=True)
    }


def main(
    first: str = typer.Argument(..., help="run folder of the attack judged (e.g. the default)"),
    reference: str = typer.Argument(..., help="run folder of the reference attack, same model, data and seed"),
    eps: float = typer.Option(..., help="the eps compared"),
    model: str = typer.Option(..., help="the model reference both runs attacked"),
    queries: int = typer.Option(SQUARE["n_queries"], help="Square's query budget"),
    seed: int = typer.Option(3, help="Square's seed"),
) -> None:
    torch.set_num_threads(1)
    judged, ref = _survivors(first, eps), _survivors(reference, eps)
    if judged.keys() != ref.keys():
        raise SystemExit("the two runs attacked different examples; compare runs of the same data, n and seed")
    kept = sorted(i for i, by in judged.items() if not by)
    gap = [i for i in kept if ref[i]]
    print(f"{first}: {len(kept)} robust; {reference}: {sum(not b for b in ref.values())} robust")
    print(f"robust under the first, broken by the reference: {len(gap)}")
    for i in gap:
        print(f"  example {i}: broken by {ref[i]}")
    data = load_images(n_max=None)
    x, y = data.x[kept], data.y[kept]
    net = load_model(model).module.eval()
    square = torchattacks.Square(net, norm="Linf", eps=eps, seed=seed, **{**SQUARE, "n_queries": queries})
    square.orig_dim, square.ndims = list(x.shape[1:]), x.ndim - 1  # set by torchattacks' forward, not by this call
    torch.manual_seed(seed)
    with torch.no_grad():
        used, x_adv = square.attack_single_run(x, y)
        fooled = net(x_adv).argmax(1) != y
    print(
        f"Square ({queries} queries, seed {seed}) on the first run's {len(kept)} robust examples: broke {int(fooled.sum())}"
    )
    for k in torch.nonzero(fooled).flatten().tolist():
        print(
            f"  example {kept[k]}: {int(used[k])} queries" + (" (the reference broke it too)" if ref[kept[k]] else "")
        )


if __name__ == "__main__":
    typer.run(main)
