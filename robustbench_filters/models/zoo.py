"""The bundled zoo: which checkpoints exist and whether they meet the quality bars.

Bars (from the zoo's specification): every DeiT reaches >= 82% clean accuracy on the bundled test split and
every LM a test perplexity <= 5.0 per character (char tokenizer). The adversarially trained zoo models
(``deit-at``, ``deit-grc-at``) are for what robustness evaluation needs: >= 40% accuracy under PGD-20 at Linf 0.05. The noise-trained DeiTs (``zoo:sigma0.25``)
are base classifiers for randomized smoothing; their bar is on what they are for: a card with certificates and
a smoothed classifier certified correct (at radius 0) on >= 70% of the card's test examples.
``python -m robustbench_filters.models.zoo`` prints the table and exits 1 when a bar is missed, so ``make zoo``
fails loudly.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ..core.names import ZOO_MODELS
from .checkpoint import CARD, ZOO_NOISE_SIGMAS, noise_tag, zoo_path
from .registry import MODEL_NAMES

ZOO_SIZE = "micro"
MIN_ACC = 0.82
MAX_PPL = 5.0
MIN_CERTIFIED_ACC = 0.70  # noise-trained DeiTs: certified accuracy at radius 0 (the smoothed clean accuracy)
MIN_PGD20_ACC = 0.40  # adversarially trained zoo models: PGD-20 accuracy at their training eps (Linf 0.05)


def _cards(names: Iterable[str]) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(name, its zoo card, or None when the checkpoint is missing) per name."""
    for name in names:
        card_path = zoo_path(name, ZOO_SIZE) / CARD
        yield name, json.loads(card_path.read_text()) if card_path.exists() else None


def zoo_status() -> list[dict[str, Any]]:
    """One row per zoo name: metric, bar, pass/fail, training wall time."""
    rows = []
    for name, card in _cards(MODEL_NAMES):
        if card is None:
            rows.append({"name": name, "present": False, "passed": False})
            continue
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
    return rows + noise_zoo_status() + adversarial_zoo_status()


def adversarial_zoo_status() -> list[dict[str, Any]]:
    """One row per adversarially trained zoo model (``deit-at``): PGD-20 accuracy at its training eps, its bar."""
    rows = []
    for name, card in _cards(ZOO_MODELS):
        if card is None:
            rows.append({"name": name, "present": False, "passed": False})
            continue
        recipe, value = card.get("recipe") or {}, (card.get("metrics") or {}).get("test_acc_pgd20", float("nan"))
        rows.append(
            {
                "name": name, "present": True, "metric": "PGD-20 acc", "value": value,
                "bar": f">= {MIN_PGD20_ACC:.0%}", "passed": bool(value >= MIN_PGD20_ACC),
                "wall_time_min": round(recipe.get("wall_time_s", float("nan")) / 60, 1),
                "rebuild_command": recipe.get("rebuild_command"),
            }
        )  # fmt: skip
    return rows


def noise_zoo_status() -> list[dict[str, Any]]:
    """One row per noise-trained DeiT: certified accuracy at radius 0 from its card, against its bar."""
    rows = []
    for sigma in ZOO_NOISE_SIGMAS:
        for name in (n for n in MODEL_NAMES if n.startswith("deit")):
            label = f"{name} ({noise_tag(sigma)})"
            card_path = zoo_path(name, ZOO_SIZE, sigma) / CARD
            if not card_path.exists():
                rows.append({"name": label, "present": False, "passed": False})
                continue
            card = json.loads(card_path.read_text())
            cert, recipe = card.get("certification") or {}, card.get("recipe") or {}
            radii, accs = cert.get("radii", []), cert.get("certified_acc", [])
            value = accs[radii.index(0.0)] if 0.0 in radii else float("nan")
            rows.append(
                {
                    "name": label,
                    "present": True,
                    "metric": "certified acc r=0",
                    "value": value,
                    "bar": f">= {MIN_CERTIFIED_ACC:.0%}",
                    "passed": bool(value >= MIN_CERTIFIED_ACC),
                    "wall_time_min": round(recipe.get("wall_time_s", float("nan")) / 60, 1),
                    "rebuild_command": recipe.get("rebuild_command"),
                }
            )
    return rows


def main() -> int:
    rows = zoo_status()
    for r in rows:
        if not r["present"]:
            print(f"{r['name']:<24} MISSING")
            continue
        mark = "PASS" if r["passed"] else "FAIL"
        print(
            f"{r['name']:<24} {r['metric']:<17} {r['value']:.4f}  bar {r['bar']:<16} {mark}  trained in {r['wall_time_min']} min"
        )
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
