"""Rows of language-model units: text chunks, token batches, scoring, embedding attacks and word swap.

Sequences (the "examples"): the test split is cut into disjoint chunks of ``block_size + 1`` *characters*
(``block_size``: the smallest of the models'), the ragged tail dropped. A chunk is contaminated (word swap) as raw
text, then tokenised by each model's own tokenizer and cut to ``block_size + 1`` tokens; inputs are tokens
``[:-1]``, targets ``[1:]``. Sequences of unequal length (word swap shortens text; BPE needs fewer tokens than
characters) are right-padded and the padding is masked out of every loss and count.

Metrics per sequence (rows): summed next-token NLL, number of predicted tokens, correctly predicted tokens.
Embedding attacks (``fgsm``, ``pgd``; see :mod:`.embedding`) perturb the token embeddings of the clean sequence
and are scored on its clean targets; eps values run in ascending order and each sequence keeps the worst
perturbation found so far. Word swap (:mod:`.wordswap`) is scored on the contaminated text itself. Every random
draw is seeded from (seed, attack, eps or rate, example id), so rows do not depend on the batch.
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
from ..runs.units import unit_seed
from .catalogue import Norm
from .embedding import EmbeddingAttack, perturbation_size, sequence_nll
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
)


@dataclass
class LMSubject:
    """A language model ready for evaluation, with the tokenizer its checkpoint was trained with."""

    label: str
    module: nn.Module
    tokenizer: Any
    source: str


@dataclass
class Batch:
    idx: torch.Tensor  # (B, T) inputs, padded with 0
    targets: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float, 1 on real positions


def text_chunks(text: str, chunk_chars: int) -> list[str]:
    """Disjoint chunks of ``chunk_chars`` characters; the ragged tail is dropped."""
    return [text[i : i + chunk_chars] for i in range(0, len(text) - chunk_chars + 1, chunk_chars)]


def encode_batch(tokenizer: Any, texts: Sequence[str], max_tokens: int, device: torch.device) -> Batch:
    """Tokenise, cut to ``max_tokens`` tokens, shift into inputs/targets and right-pad with a mask."""
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


def _score(model: nn.Module, emb: torch.Tensor, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sequence: summed NLL, predicted tokens, correct tokens.

    A sequence whose logits are not a finite (batch, seq, vocab) tensor at its real positions is no prediction:
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
        else:  # a tuple, a dict or another shape mid-run: no sequence of the batch has a prediction
            nll = torch.full((len(b.idx),), float("nan"))
            correct = torch.zeros(len(b.idx))
    return (
        nll.double().cpu().numpy(),
        b.mask.sum(1).cpu().numpy().astype(np.int64),
        correct.cpu().numpy().astype(np.int64),
    )


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
) -> pd.DataFrame:
    """One embedding attack over an ascending eps grid; each sequence keeps its worst perturbation so far."""
    model, label = subject.module, subject.label
    emb = model.embed(b.idx).detach()
    best_delta = torch.zeros_like(emb)
    best_nll = torch.full((len(ids),), -math.inf, dtype=torch.float64)
    frames = []
    for eps in sorted(eps_grid):
        eps_abs = eps * scale
        atk = EmbeddingAttack(
            attack, norm, eps_abs, steps=steps, step_size=None if step_size is None else step_size * scale
        )
        gens = [torch.Generator().manual_seed(unit_seed(seed, attack, norm.value, f"{eps:.6g}", int(i))) for i in ids]
        delta = atk.perturb(model, emb, b.targets, b.mask, gens)
        nll, _, _ = _score(model, emb + delta, b)
        nll_t = torch.from_numpy(nll)
        better = (nll_t >= best_nll) | nll_t.isnan()  # a NaN (no prediction) is kept, so its row shows it
        best_nll = torch.where(better, nll_t, best_nll)
        best_delta = torch.where(better.to(emb.device).view(-1, 1, 1), delta, best_delta)
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
                pert_norm=perturbation_size(best_delta, norm).double().cpu().numpy(),
                eps_abs=np.full(len(ids), eps_abs),
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
        b = encode_batch(subject.tokenizer, [r.text for r in res], max_tokens, device)
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
            )
        )
        if tick is not None:
            tick(1)
    return pd.concat(frames, ignore_index=True)
