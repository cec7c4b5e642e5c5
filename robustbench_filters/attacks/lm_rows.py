"""Rows of language-model units: text chunks, token batches, scoring, embedding attacks and word swap.

Sequences (the "examples"): the test split is cut into disjoint chunks of ``block_size + 1`` *characters*
(``block_size``: the smallest of the models'), the ragged tail dropped. A chunk is contaminated (word swap) as raw
text, then tokenised by each model's own tokenizer and cut to ``block_size + 1`` tokens; inputs are tokens
``[:-1]``, targets ``[1:]``. Sequences of unequal length (word swap shortens text; BPE needs fewer tokens than
characters) are right-padded and the padding is masked out of every loss and count.

Hugging Face models (``LMSubject.rolling`` set, :mod:`robustbench_filters.models.hf`) score a chunk as lm-eval scores a
document instead: every token is predicted, the first from the tokenizer's prefix token (BOS, else EOS), in lm-eval's
rolling windows of at most ``max_length`` inputs (:mod:`robustbench_filters.models.hf.rolling`). A batch then holds one
row per window (``Batch.owner`` names its sequence); a sequence's numbers are the sums over its windows, and its
rows also carry the clean chunk's words and UTF-8 bytes (lm-eval's denominators; 0 for per-token models).

Metrics per sequence (rows): summed next-token NLL, number of predicted tokens, correctly predicted tokens.
Embedding attacks (``fgsm``, ``pgd``; see :mod:`.embedding`) perturb the token embeddings of the clean sequence
(of each window, its context included) and are scored on its clean targets; eps values run in ascending order and
each sequence (window) keeps the worst perturbation found so far. Word swap (:mod:`.wordswap`) is scored on the
contaminated text itself. Every random draw is seeded from (seed, attack, eps or rate, example id, and the window
index when it is not 0), so rows do not depend on the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks.logits import predictions
from ..models.lm_batch import Batch, sequence_nll, window_batch
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
)


@dataclass
class LMSubject:
    """A language model ready for evaluation, with the tokenizer its checkpoint was trained with."""

    label: str
    module: nn.Module
    tokenizer: Any
    source: str
    rolling: Any = None  # hf.rolling.Rolling: lm-eval's windows; None: one shifted sequence per chunk


def text_chunks(text: str, chunk_chars: int) -> list[str]:
    """Disjoint chunks of ``chunk_chars`` characters; the ragged tail is dropped."""
    return [text[i : i + chunk_chars] for i in range(0, len(text) - chunk_chars + 1, chunk_chars)]


def encode_batch(
    tokenizer: Any, texts: Sequence[str], max_tokens: int, device: torch.device, rolling: Any = None
) -> Batch:
    """Tokenise, cut to ``max_tokens`` tokens, shift into inputs/targets and right-pad with a mask; with
    ``rolling``, lm-eval's windows of every text instead (a text too short for any token gets an empty row)."""
    if rolling is not None:
        from ..models.hf.rolling import Window, window_rows

        lists = [tokenizer.encode(t) for t in texts]
        rows = window_rows(lists, rolling)
        have = {w.doc for w in rows}
        rows += [Window(d, 0, [rolling.prefix_token_id], [0], 0) for d in range(len(texts)) if d not in have]
        return window_batch(sorted(rows, key=lambda w: (w.doc, w.index)), device)
    seqs = [tokenizer.encode(t)[:max_tokens] for t in texts]
    width = max(1, max(len(s) for s in seqs) - 1)
    idx = torch.zeros(len(seqs), width, dtype=torch.long)
    tgt = torch.zeros_like(idx)
    mask = torch.zeros(len(seqs), width)
    for i, s in enumerate(seqs):
        n = max(0, len(s) - 1)
        if n:
            idx[i, :n] = torch.tensor(s[:-1])
            tgt[i, :n] = torch.tensor(s[1:])
            mask[i, :n] = 1.0
    return Batch(idx.to(device), tgt.to(device), mask.to(device))


def _score_rows(model: nn.Module, emb: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (sequence or window): summed NLL (float64), scored tokens, correct tokens.

    A row whose logits are not a finite (batch, seq, vocab) tensor at its scored positions is no prediction:
    NaN NLL and 0 correct tokens (never argmax's token 0), which fails the "model outputs finite" check.
    """
    with torch.no_grad():
        out = model.forward_embeddings(emb)
        if (
            isinstance(out, torch.Tensor)
            and out.is_floating_point()
            and out.dim() == 3
            and out.shape[:2] == b.idx.shape
        ):
            bad = ((~torch.isfinite(out).all(-1)) & (b.mask > 0)).any(1)
            nll = torch.where(bad, float("nan"), sequence_nll(out, b.targets, b.mask))
            correct = ((predictions(out) == b.targets).float() * b.mask).sum(1) * ~bad
        else:  # a tuple, a dict or another shape mid-run: no row of the batch has a prediction
            nll = torch.full((len(b.idx),), float("nan"), device=b.mask.device)
            correct = torch.zeros(len(b.idx), device=b.mask.device)
    return nll.double().cpu(), b.mask.sum(1).cpu(), correct.cpu()


def _score(model: nn.Module, emb: torch.Tensor, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sequence: summed NLL, predicted tokens, correct tokens (a NaN window makes its sequence NaN)."""
    nll, n_tok, correct = (b.per_sequence(v) for v in _score_rows(model, emb, b))
    return nll.numpy(), n_tok.numpy().astype(np.int64), correct.numpy().astype(np.int64)


def document_counts(subject: LMSubject, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """lm-eval's denominators of each clean chunk (words, UTF-8 bytes) for rolling-window models, else nothing."""
    if subject.rolling is None:
        return {}
    from ..models.hf.rolling import count_bytes, count_words

    return {
        "n_words": np.array([count_words(t) for t in texts], dtype=np.int64),
        "n_bytes": np.array([count_bytes(t) for t in texts], dtype=np.int64),
    }


def _frame(label: str, ids: torch.Tensor, kind: str, attack: str, eps: float, norm: str, **cols: Any) -> pd.DataFrame:
    n = len(ids)
    base = {
        "model": label,
        "example_id": ids.numpy().astype(np.int64),
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
    }
    base.update(cols)
    return pd.DataFrame(base)[list(ROW_COLUMNS)]


def score_rows(model, label, ids, b, emb, kind, attack, eps, norm, **cols) -> pd.DataFrame:
    """Score one batch of sequences (given embeddings) into rows."""
    nll, n_tok, correct = _score(model, emb, b)
    return _frame(label, ids, kind, attack, eps, norm, nll_sum=nll, n_tokens=n_tok, correct_tokens=correct, **cols)


def attack_rows(
    subject: LMSubject,
    attack: str,
    eps_grid: Sequence[float],
    norm: Norm,
    scale: float,
    b: Batch,
    ids: torch.Tensor,
    steps: int,
    step_size: float | None,
    seed: int,
    tick: Callable[[int], None] | None = None,
    **cols: Any,
) -> pd.DataFrame:
    """One embedding attack over an ascending eps grid; each sequence (or window) keeps its worst perturbation so
    far. A window is attacked on its own inputs (context included) and scored on its scored tokens."""
    model, label = subject.module, subject.label
    emb = model.embed(b.idx).detach()
    row_ids = ids if b.owner is None else ids[b.owner.cpu()]
    windows = [0] * len(row_ids) if b.window is None else b.window.tolist()
    best_delta = torch.zeros_like(emb)
    best_nll = torch.full((len(row_ids),), -math.inf, dtype=torch.float64)
    frames = []
    for eps in sorted(eps_grid):
        eps_abs = eps * scale
        atk = EmbeddingAttack(
            attack, norm, eps_abs, steps=steps, step_size=None if step_size is None else step_size * scale
        )
        keys = [
            (seed, attack, norm.value, f"{eps:.6g}", int(i), *((w,) if w else ()))
            for i, w in zip(row_ids, windows, strict=True)
        ]
        gens = [torch.Generator().manual_seed(unit_seed(*k)) for k in keys]
        delta = atk.perturb(model, emb, b.targets, b.mask, gens, support=b.valid)
        nll, _, _ = _score_rows(model, emb + delta, b)
        better = (nll >= best_nll) | nll.isnan()  # a NaN (no prediction) is kept, so its row shows it
        best_nll = torch.where(better, nll, best_nll)
        best_delta = torch.where(better.to(emb.device).view(-1, 1, 1), delta, best_delta)
        size = b.per_sequence(perturbation_size(best_delta, norm).double().cpu(), "amax")
        frames.append(
            score_rows(
                model,
                label,
                ids,
                b,
                emb + best_delta,
                "adversarial",
                attack,
                eps,
                norm.value,
                pert_norm=size.numpy(),
                eps_abs=np.full(len(ids), eps_abs),
                **cols,
            )
        )
        if tick is not None:
            tick(1)
    return pd.concat(frames, ignore_index=True)


def wordswap_rows(
    subject: LMSubject,
    chunks: Sequence[str],
    ids: torch.Tensor,
    rates: Sequence[float],
    replacement: str,
    max_tokens: int,
    seed: int,
    device: torch.device,
    tick: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Word swap at every rate: contaminate each raw chunk, tokenise, score on the contaminated text."""
    model = subject.module
    frames = []
    for rate in sorted(rates):
        res = [
            swap_words(t, rate, unit_seed(seed, "wordswap", int(i)), replacement)
            for t, i in zip(chunks, ids, strict=True)
        ]
        b = encode_batch(subject.tokenizer, [r.text for r in res], max_tokens, device, subject.rolling)
        frames.append(
            score_rows(
                model,
                subject.label,
                ids,
                b,
                model.embed(b.idx),
                "contamination",
                "wordswap",
                rate,
                "",
                pert_norm=np.array([r.fraction for r in res]),
                n_eligible=np.array([r.n_eligible for r in res], dtype=np.int64),
                n_swapped=np.array([r.n_swapped for r in res], dtype=np.int64),
                **document_counts(subject, chunks),
            )
        )
        if tick is not None:
            tick(1)
    return pd.concat(frames, ignore_index=True)
