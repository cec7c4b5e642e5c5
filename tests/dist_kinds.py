"""Every kind of run, small: launched once under torchrun by tests/test_distributed.py, and once in-process.

``python dist_kinds.py OUT`` writes OUT/{image,lm,corruption,lipschitz}; under torchrun every rank runs the same
four configs and rank 0 merges each run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from robustbench_filters.api.evaluate import certify, estimate_lipschitz, evaluate

KINDS = ("image", "lm", "corruption", "lipschitz", "certify")
#: what torchrun sets; a process with none of them computes alone
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


def run_all(out: Path) -> None:
    common = {"checkpoint": "none", "seed": 3}
    # the default attack (apgd-adaptive: early exit, ledger, convergence check) next to a weak one
    evaluate(["deit", "deit-bsa"], ["apgd-adaptive", "fgsm"], [0.02, 0.05], n_examples=10, batch_size=3, steps=3,
             out=out / "image", **common)  # fmt: skip
    evaluate(["lm", "lm-grc"], ["pgd", "wordswap"], [0.05], n_examples=5, batch_size=2, steps=2, rates=[0.0, 0.2],
             out=out / "lm", **common)  # fmt: skip
    evaluate(["deit"], ["corruption:gaussian_noise", "corruption:contrast"], n_examples=7, batch_size=3,
             severities=[1, 4], out=out / "corruption", **common)  # fmt: skip
    estimate_lipschitz(["deit", "lm"], n_examples=3, batch_size=1, method="power", data="synthetic",
                       power_iters=5, seq_len=8, out=out / "lipschitz", **common)  # fmt: skip
    certify(["deit"], [0.25], n_examples=4, n0=20, n=50, batch_size=2, out=out / "certify", **common)


if __name__ == "__main__":
    run_all(Path(sys.argv[1]))
