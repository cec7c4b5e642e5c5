"""Count host-device synchronisations in one engine unit on a GPU, by source line.

The engine promises no synchronisation inside the attack loops: only the survivor counts (one per eps) and the
final copy of the rows. ``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronising call warn; this
script runs one cascade unit (PGD-k over the default eps grid) with warnings recorded and reports how many came
from our code, from torchattacks and from elsewhere, and whether any of ours scales with k (the step count).
Early exit is off here: with it on, each step asks once which examples are fooled (the batch shrinks on that
answer), a synchronisation per step by design. Run on a GPU machine: ``python -m benchmarks.sync_check --device
cuda``. On a CPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import collections
import traceback
import warnings

import torch

from benchmarks import _common as B
from robustbench_filters.attacks.cascade import Batch, CascadeSettings, cascade
from robustbench_filters.attacks.catalogue import AttackParams, Norm

EPS = (0.005, 0.01, 0.02, 0.05, 0.1)


def _origin(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame in our package or torchattacks: who asked for the synchronisation."""
    for frame in reversed(stack):
        if "robustbench_filters" in frame.filename or "torchattacks" in frame.filename:
            short = frame.filename.split("site-packages/")[-1].split("robustbench_filters/")[-1]
            return f"{short}:{frame.lineno} {frame.name}"
    return "elsewhere"


def count_syncs(steps: int, device: torch.device) -> collections.Counter[str]:
    torch.manual_seed(0)
    model = B.eval_model("deit", B.pick_checkpoint("deit"), device)
    x = torch.rand(128, 1, 28, 28, device=device)
    with torch.no_grad():
        logits = model(x)
    y = logits.argmax(1)  # every example starts correct, so every eps attacks survivors
    ids = torch.arange(128)
    counts: collections.Counter[str] = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        if "synchroniz" in str(message):
            counts[_origin(traceback.extract_stack()[:-1])] += 1

    torch.cuda.synchronize(device)
    with warnings.catch_warnings():  # restores showwarning on exit
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            cascade(model, "deit", Batch(x, y, ids, y == y, logits),
                    CascadeSettings("pgd", tuple(EPS), AttackParams(0.0, Norm.LINF, steps, None, 0, 10, early_stop=False)))  # fmt: skip
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description="Count host-device synchronisations of one engine unit.")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (cpu only says: skipped)")
    device = torch.device(parser.parse_args().device)
    if device.type != "cuda" or not torch.cuda.is_available():
        print("sync_check: needs a CUDA device; skipped")
        return 0
    by_steps = {k: count_syncs(k, device) for k in (5, 20)}
    for k, counts in by_steps.items():
        print(f"PGD-{k} over {len(EPS)} eps: {sum(counts.values())} synchronisations")
        for origin, n in counts.most_common():
            print(f"  {n:5d}  {origin}")
    ours = {k: sum(n for o, n in c.items() if not o.startswith("torchattacks") and o != "elsewhere")
            for k, c in by_steps.items()}  # fmt: skip
    verdict = "independent of the step count" if ours[5] == ours[20] else "GROWS with the step count"
    print(f"robfilt's own synchronisations: {ours[5]} at k=5, {ours[20]} at k=20 ({verdict})")
    return 0 if ours[5] == ours[20] else 1


if __name__ == "__main__":
    raise SystemExit(main())
