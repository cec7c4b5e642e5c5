"""Rows of language-model units: documents scored on lm-eval's rolling token windows, clean, attacked or contaminated.

Examples are whole documents (:mod:`robustbench_filters.data.documents`). Each model tokenises a document with its
own tokenizer and cuts it into lm-eval's rolling windows (:class:`robustbench_filters.models.hf.rolling.Rolling`:
``max_length`` inputs, ``stride`` new tokens each, the first token predicted from the tokenizer's prefix token), so
every token is predicted exactly once and nothing is cut mid-word. A row is one (model, document, attack, eps or
rate): the sums over the document's windows.

- Clean rows come from :func:`robustbench_filters.models.hf.perplexity.score_documents`, the one metric code that
  ``robfilt train`` writes into its cards too.
- Embedding attacks (``fgsm``, ``pgd``; :mod:`.embedding`) perturb each window's input embeddings, its context
  included, and score its predicted tokens; eps values run in ascending order and each window keeps the worst
  perturbation found so far.
- Word swap (:mod:`.wordswap`) contaminates the raw document, which is then tokenised and scored like a clean one.

Rows also carry lm-eval's denominators of the clean document (words, UTF-8 bytes) and the compute ledger: the
forward and backward passes spent on the document at that eps or rate (one forward per window to score it, and per
attack step one forward and one backward per window). Every random draw is seeded from (seed, attack, eps or rate,
document id, and the window index when it is not 0), so rows do not depend on the batch. ``batch_size`` windows go
through the model at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..models.hf.perplexity import per_document, score_documents
from ..models.hf.rolling import Rolling, Window, count_bytes, count_words, window_rows
from ..models.lm_batch import RowScores, score_batch, window_batch
from ..runs.measurement import Tick
from ..runs.units import unit_seed
from .catalogue import Norm
from .embedding import EmbeddingAttack, perturbation_size
from .wordswap import swap_words

ROW_COLUMNS = (
    "model",
    "example_id",
    "kind",
    "attack",
    "eps",
    "norm",
    "nll_sum",
    "n_tokens",
    "correct_tokens",
    "pert_norm",
    "eps_abs",
    "n_eligible",
    "n_swapped",
    "n_words",
    "n_bytes",
    "n_windows",
    "fwd",
    "bwd",
    "cost_exact",
)


@dataclass
class LMSubject:
    """A language model ready for evaluation: the tokenizer its checkpoint was trained with and its windows."""

    label: str
    module: nn.Module
    tokenizer: Any
    source: str
    rolling: Rolling


@dataclass(frozen=True)
class Docs:
    """The documents of one unit: their example ids, texts and this model's tokens."""

    ids: np.ndarray
    texts: Sequence[str]
    tokens: Sequence[Sequence[int]]

    @property
    def counts(self) -> dict[str, np.ndarray]:
        """lm-eval's denominators of each clean document: words (as its wikitext task counts them), UTF-8 bytes."""
        return {
            "n_words": np.array([count_words(t) for t in self.texts], dtype=np.int64),
            "n_bytes": np.array([count_bytes(t) for t in self.texts], dtype=np.int64),
        }


def _frame(label: str, ids: np.ndarray, kind: str, attack: str, eps: float, norm: str, **cols: Any) -> pd.DataFrame:
    n = len(ids)
    base = {
        "model": label,
        "example_id": np.asarray(ids, dtype=np.int64),
        "kind": kind,
        "attack": attack,
        "eps": float(eps),
        "norm": norm,
        "pert_norm": np.zeros(n),
        "eps_abs": np.full(n, np.nan),
        "n_eligible": np.zeros(n, dtype=np.int64),
        "n_swapped": np.zeros(n, dtype=np.int64),
        "n_words": np.zeros(n, dtype=np.int64),
        "n_bytes": np.zeros(n, dtype=np.int64),
        "bwd": np.zeros(n),
        "cost_exact": True,
    }
    base.update(cols)
    return pd.DataFrame(base)[list(ROW_COLUMNS)]


def scored_rows(
    subject: LMSubject,
    docs: Docs,
    kind: str,
    attack: str,
    eps: float,
    batch_size: int,
    device: torch.device,
    **cols: Any,
) -> pd.DataFrame:
    """Rows of documents scored unperturbed (clean, or the contaminated text of ``docs``) with the one metric code."""
    s = score_documents(subject.module, docs.tokens, subject.rolling, batch_size, device)
    return _frame(subject.label, docs.ids, kind, attack, eps, "", nll_sum=s.nll, n_tokens=s.n_tokens,
                  correct_tokens=s.correct, n_windows=s.n_windows, fwd=s.fwd, **cols)  # fmt: skip


def clean_rows(subject: LMSubject, docs: Docs, batch_size: int, device: torch.device) -> pd.DataFrame:
    return scored_rows(subject, docs, "clean", "clean", 0.0, batch_size, device, **docs.counts)


@dataclass
class _Best:
    """A chunk of windows' worst perturbation so far and its scores."""

    delta: torch.Tensor
    scores: RowScores | None = None

    def update(self, delta: torch.Tensor, scores: RowScores) -> None:
        if self.scores is None:
            better = torch.ones(len(scores.nll), dtype=torch.bool)
        else:  # a NaN (no prediction) is kept, so its row shows it
            better = (scores.nll >= self.scores.nll) | scores.nll.isnan()
        old = self.scores or scores
        self.scores = RowScores(*(torch.where(better, getattr(scores, k), getattr(old, k))
                                  for k in ("nll", "n_tokens", "correct")))  # fmt: skip
        self.delta = torch.where(better.to(delta.device).view(-1, 1, 1), delta, self.delta)


def attack_rows(
    subject: LMSubject,
    attack: str,
    eps_grid: Sequence[float],
    norm: Norm,
    scale: float,
    docs: Docs,
    steps: int,
    step_size: float | None,
    seed: int,
    batch_size: int,
    device: torch.device,
    tick: Tick | None = None,
) -> pd.DataFrame:
    """One embedding attack over an ascending eps grid on every window of ``docs``, ``batch_size`` windows at a
    time; a document's row at an eps sums its windows' worst perturbations so far."""
    model, grid = subject.module, sorted(eps_grid)
    windows = window_rows(docs.tokens, subject.rolling)
    owners = np.array([w.doc for w in windows], dtype=np.int64)
    keys = ("nll", "n_tokens", "correct", "pert", "fwd", "bwd")
    per_eps = {eps: {k: np.zeros(len(windows)) for k in keys} for eps in grid}
    n_steps = 1 if attack == "fgsm" else steps
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        b = window_batch(chunk, device)
        emb = model.embed(b.idx).detach()
        best = _Best(torch.zeros_like(emb))
        for k, eps in enumerate(grid):
            atk = EmbeddingAttack(attack, norm, eps * scale, steps=steps,
                                  step_size=None if step_size is None else step_size * scale)  # fmt: skip
            gens = [torch.Generator().manual_seed(unit_seed(*_key(seed, attack, norm, eps, docs.ids[w.doc], w)))
                    for w in chunk]  # fmt: skip
            where = f"eps {eps:g} ({k + 1}/{len(grid)})"
            on_step = None if tick is None else _step_ticker(tick, len(chunk), where, n_steps)
            delta = atk.perturb(model, emb, b.targets, b.mask, gens, support=b.valid, on_step=on_step)
            ran = n_steps if eps * scale > 0 else 0
            if tick is not None and not ran:
                tick(len(chunk) * n_steps, where)
            best.update(delta, score_batch(model, emb + delta, b))
            out, sl = per_eps[eps], slice(start, start + len(chunk))
            assert best.scores is not None
            out["nll"][sl], out["n_tokens"][sl], out["correct"][sl] = (
                best.scores.nll.numpy(), best.scores.n_tokens.numpy(), best.scores.correct.numpy())  # fmt: skip
            out["pert"][sl] = perturbation_size(best.delta, norm).double().cpu().numpy()
            out["fwd"][sl], out["bwd"][sl] = ran + 1, ran
    n = len(docs.ids)
    frames = []
    for eps in grid:
        v = per_eps[eps]
        pert = np.zeros(n)
        np.maximum.at(pert, owners, v["pert"])
        frames.append(
            _frame(
                subject.label,
                docs.ids,
                "adversarial",
                attack,
                eps,
                norm.value,
                nll_sum=per_document(v["nll"], owners, n, np.float64),
                n_tokens=per_document(v["n_tokens"], owners, n, np.int64),
                correct_tokens=per_document(v["correct"], owners, n, np.int64),
                pert_norm=pert,
                eps_abs=np.full(n, eps * scale),
                n_windows=per_document(np.ones(len(owners)), owners, n, np.int64),
                fwd=per_document(v["fwd"], owners, n, np.float64),
                bwd=per_document(v["bwd"], owners, n, np.float64),
                **docs.counts,
            )  # fmt: skip
        )
    return pd.concat(frames, ignore_index=True)


def _key(seed: int, attack: str, norm: Norm, eps: float, doc_id: Any, w: Window) -> tuple[Any, ...]:
    """What seeds a window's random start (the window index only when it is not 0, as before windows existed)."""
    return (seed, attack, norm.value, f"{eps:.6g}", int(doc_id), *((w.index,) if w.index else ()))


def _step_ticker(tick: Tick, n_windows: int, where: str, steps: int) -> Callable[[int], None]:
    def on_step(step: int) -> None:
        tick(n_windows, f"{where} step {step}/{steps}")

    return on_step


def wordswap_rows(
    subject: LMSubject,
    docs: Docs,
    rates: Sequence[float],
    replacement: str,
    seed: int,
    batch_size: int,
    device: torch.device,
    tick: Tick | None = None,
) -> pd.DataFrame:
    """Word swap at every rate: contaminate each raw document, tokenise, score it like a clean one."""
    frames = []
    for k, rate in enumerate(sorted(rates)):
        res = [swap_words(t, rate, unit_seed(seed, "wordswap", int(i)), replacement)
               for t, i in zip(docs.texts, docs.ids, strict=True)]  # fmt: skip
        swapped = Docs(docs.ids, [r.text for r in res], [subject.tokenizer.encode(r.text) for r in res])
        frames.append(
            scored_rows(
                subject,
                swapped,
                "contamination",
                "wordswap",
                rate,
                batch_size,
                device,
                pert_norm=np.array([r.fraction for r in res]),
                n_eligible=np.array([r.n_eligible for r in res], dtype=np.int64),
                n_swapped=np.array([r.n_swapped for r in res], dtype=np.int64),
                **docs.counts,
            )  # fmt: skip
        )
        if tick is not None:
            tick(len(docs.ids), f"rate {rate:g} ({k + 1}/{len(rates)})")
    return pd.concat(frames, ignore_index=True)


def probe_batch(subject: LMSubject, tokens: Sequence[Sequence[int]], n: int, device: torch.device) -> Any:
    """The first ``n`` windows of some documents, as one batch (the model-level checks probe it)."""
    return window_batch(window_rows(tokens, subject.rolling)[:n], device)


__all__ = [
    "ROW_COLUMNS",
    "Docs",
    "LMSubject",
    "attack_rows",
    "clean_rows",
    "probe_batch",
    "scored_rows",
    "wordswap_rows",
]
