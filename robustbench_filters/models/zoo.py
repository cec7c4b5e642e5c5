"""The bundled zoo: which checkpoints exist and whether they meet the quality bars.

Bars (from the zoo's specification): every DeiT reaches >= 82% clean accuracy on the bundled test split and
every LM a test perplexity <= 5.0 per character (char tokenizer). ``python -m robustbench_filters.models.zoo``
prints the table and exits 1 when a bar is missed, so ``make zoo`` fails loudly.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .checkpoint import CARD, zoo_path
from .registry import MODEL_NAMES

ZOO_SIZE = "micro"
MIN_ACC = 0.82
MAX_PPL = 5.0
MAX_TRAIN_MINUTES = 15.0


def zoo_status() -> list[dict[str, Any]]:
    """One row per zoo name: metric, bar, pass/fail, training wall time."""
    rows = []
    for name in MODEL_NAMES:
        card_path = zoo_path(name, ZOO_SIZE) / CARD
        if not card_path.exists():
            rows.append({"name": name, "present": False, "passed": False})
            continue
        card = json.loads(card_path.read_text())
        metrics, recipe = card.get("metrics", {}), card.get("recipe") or {}
        if name.startswith("deit"):
            value, bar, ok = metrics.get("test_acc"), f">= {MIN_ACC:.0%}", metrics.get("test_acc", 0) >= MIN_ACC
            metric = "test accuracy"
        else:
            value = metrics.get("test_ppl_per_char", metrics.get("test_ppl"))
            bar, ok, metric = f"<= {MAX_PPL} per char", value is not None and value <= MAX_PPL, "test perplexity"
        rows.append(
            {
                "name": name,
                "present": True,
                "metric": metric,
                "value": value,
                "bar": bar,
                "passed": bool(ok),
                "wall_time_min": round(recipe.get("wall_time_s", float("nan")) / 60, 1),
                "rebuild_command": recipe.get("rebuild_command"),
            }
        )
    return rows


def main() -> int:
    rows = zoo_status()
    for r in rows:
        if not r["present"]:
            print(f"{r['name']:<14} MISSING")
            continue
        mark = "PASS" if r["passed"] else "FAIL"
        print(
            f"{r['name']:<14} {r['metric']:<16} {r['value']:.4f}  bar {r['bar']:<16} {mark}  trained in {r['wall_time_min']} min"
        )
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
