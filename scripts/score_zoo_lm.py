"""Rescore the LM zoo cards' test perplexities with the metric code ``robfilt train`` and ``robfilt attack`` share.

Why a script: the LM zoo was trained before LMs were measured on whole documents. Its cards recorded the test
perplexity of 128-character windows cut from the test split as one text; ``robfilt attack`` now scores whole
documents (paragraphs) in lm-eval's rolling windows, so the cards' numbers would not be the ones a user reproduces.
Retraining is not needed: the weights are unchanged, only how their test text is scored. This script loads each
LM zoo checkpoint with its tokenizer, scores every test document with :func:`robustbench_filters.train.loop.lm_card_metrics`
(what ``robfilt train`` writes into a new card) and writes the result into the card's ``metrics``, keeping the
numbers it replaces under ``metrics_before_documents`` with the protocol that made them. ``make zoo`` retrains
and writes the new metrics directly; run this only for cards trained before documents.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/score_zoo_lm.py              # every LM zoo card
    .venv/bin/python scripts/score_zoo_lm.py --model lm --dry-run            # print, do not write
"""

from __future__ import annotations

import json
import logging
from typing import Annotated

import typer

from robustbench_filters.core.io import atomic_write_json
from robustbench_filters.data import load_documents
from robustbench_filters.models.checkpoint import CARD, load_checkpoint, zoo_path
from robustbench_filters.train.loop import lm_card_metrics

LM_ZOO = "lm,lm-bsa,lm-grc,lm-bsa-grc"
OLD_PROTOCOL = (
    "test split as one text (chapters joined by blank lines), cut into non-overlapping windows of block_size tokens "
    "(128 characters); each window's tokens predicted from the window's earlier tokens; ragged tail dropped"
)
OLD_KEYS = ("test_nll", "test_ppl", "test_tokens", "test_ppl_per_char")


def rescore(name: str, size: str = "micro") -> tuple[dict, dict]:
    """(the card, its metrics rescored) for one LM zoo checkpoint."""
    from robustbench_filters.data import load_tokenizer

    folder = zoo_path(name, size)
    card = json.loads((folder / CARD).read_text())
    model = load_checkpoint(folder, name, size).eval()
    tokenizer = load_tokenizer(folder / "tokenizer.json")
    docs = load_documents(card["recipe"]["data"], "test").texts
    new = lm_card_metrics(model, tokenizer, docs, card["recipe"].get("eval_max"))
    return card, new


def main(
    model: Annotated[str, typer.Option("--model", help="Comma-separated LM zoo names.")] = LM_ZOO,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the metrics, do not write the cards.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in [m.strip() for m in model.split(",") if m.strip()]:
        card, new = rescore(name)
        metrics = card.get("metrics", {})
        before = card.get("metrics_before_documents") or {
            **{k: metrics[k] for k in OLD_KEYS if k in metrics},
            "protocol": OLD_PROTOCOL,
        }
        keep = {k: v for k, v in metrics.items() if k not in OLD_KEYS and not k.startswith("test_")}
        card["metrics"] = {**keep, **new, "tokenizer": metrics.get("tokenizer", "char")}
        card["metrics_before_documents"] = before
        logging.info(
            "%s: test perplexity %.4f per token over %d documents (before: %.4f, %s)",
            name,
            new["test_ppl"],
            new["test_documents"],
            before.get("test_ppl", float("nan")),
            "128-char windows",
        )
        if not dry_run:
            atomic_write_json(zoo_path(name, "micro") / CARD, card)


if __name__ == "__main__":
    typer.run(main)
