"""Print the smallest accuracy drop each check mode detects (80% power), to size a gate's n_examples.

Why: a gate that passes says little unless we know what it could have caught. For a baseline check at
accuracy ``--acc`` this prints, per n, the planning MDE (:mod:`robustbench_filters.gating.power`, the figure
``robfilt check`` prints) and in brackets the exact MDE of the real decision rule
(:mod:`robustbench_filters.gating.power_exact`), for the interval, paired and point modes and each assumed
discordance (share of examples whose outcome differs between the baseline and the fresh run), and for a
``min_acc`` threshold at the same accuracy.

Usage::

    .venv/bin/python scripts/gate_mde_table.py                      # acc 0.5, discordance 0.1 and 0.2
    .venv/bin/python scripts/gate_mde_table.py --acc 0.65 --discordance 0.05,0.1,0.2 --alpha 0.05
"""

from __future__ import annotations

import argparse

from robustbench_filters.gating.modes import Mode
from robustbench_filters.gating.power import accuracy_baseline_mde, accuracy_threshold_mde
from robustbench_filters.gating.power_exact import baseline_power, exact_mde, threshold_power


def _pp(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def table(acc: float, ns: list[int], discordances: list[float], alpha: float) -> str:
    modes = (Mode.INTERVAL, Mode.PAIRED, Mode.POINT)
    head = ["n", "threshold interval"] + [f"{m} (pi {d:g})" for d in discordances for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for n in ns:
        thr = accuracy_threshold_mde(Mode.INTERVAL, n, acc)
        thr_exact = exact_mde(lambda x, n=n: threshold_power(Mode.INTERVAL, n, acc, acc - x), acc, step=0.0025)
        cells = [str(n), f"{_pp(thr)} [{_pp(thr_exact)}]"]
        for d in discordances:
            for mode in modes:
                approx = accuracy_baseline_mde(mode, n, acc, alpha=alpha, discordance=d)
                exact = exact_mde(
                    lambda x, n=n, mode=mode, d=d: baseline_power(mode, n, acc, x, d, alpha=alpha), acc, step=0.0025
                )
                cells.append(f"{_pp(approx)} [{_pp(exact)}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acc", type=float, default=0.5, help="baseline accuracy (or threshold)")
    parser.add_argument("--n", default="64,128,256,500,1000")
    parser.add_argument("--discordance", default="0.1,0.2")
    parser.add_argument("--alpha", type=float, default=0.05, help="one-sided level of the paired test")
    args = parser.parse_args()
    ns = [int(v) for v in args.n.split(",")]
    ds = [float(v) for v in args.discordance.split(",")]
    print(f"Minimum detectable accuracy drop, points (80% power; planning [exact]), accuracy {args.acc:g}:\n")
    print(table(args.acc, ns, ds, args.alpha))


if __name__ == "__main__":
    main()
