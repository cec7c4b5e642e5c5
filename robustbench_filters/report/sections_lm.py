"""The report's language-model section: perplexity under attack and contamination (table, lm-eval columns for
Hugging Face models, figure) and the LM corruption tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..summaries import LM
from . import context as C
from . import figures as F
from . import render as R
from . import tables as T
from .sections_image import corruption_section

if TYPE_CHECKING:
    from .assembly import ReportBuilder


def lm_section(b: ReportBuilder) -> None:
    rows = b.rs.rows.get(LM)
    if rows is None:
        b.skip("perplexity table and figure", "no LM run given")
        return
    table = T.perplexity_table(rows)
    if table.empty:
        b.skip("perplexity table", "the LM runs hold no nll rows")
    else:
        context = C.lm_subtitle(b.rs.families[LM], rows, int(table["n"].max()))
        b.table(
            "perplexity",
            "Perplexity under attack and contamination",
            "Token perplexity exp(sum nll / sum tokens) (per character for robfilt's character-level LMs) with "
            "95% bootstrap intervals over documents and, under attack, its ratio to the model's clean perplexity "
            f"(x clean), per attack and eps (embedding attacks) or contamination rate (text attacks); {context}.",
            table,
            R.perplexity_layout(table),
            LM,
        )
        if "word_perplexity" in table.columns and table["word_perplexity"].notna().any():
            b.table(
                "lm_eval",
                "lm-eval perplexities under attack and contamination",
                "lm-eval's word_perplexity [95% bootstrap CI], byte_perplexity and bits_per_byte (rolling "
                "log-likelihood windows over whole documents; words and bytes of the clean text); "
                f"{context}.",
                table,
                R.lm_eval_layout(table),
                LM,
            )
        if "passes" in table.columns and table["passes"].notna().any():
            ledger = table[["model", "attack", "eps", "passes_per_example", "passes"]].dropna()
            b.table(
                "lm_compute_ledger",
                "Compute ledger",
                "Model passes (forward + backward; one window through the model is one pass) per document and in "
                f"total, per attack and eps or rate; {context}.",
                ledger,
                R.generic_layout(ledger),
                LM,
            )
        if (table["attack"] != T.CLEAN).any():
            sub = C.lm_subtitle(b.rs.families[LM], rows, int(table["n"].max()))
            b.family_figure(LM, "perplexity_vs_budget", "Perplexity vs contamination rate and embedding eps",
                            F.perplexity_caption, F.perplexity_figure, table, sub)  # fmt: skip
        else:
            b.skip("perplexity figure", "only clean rows")
    corruption_section(b, rows, LM)
