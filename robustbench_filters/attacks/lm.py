"""Language-model attacks as a runner measurement: embedding FGSM/PGD and word-swap contamination on documents.

Examples are whole documents of one split of the text (:mod:`robustbench_filters.data.documents`; ``--split``,
default ``test``), each scored on lm-eval's rolling token windows of each model's own tokenizer (:mod:`.lm_rows`).
Units are (model, clean or attack, batch of documents). Per model, the summary gives the token perplexity
``exp(sum NLL / sum tokens)`` (per character for robfilt's character-level LMs) with its 95% bootstrap interval over
documents, next-token accuracy, lm-eval's ``word_perplexity``, ``byte_perplexity`` and ``bits_per_byte`` (the clean
document's words and bytes), and the compute ledger (forward and backward passes), always recomputed from the rows.
eps is relative to the embedding scale by default (see :mod:`.embedding`); the scale of every model is reported.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import Check, ChecksSummary
from ..checks import lm as LC
from ..checks import model as MC
from ..checks.logits import require_logits
from ..configs import WORDSWAP, LMAttackConfig
from ..core.counts import UpTo
from ..core.errors import RobfiltError, UserCodeError
from ..runs.measurement import Measurement, PrepareContext, Tick
from ..runs.units import Unit, batch_slices, ids_digest
from ..stats.intervals import bootstrap_ratio_interval, lm_eval_columns
from ..summaries import LMAttackSummary
from ..summaries.lm import LMAttackResult, LMModelResults, LMScores
from ..summaries.record import ABSENT
from .catalogue import Norm
from .embedding import eps_scale
from .lm_rows import Docs, LMSubject, attack_rows, clean_rows, probe_batch, wordswap_rows
from .lm_subjects import load_lm_subjects
from .wordswap import eligible_spans

log = logging.getLogger(__name__)

N_PROBE = 8  # windows the model-level checks probe


def ledger(rows: pd.DataFrame) -> dict[str, Any]:
    """The compute behind some rows: forward and backward passes in total and per document (empty for rows written
    before LM rows had a ledger)."""
    if "fwd" not in rows.columns or not len(rows):
        return {}
    n, fwd, bwd = len(rows), float(rows.fwd.sum()), float(rows.bwd.sum())
    return {"cost": {"fwd": fwd, "bwd": bwd, "fwd_per_example": fwd / n, "bwd_per_example": bwd / n,
                     "exact": bool(rows.cost_exact.all())}}  # fmt: skip


def _aggregate(rows: pd.DataFrame) -> dict[str, Any]:
    """Perplexity with the report's 95% bootstrap interval over documents (same resampling, same seed); NaN (never
    a number) when no token was predicted."""
    n_tok = int(rows.n_tokens.sum())
    nll = float(rows.nll_sum.sum()) / n_tok if n_tok else math.nan
    scored = rows[rows.n_tokens > 0]
    seq_ppl = np.exp(scored.nll_sum / scored.n_tokens)
    ppl_lo, ppl_hi = bootstrap_ratio_interval(rows.nll_sum.to_numpy(float), rows.n_tokens.to_numpy(float))
    return {
        "ppl": math.exp(nll) if n_tok else math.nan,
        "ppl_lo": ppl_lo,
        "ppl_hi": ppl_hi,
        "acc": float(rows.correct_tokens.sum()) / n_tok if n_tok else math.nan,
        "nll": nll,
        "n_tokens": n_tok,
        "n_sequences": int(len(rows)),
        "ppl_median_seq": float(np.median(seq_ppl)) if len(scored) else math.nan,
        **({"n_windows": int(rows.n_windows.sum())} if "n_windows" in rows.columns else {}),
        **lm_eval_columns(rows),
        **ledger(rows),
    }


def summarize_lm_rows(rows: pd.DataFrame) -> dict[str, LMModelResults]:
    """Per model: clean perplexity/accuracy, then one entry per (attack, eps or rate), and the passes each attack
    spent over its whole grid; recomputed from rows."""
    out: dict[str, LMModelResults] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean = _aggregate(grp[grp.kind == "clean"])
        results = []
        attacked = grp[grp.kind != "clean"]
        for (attack, eps), sub in attacked.groupby(["attack", "eps"], sort=True):
            scores, kind = _aggregate(sub), str(sub.kind.iloc[0])
            how = (
                {"rate": float(eps), "words_swapped": float(sub.n_swapped.sum() / max(int(sub.n_eligible.sum()), 1))}
                if kind == "contamination"
                else {"eps_abs": float(sub.eps_abs.iloc[0])}
            )
            ratio = scores["ppl"] / clean["ppl"] if clean["ppl"] > 0 else math.nan
            results.append(LMAttackResult(attack=attack, kind=kind, eps=float(eps), **scores, ppl_ratio=ratio, **how))
        cost: Any = ABSENT
        if "fwd" in grp.columns:
            n = max(int((grp.kind == "clean").sum()), 1)
            cost = {
                attack: {"passes": (p := float(sub.fwd.sum() + sub.bwd.sum())), "per_example": p / n}
                for attack, sub in attacked.groupby("attack", sort=False)
            }
        out[label] = LMModelResults(clean=LMScores(**clean), results=results, cost=cost)
    return out


def perplexity_metric(subject: LMSubject) -> str:
    """Which perplexity the rows of ``subject`` give (tables print it next to the numbers)."""
    r = subject.rolling
    kind = getattr(subject.tokenizer, "kind", "")
    unit = "per character (character tokenizer)" if kind == "char" else f"per token ({kind or 'model'} tokenizer)"
    return (
        f"{unit}, whole documents in lm-eval rolling windows (max_length {r.max_length}, stride {r.stride}); also "
        "lm-eval's word_perplexity, byte_perplexity, bits_per_byte"
    )


def scale_definition(norm: Norm, eps_mode: str) -> str:
    if eps_mode == "absolute":
        return "absolute: eps is the per-token radius in embedding space"
    if norm is Norm.L2:
        return "eps_abs = eps * mean L2 norm of the token-embedding rows (per-token L2 ball)"
    return "eps_abs = eps * mean |entry| of the token-embedding matrix (Linf box)"


def tokenizer_digest(tokenizer: Any) -> str:
    """What identifies a tokenization, for run fingerprints (a Hugging Face tokenizer's own digest, else its
    saved form)."""
    own = getattr(tokenizer, "digest", None)
    if isinstance(own, str):
        return own
    to_dict = getattr(tokenizer, "to_dict", None)
    text = repr(sorted(to_dict().items())) if callable(to_dict) else type(tokenizer).__name__
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _announce(docs: Any, n: int, requested: int | None, split_given: bool) -> None:
    """The run's first lines: which documents, how many of them, and why fewer than asked."""
    log.info("data %s", docs.describe(default=not split_given))
    total = len(docs.texts)
    if requested is None or n == total:
        if isinstance(requested, UpTo) and requested > total:
            log.warning(
                "scoring all %d documents of %s's %s split: fewer than --n-examples %d (the default is a cap); pass "
                "--split all for more", total, docs.data, docs.split, int(requested),
            )  # fmt: skip
        else:
            log.info("scoring all %d documents", total)
    else:
        log.info("scoring %d of the %d documents (a seeded sample, --n-examples %d)", n, total, n)


class LMAttack(Measurement):
    """Language models x (embedding attacks, word swap) on the same seeded documents."""

    config: LMAttackConfig

    def prepare(self, ctx: PrepareContext) -> None:
        from ..data import load_documents

        c = self.config
        self.device = ctx.device
        docs = load_documents(c.data, c.split, **({"text_column": c.text_column} if c.text_column else {}))
        self.data_checksum = docs.checksum
        self.subjects = load_lm_subjects(
            c.refs, c.data, c.size, c.checkpoint, c.seed, c.tokenizer, c.base_dir,
            max_length=c.max_length, stride=c.stride, precision=c.precision, device=c.device,
        )  # fmt: skip
        self.ids = ctx.select(len(docs.texts), c.n_examples)
        self.n = len(self.ids)
        _announce(docs, self.n, c.n_examples, c.split != LMAttackConfig.split)
        self.texts = [docs.texts[int(i)] for i in self.ids]
        ctx.record_data("examples", hashlib.sha256("\0".join(self.texts).encode()).hexdigest())
        if any(r > 0 for r in c.rates) and not any(eligible_spans(t)[0] for t in self.texts):
            raise RobfiltError(
                f"the selected {c.data} documents have no eligible words (only stopwords, or no words); "
                "word swap needs content words."
            )
        self.tokens = [[s.tokenizer.encode(t) for t in self.texts] for s in self.subjects]
        self.windows = [[len(s.rolling.windows(t)) for t in toks] for s, toks in zip(self.subjects, self.tokens,
                                                                                     strict=True)]  # fmt: skip
        self.batches = batch_slices(self.n, c.batch_size)
        self._on_device: set[int] = set()
        for mi in range(len(self.subjects)):
            self._check_outputs(mi)

    def _check_outputs(self, mi: int) -> None:
        """Refuse, before any folder is written, a model whose logits are not finite (batch, seq, vocab) with a
        logit for every token its tokenizer makes (token ids are the classes of a language model)."""
        s = self._subject(mi)
        b = probe_batch(s, self.tokens[mi], 2, self.device)
        if not len(b.idx):  # no document has a token: the rows say so (a failed check), nothing to probe
            return
        try:
            with torch.no_grad():
                out = s.module.forward_embeddings(s.module.embed(b.idx))
        except Exception as exc:  # noqa: BLE001 - the user's forward may raise anything
            raise UserCodeError.wrap(s.label, "its first forward pass", exc, "fix it, then rerun") from None
        vocab = require_logits(out, len(b.idx), model=s.label, rank=3, where="the first selected documents")
        if out.shape[1] != b.idx.shape[1]:
            raise RobfiltError(
                f"model {s.label} returns {out.shape[1]} positions for windows of {b.idx.shape[1]} tokens; "
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
            "split": c.split,
            "data_checksum": self.data_checksum,
            "n_examples": self.n,
            "example_ids_sha256": ids_digest(self.ids),
            "windows": self._windows(),
            "replacement": c.replacement,
            "batch_size": c.batch_size,
            "size": c.size,
            "checkpoint": c.checkpoint,
            "sources": [s.source for s in self.subjects],
            "check_masking": c.check_masking,
            **({"precision": c.precision} if c.precision != "fp32" else {}),
        }

    def _windows(self) -> dict[str, dict[str, Any]]:
        """Each model's lm-eval windows and tokenization (recorded, so --resume with others is refused)."""
        return {s.label: {**s.rolling.describe(), "tokenizer": tokenizer_digest(s.tokenizer)} for s in self.subjects}

    def plan(self) -> list[Unit]:
        n_models, n_batches = len(self.subjects), len(self.batches)
        attack = [Unit(mi, a, bi) for mi in range(n_models) for a in self.config.attacks for bi in range(n_batches)]
        return attack + [Unit(mi, "clean", bi) for mi in range(n_models) for bi in range(n_batches)]

    def work(self, unit: Unit) -> int:
        """Window-steps: a window scored once, or through one attack step, is one; word swap counts documents."""
        c = self.config
        windows = sum(self.windows[unit.model][self.batches[unit.batch]])
        if unit.part == "clean":
            return windows
        if unit.part == WORDSWAP:
            return len(c.rates) * len(self.ids[self.batches[unit.batch]])
        return windows * len(c.eps) * (1 if unit.part == "fgsm" else c.steps)

    def _subject(self, mi: int) -> LMSubject:
        s = self.subjects[mi]
        if mi not in self._on_device:
            s.module.to(self.device).eval()
            self._on_device.add(mi)
        return s

    def _docs(self, mi: int, sl: slice) -> Docs:
        return Docs(self.ids[sl].numpy(), self.texts[sl], self.tokens[mi][sl])

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        c, s = self.config, self._subject(unit.model)
        docs = self._docs(unit.model, self.batches[unit.batch])
        if unit.part == WORDSWAP:
            return wordswap_rows(s, docs, c.rates, c.replacement, c.seed, c.batch_size, self.device, tick)
        if unit.part == "clean":
            rows = clean_rows(s, docs, c.batch_size, self.device)
            tick(self.work(unit))
            return rows
        scale = eps_scale(s.module, c.norm, c.eps_mode)
        return attack_rows(s, unit.part, c.eps, c.norm, scale, docs, c.steps, c.step_size, c.seed, c.batch_size,
                           self.device, tick)  # fmt: skip

    def model_checks(self, model: int) -> list[Check]:
        c, s = self.config, self._subject(model)
        probe = probe_batch(s, self.tokens[model], N_PROBE, self.device)
        if not len(probe.idx):
            return []  # no document has a token (its row check fails the run)
        checks = [
            MC.check_eval_deterministic(s.module, s.label, probe.idx),
            LC.check_embedding_gradients(s.module, s.label, probe.idx, probe.targets, probe.mask),
        ]
        if c.check_masking and "pgd" in c.attacks:
            mid = c.eps[len(c.eps) // 2]
            scale = eps_scale(s.module, c.norm, c.eps_mode)
            few = self._docs(model, slice(0, min(N_PROBE, self.n)))
            base, more = (attack_rows(s, "pgd", [mid], c.norm, scale, few, steps, c.step_size, c.seed, c.batch_size,
                                      self.device) for steps in (c.steps, 5 * c.steps))  # fmt: skip
            checks.append(LC.check_more_steps(LC.ppl(base), LC.ppl(more), s.label, 5))
        return checks

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        found = [
            LC.check_tokens_scored(rows, label),
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
        return LMAttackSummary(
            kind="attack", family="lm", data=c.data, split=c.split, n_examples=self.n, seed=c.seed,
            attacks=list(c.attacks), eps=list(c.eps), rates=list(c.rates), norm=c.norm.value, eps_mode=c.eps_mode,
            eps_scale={s.label: eps_scale(s.module, c.norm, c.eps_mode) for s in self.subjects},
            eps_scale_definition=scale_definition(c.norm, c.eps_mode), steps=c.steps, step_size=c.step_size,
            windows={s.label: s.rolling.describe() for s in self.subjects}, replacement=c.replacement,
            precision=c.precision, perplexity_metric={s.label: perplexity_metric(s) for s in self.subjects},
            models=summarize_lm_rows(rows), checks=sorted(checks, key=lambda ch: labels.index(ch.model)),
            checks_summary=ChecksSummary.of(checks),
        )  # fmt: skip


__all__ = ["LMAttack", "ledger", "perplexity_metric", "scale_definition", "summarize_lm_rows"]
