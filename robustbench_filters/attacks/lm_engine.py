"""The evaluation engine for language models: embedding attacks and word-swap contamination on shared text.

Sequences (the "examples"). The test split is cut into disjoint chunks of ``block_size + 1`` *characters*
(``block_size``: the smallest of the models'), the ragged tail dropped; ``n_examples`` chunks are drawn with a
seeded permutation and shared by every model. A chunk is contaminated (word swap) as raw text, then tokenised
by each model's own tokenizer and cut to ``block_size + 1`` tokens; inputs are tokens ``[:-1]``, targets
``[1:]``. Sequences of unequal length (word swap shortens text; BPE needs fewer tokens than characters) are
right-padded and the padding is masked out of every loss and count. Under the char tokenizer a clean chunk is
exactly one full ``block_size`` window.

Metrics per sequence (rows): summed next-token NLL, number of predicted tokens, correctly predicted tokens.
Perplexity is ``exp(sum NLL / sum tokens)`` over the sequences; next-token accuracy likewise.

Embedding attacks (``fgsm``, ``pgd``; see :mod:`.embedding` for the threat model and the relative eps)
perturb the token embeddings of the clean sequence and are scored on its clean targets. As in the image
engine's cascade, eps values run in ascending order and each sequence keeps the worst perturbation found so
far: a perturbation inside a smaller ball is inside every larger one. Word swap (:mod:`.wordswap`) is scored
on the contaminated text itself (the model predicts what it reads).

Work is split into units (model x attack x batch), written atomically and skipped on ``--resume``; every
random draw is seeded from (seed, attack, eps or rate, example id), so results do not depend on the batch.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from .. import checks as C
from ..errors import RobfiltError
from ..progress import ProgressHook, null_progress
from ..results import RunWriter
from . import lm_checks as LC
from .catalogue import Norm, get_attack
from .common import resolve_out
from .embedding import EMBEDDING_ATTACKS, EPS_MODES, EmbeddingAttack, eps_scale, perturbation_size, sequence_nll
from .engine import EvalResult, _ids_hash, _select_examples, unit_seed
from .wordswap import DEFAULT_RATES, DEFAULT_REPLACEMENT, eligible_spans, swap_words, validate_rate

log = logging.getLogger(__name__)

#: Relative eps grid (fraction of a typical token embedding; see :mod:`.embedding`).
DEFAULT_LM_EPS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
DEFAULT_LM_NORM = Norm.L2
DEFAULT_N_SEQUENCES = 64
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
    """Per sequence: summed NLL, predicted tokens, correct tokens."""
    with torch.no_grad():
        logits = model.forward_embeddings(emb)
        nll = sequence_nll(logits, b.targets, b.mask)
        correct = ((logits.argmax(-1) == b.targets).float() * b.mask).sum(1)
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


def _score_rows(model, label, ids, b, emb, kind, attack, eps, norm, **cols) -> pd.DataFrame:
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
        better = torch.from_numpy(nll) >= best_nll
        best_nll = torch.where(better, torch.from_numpy(nll), best_nll)
        best_delta = torch.where(better.to(emb.device).view(-1, 1, 1), delta, best_delta)
        frames.append(
            _score_rows(
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
            _score_rows(
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
    return pd.concat(frames, ignore_index=True)


# --- models and tokenizers --------------------------------------------------------------------------------------


def _tokenizer_for(ref: str, size: str, checkpoint: str) -> Any:
    from ..data import load_tokenizer
    from ..models.checkpoint import zoo_path

    folder = zoo_path(ref, size) if checkpoint == "zoo" else Path(checkpoint)
    if folder.is_file():
        folder = folder.parent
    path = folder / "tokenizer.json"
    if not path.exists():
        raise RobfiltError(f"{folder} has no tokenizer.json; an LM checkpoint must be saved with its tokenizer.")
    return load_tokenizer(path)


def load_lm_subjects(
    models: Sequence[str | nn.Module],
    data: str,
    size: str,
    checkpoint: str | None,
    seed: int,
    tokenizer: Any = None,
) -> list[LMSubject]:
    """Load every model with its tokenizer; ``checkpoint="none"`` builds untrained models over a char tokenizer
    trained on the data's train split (or over ``tokenizer`` when given)."""
    from ..models import create_model
    from ..models.resolve import load_model

    untrained = checkpoint in (None, "none")
    if tokenizer is None and (untrained or any(not isinstance(m, str) for m in models)):
        from ..data import CharTokenizer, load_text

        tokenizer = CharTokenizer.train(load_text(data, split="train"))
    out = []
    for i, m in enumerate(models):
        if not isinstance(m, str):
            label = getattr(getattr(m, "robfilt_spec", None), "name", f"model{i}")
            out.append(LMSubject(label, m.eval(), tokenizer, "module"))
        elif untrained:
            torch.manual_seed(seed)
            out.append(LMSubject(m, create_model(m, size, vocab_size=tokenizer.vocab_size), tokenizer, "untrained"))
        else:
            lm = load_model(m, size, checkpoint, seed)
            tok = tokenizer or _tokenizer_for(m, size, str(checkpoint))
            out.append(LMSubject(lm.label, lm.module.eval(), tok, lm.source))
    for s in out:
        emb = getattr(s.module, "tok_embed", None)
        if isinstance(emb, nn.Embedding) and emb.num_embeddings < s.tokenizer.vocab_size:
            raise RobfiltError(
                f"{s.label}: the tokenizer has {s.tokenizer.vocab_size} tokens but the model only "
                f"{emb.num_embeddings}; use the tokenizer saved with the checkpoint."
            )
    return out


# --- validation, summary ----------------------------------------------------------------------------------------


def _validate(models, attacks, eps, rates, norm, eps_mode, n_examples, steps, step_size, batch_size, device, repl):
    from ..models.resolve import validate_model_ref

    if not models:
        raise RobfiltError("no model given; pass --model NAME[,NAME...].")
    if not attacks:
        raise RobfiltError("no attack given; pass --attack NAME[,NAME...].")
    for m in models:
        if isinstance(m, str) and validate_model_ref(m) != "lm":
            raise RobfiltError(
                f"model {m!r} is not a language model; LM attacks need lm, lm-bsa, lm-grc or lm-bsa-grc."
            )
    for a in attacks:
        info = get_attack(a, "lm")
        if info.kind == "adversarial" and a not in EMBEDDING_ATTACKS:
            raise RobfiltError(f"attack {a!r} has no LM implementation; use one of: {', '.join(EMBEDDING_ATTACKS)}.")
    adversarial = [a for a in attacks if a in EMBEDDING_ATTACKS]
    if eps is not None:
        if not adversarial:
            raise RobfiltError("--eps applies to the embedding attacks fgsm and pgd; word swap takes --rate.")
        if len(eps) == 0:
            raise RobfiltError("--eps is empty; give values like 0.01,0.05.")
        for e in eps:
            if not (e >= 0.0) or not math.isfinite(e):
                raise RobfiltError(f"eps {e} is negative or not finite; LM eps is a (relative) embedding radius.")
    if rates is not None:
        if "wordswap" not in attacks:
            raise RobfiltError("--rate applies to the text attack wordswap; add --attack wordswap.")
        if len(rates) == 0:
            raise RobfiltError("--rate is empty; give fractions like 0,0.05,0.1.")
        for r in rates:
            validate_rate(r)
    if eps_mode not in EPS_MODES:
        raise RobfiltError(f"unknown eps mode {eps_mode!r}; use relative or absolute.")
    if n_examples is not None and n_examples <= 0:
        raise RobfiltError(f"--n-examples must be positive, got {n_examples}.")
    if steps <= 0:
        raise RobfiltError(f"--steps must be positive, got {steps}.")
    if step_size is not None and not (step_size > 0 and math.isfinite(step_size)):
        raise RobfiltError(f"--step-size must be a positive number, got {step_size}.")
    if batch_size <= 0:
        raise RobfiltError(f"--batch-size must be positive, got {batch_size}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")
    if device != "cpu" and not device.startswith("cuda"):
        raise RobfiltError(f"unknown --device {device!r}; use cpu or cuda.")
    if not repl:
        raise RobfiltError("the word-swap replacement is empty; give a token such as AAA.")
    try:
        return Norm(norm) if norm else DEFAULT_LM_NORM
    except ValueError:
        raise RobfiltError(f"unknown --norm {norm!r}; use linf or l2.") from None


def _aggregate(rows: pd.DataFrame) -> dict[str, Any]:
    n_tok = int(rows.n_tokens.sum())
    nll = float(rows.nll_sum.sum()) / n_tok if n_tok else float("nan")
    seq_ppl = np.exp(rows.nll_sum / rows.n_tokens.clip(lower=1))
    return {
        "ppl": math.exp(nll) if n_tok else float("nan"),
        "acc": float(rows.correct_tokens.sum()) / n_tok if n_tok else float("nan"),
        "nll": nll,
        "n_tokens": n_tok,
        "n_sequences": int(len(rows)),
        "ppl_median_seq": float(np.median(seq_ppl)) if len(rows) else float("nan"),
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


def _row_checks(rows: pd.DataFrame, label: str) -> list[C.Check]:
    found = [
        LC.check_rate0_equals_clean(rows, label),
        LC.check_eps0_equals_clean(rows, label),
        LC.check_contamination_rate(rows, label),
        LC.check_embedding_ball(rows, label),
        LC.check_ppl_monotone(rows, label),
        LC.check_pgd_vs_fgsm(rows, label),
    ]
    return [c for c in found if c is not None]


def _masking_check(subject, b, eps_grid, norm, scale, steps, step_size, seed) -> C.Check:
    """--check-masking: 5x PGD steps at the middle eps must not lower perplexity beyond noise."""
    mid = sorted(eps_grid)[len(eps_grid) // 2]
    ids = torch.arange(len(b.idx))
    base = attack_rows(subject, "pgd", [mid], norm, scale, b, ids, steps, step_size, seed)
    more = attack_rows(subject, "pgd", [mid], norm, scale, b, ids, 5 * steps, step_size, seed)
    return LC.check_more_steps(LC.ppl(base), LC.ppl(more), subject.label, 5)


# --- the engine -------------------------------------------------------------------------------------------------


def evaluate_lm(
    models: Sequence[str | nn.Module],
    attacks: Sequence[str] = ("pgd",),
    eps: Sequence[float] | None = None,
    data: str = "austen",
    n_examples: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    *,
    norm: str | None = None,
    steps: int = 20,
    step_size: float | None = None,
    batch_size: int = 32,
    size: str = "micro",
    checkpoint: str | None = "zoo",
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    check_masking: bool = False,
    data_root: str | None = None,
    progress: ProgressHook | None = None,
    rates: Sequence[float] | None = None,
    replacement: str = DEFAULT_REPLACEMENT,
    eps_mode: str = "relative",
    tokenizer: Any = None,
    **_: Any,
) -> EvalResult:
    """Evaluate language models under embedding attacks and word-swap contamination on the same text.

    Args:
        models: LM registry names (``lm``, ``lm-bsa``, ``lm-grc``, ``lm-bsa-grc``) or CausalLM modules.
        attacks: ``fgsm``, ``pgd`` (embedding space) and/or ``wordswap`` (contamination).
        eps: embedding radii, relative to the embedding scale unless ``eps_mode="absolute"``
            (default grid :data:`DEFAULT_LM_EPS`).
        data: ``austen`` (bundled) or ``text:<path>``; the test split is evaluated.
        n_examples: sequences drawn (seeded) from the test split (default: 64, or all if fewer).
        norm: ``l2`` (per-token ball, the default) or ``linf``.
        step_size: PGD step in the same unit as eps (relative by default); default 0.15 * eps.
        rates: word-swap fractions of eligible words (default :data:`.wordswap.DEFAULT_RATES`).
        replacement: the token that replaces swapped words.
        tokenizer: overrides the tokenizer (modules and ``checkpoint="none"``).
        out: run folder; None keeps everything in a temporary folder.
    """
    del data_root  # text specs carry their own paths
    progress = progress or null_progress
    norm_e = _validate(
        models, attacks, eps, rates, norm, eps_mode, n_examples, steps, step_size, batch_size, device, replacement
    )
    adversarial = [a for a in attacks if a in EMBEDDING_ATTACKS]
    eps_grid = sorted(eps) if eps is not None else (list(DEFAULT_LM_EPS) if adversarial else [])
    rate_grid = sorted(rates) if rates is not None else (list(DEFAULT_RATES) if "wordswap" in attacks else [])
    from ..data import load_text

    text = load_text(data, split="test")
    subjects = load_lm_subjects(models, data, size, checkpoint, seed, tokenizer)
    block = min(int(s.module.config.block_size) for s in subjects)
    chunks_all = text_chunks(text, block + 1)
    if not chunks_all:
        raise RobfiltError(f"the {data} test text has {len(text)} characters, fewer than one sequence ({block + 1}).")
    n = min(DEFAULT_N_SEQUENCES, len(chunks_all)) if n_examples is None else n_examples
    ids = _select_examples(len(chunks_all), n, seed)
    chunks = [chunks_all[int(i)] for i in ids]
    if any(r > 0 for r in rate_grid) and not any(eligible_spans(c)[0] for c in chunks):
        raise RobfiltError(
            f"the selected {data} test text has no eligible words (only stopwords, or no words); "
            "word swap needs content words."
        )
    labels = [s.label for s in subjects]
    if len(set(labels)) != len(labels):
        raise RobfiltError(f"model labels repeat ({', '.join(labels)}); list each model once.")
    config = {
        "models": labels,
        "attacks": list(attacks),
        "eps": eps_grid,
        "rates": rate_grid,
        "norm": norm_e.value,
        "eps_mode": eps_mode,
        "steps": steps,
        "step_size": step_size,
        "data": data,
        "data_checksum": hashlib.sha256(text.encode()).hexdigest()[:16],
        "n_examples": n,
        "example_ids_sha256": _ids_hash(ids),
        "seq_chars": block + 1,
        "replacement": replacement,
        "batch_size": batch_size,
        "size": size,
        "checkpoint": checkpoint,
        "sources": [s.source for s in subjects],
        "check_masking": check_masking,
    }
    out, tmp = resolve_out(out)
    try:
        dev = torch.device(device)
        batches = [slice(i, i + batch_size) for i in range(0, n, batch_size)]
        total, done = len(subjects) * len(batches) * (1 + len(attacks)), 0
        all_checks: list[C.Check] = []
        scales: dict[str, float] = {}
        with RunWriter(
            out, "attack", config, seed=seed, resume=resume, overwrite=overwrite, extra={"family": "lm"}
        ) as writer:
            for mi, subj in enumerate(subjects):
                model = subj.module.to(dev).eval()
                scale = eps_scale(model, norm_e, eps_mode)
                scales[subj.label] = scale
                for bi, sl in enumerate(batches):
                    bid, btexts = ids[sl], chunks[sl]
                    b = encode_batch(subj.tokenizer, btexts, block + 1, dev)
                    key = f"m{mi}-clean-b{bi:04d}"
                    if not writer.is_done(key):
                        writer.write_part(
                            key, _score_rows(model, subj.label, bid, b, model.embed(b.idx), "clean", "clean", 0.0, "")
                        )
                    done += 1
                    progress("attack", done, total, f"{subj.label} clean")
                    for attack in attacks:
                        key = f"m{mi}-{attack}-b{bi:04d}"
                        if not writer.is_done(key):
                            if attack == "wordswap":
                                rows = wordswap_rows(subj, btexts, bid, rate_grid, replacement, block + 1, seed, dev)
                            else:
                                rows = attack_rows(
                                    subj, attack, eps_grid, norm_e, scale, b, bid, steps, step_size, seed
                                )
                            writer.write_part(key, rows)
                        done += 1
                        progress("attack", done, total, f"{subj.label} {attack}")
                probe = encode_batch(subj.tokenizer, chunks[:8], block + 1, dev)
                all_checks.append(C.check_eval_deterministic(model, subj.label, probe.idx))
                all_checks.append(LC.check_embedding_gradients(model, subj.label, probe.idx, probe.targets, probe.mask))
                if check_masking and "pgd" in adversarial:
                    all_checks.append(_masking_check(subj, probe, eps_grid, norm_e, scale, steps, step_size, seed))
            rows = writer.rows()
            for label in labels:
                all_checks += _row_checks(rows, label)
            summary = {
                "kind": "attack",
                "family": "lm",
                "data": data,
                "n_examples": n,
                "seed": seed,
                "attacks": list(attacks),
                "eps": eps_grid,
                "rates": rate_grid,
                "norm": norm_e.value,
                "eps_mode": eps_mode,
                "eps_scale": scales,
                "eps_scale_definition": _scale_definition(norm_e, eps_mode),
                "steps": steps,
                "step_size": step_size if step_size is not None else "0.15*eps",
                "seq_chars": block + 1,
                "replacement": replacement,
                "models": summarize_lm_rows(rows),
                "checks": [c.to_dict() for c in sorted(all_checks, key=lambda c: labels.index(c.model))],
                "checks_summary": C.summarize(all_checks),
            }
            writer.finish(rows, summary)
        return EvalResult(rows=rows, summary=summary, out=None if tmp else Path(out))
    finally:
        if tmp is not None:
            tmp.cleanup()


def _scale_definition(norm: Norm, eps_mode: str) -> str:
    if eps_mode == "absolute":
        return "absolute: eps is the per-token radius in embedding space"
    if norm is Norm.L2:
        return "eps_abs = eps * mean L2 norm of the token-embedding rows (per-token L2 ball)"
    return "eps_abs = eps * mean |entry| of the token-embedding matrix (Linf box)"
