"""robfilt's perplexities of Hugging Face models equal lm-eval's, computed with lm-eval's own functions.

lm-eval (lm-evaluation-harness) is a test dependency: its rolling windows (``get_rolling_token_windows``,
``make_disjoint_window``), its wikitext task's word and byte counts (``process_results``) and its aggregations
(``weighted_perplexity``, ``bits_per_byte``) give the reference. The model is scored window by window, as lm-eval's
``_loglikelihood_tokens`` does (inputs ``(context + continuation)[:-1]``, the continuation's log-probabilities).
"""

from __future__ import annotations

import math

import pytest
import torch
from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
from lm_eval.tasks.wikitext.preprocess_wikitext import process_results
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from robustbench_filters.attacks.lm_rows import text_chunks
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_text
from robustbench_filters.models.hf import perplexity as P
from robustbench_filters.models.hf.load import load_hf


@pytest.mark.parametrize("n_tokens", [0, 1, 5, 16, 17, 40, 97])
@pytest.mark.parametrize(("max_len", "context"), [(16, 1), (16, 5), (16, 16), (8, 3), (1, 1)])
def test_windows_are_lm_evals(n_tokens: int, max_len: int, context: int) -> None:
    tokens = list(range(100, 100 + n_tokens))
    ours = list(P.rolling_windows(tokens, 7, max_len, context))
    theirs = list(get_rolling_token_windows(tokens, 7, max_len, context))
    assert ours == theirs
    assert [P.disjoint_window(w) for w in ours] == [make_disjoint_window(w) for w in theirs]
    rolling = P.Rolling(max_len, max_len - context + 1, 7)
    assert rolling.windows(tokens) == [make_disjoint_window(w) for w in theirs]
    predicted = [t for _, cont in rolling.windows(tokens) for t in cont]
    assert predicted == tokens  # every token predicted exactly once


def _lm_eval_loglikelihood(model: torch.nn.Module, tokens: list[int], prefix: int, max_len: int, context: int) -> float:
    """One document's log-likelihood the way lm-eval's HFLM.loglikelihood_rolling computes it."""
    total = 0.0
    for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(tokens, prefix, max_len, context)):
        inp = torch.tensor([(ctx + cont)[-(max_len + 1) :][:-1]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(inp).logits, dim=-1)[0, -len(cont) :]
        total += float(logprobs.gather(1, torch.tensor(cont)[:, None]).sum())
    return total


@pytest.mark.parametrize("which", ["gpt2", "llama"])
@pytest.mark.parametrize("stride", [None, 5])
def test_perplexities_equal_lm_evals(hf_models, which: str, stride: int | None) -> None:
    text = load_text("austen", split="test")
    docs = [text[:40], text[1000:1300], text[5000:5900], "Emma \u2014 \u201chandsome\u201d,  clever\n\nand rich."]
    lm = load_hf(str(getattr(hf_models, which)), max_length=16, stride=stride)
    ours = P.evaluate_perplexity(lm, docs, batch_size=3)

    context = 16 - (stride or 16) + 1
    prefix = lm.tokenizer.hf.bos_token_id
    theirs = [_lm_eval_loglikelihood(lm.hf, lm.tokenizer.hf.encode(d), prefix, 16, context) for d in docs]
    assert ours.loglikelihoods == pytest.approx(theirs, rel=1e-5)
    assert sum(len(lm.tokenizer.hf.encode(d)) for d in docs) == sum(ours.n_tokens)

    # lm-eval's wikitext counts and aggregations, on lm-eval's log-likelihoods and on robfilt's
    items = [process_results({"page": d}, [ll]) for d, ll in zip(docs, theirs, strict=True)]
    reference = {
        "word_perplexity": weighted_perplexity([i["word_perplexity"] for i in items]),
        "byte_perplexity": weighted_perplexity([i["byte_perplexity"] for i in items]),
        "bits_per_byte": bits_per_byte([i["bits_per_byte"] for i in items]),
    }
    for name, value in reference.items():
        assert getattr(ours, name) == pytest.approx(value, rel=1e-5), name
    same_ll = [process_results({"page": d}, [ll]) for d, ll in zip(docs, ours.loglikelihoods, strict=True)]
    assert ours.word_perplexity == weighted_perplexity([i["word_perplexity"] for i in same_ll])  # exactly
    assert ours.byte_perplexity == weighted_perplexity([i["byte_perplexity"] for i in same_ll])
    assert ours.bits_per_byte == bits_per_byte([i["bits_per_byte"] for i in same_ll])


def test_attack_rows_give_the_same_lm_eval_numbers(hf_models) -> None:
    """The clean rows of an attack run hold each chunk's lm-eval log-likelihood, words and bytes."""
    from robustbench_filters.api.evaluate import evaluate

    run = evaluate(f"hf:{hf_models.gpt2}", "pgd", [0.0], n_examples=5, batch_size=2, steps=1, max_length=24)
    clean = run.rows[run.rows.kind == "clean"].sort_values("example_id")
    pool = text_chunks(load_text("austen", split="test"), 25)
    docs = [pool[int(i)] for i in clean.example_id]
    ref = P.evaluate_perplexity(load_hf(str(hf_models.gpt2), max_length=24), docs)
    assert (-clean.nll_sum.to_numpy()).tolist() == pytest.approx(ref.loglikelihoods, rel=1e-6)
    assert clean.n_words.tolist() == list(ref.n_words) and clean.n_bytes.tolist() == list(ref.n_bytes)
    entry = run.summary.models[f"hf:{hf_models.gpt2}"].clean.to_dict()
    assert entry["word_perplexity"] == pytest.approx(ref.word_perplexity, rel=1e-6)
    assert entry["bits_per_byte"] == pytest.approx(ref.bits_per_byte, rel=1e-6)
    assert math.isfinite(entry["word_perplexity_lo"]) and entry["word_perplexity_lo"] <= entry["word_perplexity"]


def test_bad_windows_are_one_line() -> None:
    with pytest.raises(RobfiltError, match="--stride 9 must be between 1 and --max-length 8"):
        P.Rolling(8, 9, 0)
    with pytest.raises(RobfiltError, match="no documents"):
        P.evaluate_perplexity(object(), [])
