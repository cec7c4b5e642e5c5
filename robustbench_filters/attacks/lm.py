"""Language-model attacks as a runner measurement: embedding FGSM/PGD and word-swap contamination on shared text.

Units are (model, clean or attack, batch of sequences); rows are built in :mod:`.lm_rows`. Perplexity is
``exp(sum NLL / sum tokens)`` over sequences (with the report's 95% bootstrap interval over sequences), next-token
accuracy likewise, always recomputed from the rows.
eps is relative to the embedding scale by default (see :mod:`.embedding`); the scale of every model is reported.

Hugging Face causal LMs (``hf:DIR`` or a ``transformers`` model with its tokenizer) run through the same code as
robfilt's own GPT, seen through :class:`robustbench_filters.models.hf.adapter.HFCausalLM`. They are scored as lm-eval scores
documents (rolling windows, every token predicted), so their summaries add lm-eval's ``word_perplexity``,
``byte_perplexity`` and ``bits_per_byte`` next to the token perplexity; ``perplexity_metric`` names the metric of
every model (per character for robfilt's character-level LMs).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import Check
from ..checks import lm as LC
from ..checks import model as MC
from ..checks import summarize as summarize_checks
from ..checks.logits import require_logits
from ..configs import WORDSWAP, LMAttackConfig
from ..core.errors import RobfiltError, UserCodeError
from ..runs.measurement import Measurement, PrepareContext, Tick
from ..runs.units import Unit, batch_slices, ids_digest
from ..stats.intervals import bootstrap_ratio_interval, lm_eval_columns
from ..summaries import LMAttackSummary
from .catalogue import Norm
from .embedding import eps_scale
from .lm_rows import (
    LMSubject,
    attack_rows,
    document_counts,
    encode_batch,
    score_rows,
    text_chunks,
    wordswap_rows,
)
from .lm_subjects import load_lm_subjects
from .wordswap import eligible_spans

N_PROBE = 8  # sequences the model-level checks probe


def _aggregate(rows: pd.DataFrame) -> dict[str, Any]:
    """Perplexity with the report's 95% bootstrap interval over sequences (same resampling, same seed)."""
    n_tok = int(rows.n_tokens.sum())
    nll = float(rows.nll_sum.sum()) / n_tok if n_tok else float("nan")
    seq_ppl = np.exp(rows.nll_sum / rows.n_tokens.clip(lower=1))
    ppl_lo, ppl_hi = bootstrap_ratio_interval(rows.nll_sum.to_numpy(float), rows.n_tokens.to_numpy(float))
    return {
        "ppl": math.exp(nll) if n_tok else float("nan"),
        "ppl_lo": ppl_lo,
        "ppl_hi": ppl_hi,
        "acc": float(rows.correct_tokens.sum()) / n_tok if n_tok else float("nan"),
        "nll": nll,
        "n_tokens": n_tok,
        "n_sequences": int(len(rows)),
        "ppl_median_seq": float(np.median(seq_ppl)) if len(rows) else float("nan"),
        **lm_eval_columns(rows),
    }


def summarize_lm_rows(rows: pd.DataFrame) -> dict[str, Any]:
    """Per model: clean perplexity/accuracy, then one entry per (attack, eps or rate), recomputed from rows."""
    out: dict[str, Any] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean = _aggregate(grp[grp.kind == "clean"])
        results = []
        for (attack, eps), sub in grp[grp.kind != "clean"].groupby(["attack", "eps"], sort=True):
            entry = {"attack": attack, "kind": sub.kind.iloc[0], "eps": float(eps), **_aggregate(sub)}
            entry["ppl_ratio"] = entry["ppl"] / clean["ppl"] if clean["ppl"] > 0 else float("nan")
            if entry["kind"] == "contamination":
                entry["rate"] = float(eps)
                entry["words_swapped"] = float(sub.n_swapped.sum() / max(int(sub.n_eligible.sum()), 1))
            else:
                entry["eps_abs"] = float(sub.eps_abs.iloc[0])
            results.append(entry)
        out[label] = {"clean": clean, "results": results}
    return out


def perplexity_metric(subject: LMSubject) -> str:
    """Which perplexity the rows of ``subject`` give (tables print it next to the numbers)."""
    if subject.rolling is not None:
        r = subject.rolling
        return (
            f"per token, lm-eval rolling windows (max_length {r.max_length}, stride {r.stride}); also lm-eval's "
            "word_perplexity, byte_perplexity, bits_per_byte"
        )
    kind = getattr(subject.tokenizer, "kind", "")
    return "per character (character tokenizer)" if kind == "char" else f"per token ({kind or 'model'} tokenizer)"


def scale_definition(norm: Norm, eps_mode: str) -> str:
    if eps_mode == "absolute":
        return "absolute: eps is the per-token radius in embedding space"
    if norm is Norm.L2:
        return "eps_abs = eps * mean L2 norm of the token-embedding rows (per-token L2 ball)"
    return "eps_abs = eps * mean |entry| of the token-embedding matrix (Linf box)"


def _window(subjects: Sequence[LMSubject], max_length: int | None, stride: int | None) -> int:
    """Characters per sequence minus one: the smallest window, ``--max-length`` included (checked per model)."""
    if stride is not None and all(s.rolling is None for s in subjects):
        raise RobfiltError("--stride applies to hf: models (lm-eval's rolling windows); drop it.")
    for s in subjects:
        limit = int(s.module.config.block_size)
        if s.rolling is None and max_length is not None and max_length > limit:
            raise RobfiltError(f"--max-length {max_length} is longer than {s.label}'s block size {limit}; pass less.")
    return min([int(s.module.config.block_size) for s in subjects] + ([max_length] if max_length else []))


class LMAttack(Measurement):
    """Language models x (embedding attacks, word swap) on the same seeded text sequences."""

    config: LMAttackConfig

    def prepare(self, ctx: PrepareContext) -> None:
        from ..data import load_text

        c = self.config
        self.device = ctx.device
        text = load_text(c.data, split="test", **({"text_column": c.text_column} if c.text_column else {}))
        self.data_checksum = hashlib.sha256(text.encode()).hexdigest()[:16]
        self.subjects = load_lm_subjects(
            c.models, c.data, c.size, c.checkpoint, c.seed, c.tokenizer, c.base_dir, c.parsed_model_args,
            max_length=c.max_length, stride=c.stride, precision=c.precision, device=c.device,
        )  # fmt: skip
        self.block = _window(self.subjects, c.max_length, c.stride)
        pool = text_chunks(text, self.block + 1)
        if not pool:
            raise RobfiltError(
                f"the {c.data} test text has {len(text)} characters, fewer than one sequence ({self.block + 1})."
            )
        self.ids = ctx.select(len(pool), c.n_examples)
        self.n = len(self.ids)
        self.chunks = [pool[int(i)] for i in self.ids]
        ctx.record_data("examples", hashlib.sha256("\0".join(self.chunks).encode()).hexdigest())
        if any(r > 0 for r in c.rates) and not any(eligible_spans(t)[0] for t in self.chunks):
            raise RobfiltError(
                f"the selected {c.data} test text has no eligible words (only stopwords, or no words); "
                "word swap needs content words."
            )
        self.batches = batch_slices(self.n, c.batch_size)
        self._encoded: tuple[tuple[int, int], Any] | None = None
        self._on_device: set[int] = set()
        for mi in range(len(self.subjects)):
            self._check_outputs(mi)

    def _check_outputs(self, mi: int) -> None:
        """Refuse, before any folder is written, a model whose logits are not finite (batch, seq, vocab) with a
        logit for every token its tokenizer makes (token ids are the classes of a language model)."""
        s = self._subject(mi)
        b = encode_batch(s.tokenizer, self.chunks[:2], self.block + 1, self.device)
        try:
            with torch.no_grad():
                out = s.module.forward_embeddings(s.module.embed(b.idx))
        except Exception as exc:  # noqa: BLE001 - the user's forward may raise anything
            raise UserCodeError.wrap(s.label, "its first forward pass", exc, "fix it, then rerun") from None
        vocab = require_logits(out, len(b.idx), model=s.label, rank=3, where="the first selected sequences")
        if out.shape[1] != b.idx.shape[1]:
            raise RobfiltError(
                f"model {s.label} returns {out.shape[1]} positions for sequences of {b.idx.shape[1]} tokens; "
                "it must return (batch, seq, vocab) logits, one row per input position."
            )
        if vocab < s.tokenizer.vocab_size:
            raise RobfiltError(
                f"model {s.label} returns {vocab} logits per position but its tokenizer has {s.tokenizer.vocab_size} "
                "tokens; use the tokenizer the model was trained with."
            )

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.subjects]

    def modules(self) -> list[nn.Module]:
        return [s.module for s in self.subjects]

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {
            "models": self.labels,
            "attacks": list(c.attacks),
            "eps": list(c.eps),
            "rates": list(c.rates),
            "norm": c.norm.value,
            "eps_mode": c.eps_mode,
            "steps": c.steps,
            "step_size": c.step_size,
            "data": c.data,
            "data_checksum": self.data_checksum,
            "n_examples": self.n,
            "example_ids_sha256": ids_digest(self.ids),
            "seq_chars": self.block + 1,
            "replacement": c.replacement,
            "batch_size": c.batch_size,
            "size": c.size,
            "checkpoint": c.checkpoint,
            "sources": [s.source for s in self.subjects],
            "check_masking": c.check_masking,
            **self._hf_description(),
        }

    def _hf_description(self) -> dict[str, Any]:
        """Precision and lm-eval windows, recorded only where they apply (older runs keep their fingerprints)."""
        extra: dict[str, Any] = {"precision": self.config.precision} if self.config.precision != "fp32" else {}
        windows = {
            s.label: {**s.rolling.describe(), "tokenizer": s.tokenizer.digest}
            for s in self.subjects
            if s.rolling is not None
        }
        return {**extra, "windows": windows} if windows else extra

    def plan(self) -> list[Unit]:
        n_models, n_batches = len(self.subjects), len(self.batches)
        attack = [Unit(mi, a, bi) for mi in range(n_models) for a in self.config.attacks for bi in range(n_batches)]
        return attack + [Unit(mi, "clean", bi) for mi in range(n_models) for bi in range(n_batches)]

    def work(self, unit: Unit) -> int:
        c = self.config
        return 1 if unit.part == "clean" else len(c.rates) if unit.part == WORDSWAP else len(c.eps)

    def _subject(self, mi: int) -> LMSubject:
        s = self.subjects[mi]
        if mi not in self._on_device:
            s.module.to(self.device).eval()
            self._on_device.add(mi)
        return s

    def _encode(self, mi: int, bi: int):  # noqa: ANN202 - lm_rows.Batch
        if self._encoded is None or self._encoded[0] != (mi, bi):
            texts, s = self.chunks[self.batches[bi]], self.subjects[mi]
            self._encoded = ((mi, bi), encode_batch(s.tokenizer, texts, self.block + 1, self.device, s.rolling))
        return self._encoded[1]

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        c, s = self.config, self._subject(unit.model)
        ids, texts = self.ids[self.batches[unit.batch]], self.chunks[self.batches[unit.batch]]
        if unit.part == WORDSWAP:
            return wordswap_rows(s, texts, ids, c.rates, c.replacement, self.block + 1, c.seed, self.device, tick)
        b, counts = self._encode(unit.model, unit.batch), document_counts(s, texts)
        if unit.part == "clean":
            rows = score_rows(s.module, s.label, ids, b, s.module.embed(b.idx), "clean", "clean", 0.0, "", **counts)
            tick(1)
            return rows
        scale = eps_scale(s.module, c.norm, c.eps_mode)
        return attack_rows(s, unit.part, c.eps, c.norm, scale, b, ids, c.steps, c.step_size, c.seed, tick, **counts)

    def model_checks(self, model: int) -> list[Check]:
        c, s = self.config, self._subject(model)
        probe = encode_batch(s.tokenizer, self.chunks[:N_PROBE], self.block + 1, self.device, s.rolling)
        checks = [
            MC.check_eval_deterministic(s.module, s.label, probe.idx),
            LC.check_embedding_gradients(s.module, s.label, probe.idx, probe.targets, probe.mask),
        ]
        if c.check_masking and "pgd" in c.attacks:
            mid = c.eps[len(c.eps) // 2]
            scale = eps_scale(s.module, c.norm, c.eps_mode)
            ids = torch.arange(probe.n_sequences)
            base = attack_rows(s, "pgd", [mid], c.norm, scale, probe, ids, c.steps, c.step_size, c.seed)
            more = attack_rows(s, "pgd", [mid], c.norm, scale, probe, ids, 5 * c.steps, c.step_size, c.seed)
            checks.append(LC.check_more_steps(LC.ppl(base), LC.ppl(more), s.label, 5))
        return checks

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        found = [
            LC.check_finite_outputs(rows, label),
            LC.check_rate0_equals_clean(rows, label),
            LC.check_eps0_equals_clean(rows, label),
            LC.check_contamination_rate(rows, label),
            LC.check_embedding_ball(rows, label),
            LC.check_ppl_monotone(rows, label),
            LC.check_pgd_vs_fgsm(rows, label),
        ]
        return [ch for ch in found if ch is not None]

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> LMAttackSummary:
        c, labels = self.config, self.labels
        return LMAttackSummary.build({
            "kind": "attack",
            "family": "lm",
            "data": c.data,
            "n_examples": self.n,
            "seed": c.seed,
            "attacks": list(c.attacks),
            "eps": list(c.eps),
            "rates": list(c.rates),
            "norm": c.norm.value,
            "eps_mode": c.eps_mode,
            "eps_scale": {s.label: eps_scale(s.module, c.norm, c.eps_mode) for s in self.subjects},
            "eps_scale_definition": scale_definition(c.norm, c.eps_mode),
            "steps": c.steps,
            "step_size": c.step_size if c.step_size is not None else "0.15*eps",
            "seq_chars": self.block + 1,
            "replacement": c.replacement,
            "precision": c.precision,
            "perplexity_metric": {s.label: perplexity_metric(s) for s in self.subjects},
            "models": summarize_lm_rows(rows),
            "checks": [ch.to_dict() for ch in sorted(checks, key=lambda ch: labels.index(ch.model))],
            "checks_summary": summarize_checks(checks),
        })  # fmt: skip
