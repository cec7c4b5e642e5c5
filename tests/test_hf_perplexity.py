"""robfilt's perplexities equal lm-eval's: computed by lm-eval 0.4.13 itself, with its own ``HFLM``.

lm-eval (lm-evaluation-harness, with ``accelerate``) is a test dependency. ``HFLM.loglikelihood_rolling`` loads each
tiny model folder itself and scores documents that span several windows; its rolling windows
(``get_rolling_token_windows``, ``make_disjoint_window``), its wikitext task's word and byte counts
(``process_results``) and its aggregations (``weighted_perplexity``, ``bits_per_byte``) give the reference. Then
the whole path a user takes: ``robfilt train`` (the card) and ``robfilt attack`` (the clean rows) on a text file of
several paragraphs print the numbers lm-eval computes for the same paragraphs.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks.wikitext.preprocess_wikitext import process_results
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_text
from robustbench_filters.models.hf import perplexity as P
from robustbench_filters.models.hf import rolling as R
from robustbench_filters.models.hf.load import load_hf

WINDOW = 16


@pytest.mark.parametrize("n_tokens", [0, 1, 5, 16, 17, 40, 97])
@pytest.mark.parametrize(("max_len", "context"), [(16, 1), (16, 5), (16, 16), (8, 3), (1, 1)])
def test_windows_are_lm_evals(n_tokens: int, max_len: int, context: int) -> None:
    tokens = list(range(100, 100 + n_tokens))
    ours = list(R.rolling_windows(tokens, 7, max_len, context))
    theirs = list(get_rolling_token_windows(tokens, 7, max_len, context))
    assert ours == theirs
    assert [R.disjoint_window(w) for w in ours] == [make_disjoint_window(w) for w in theirs]
    rolling = R.Rolling(max_len, max_len - context + 1, 7)
    assert rolling.windows(tokens) == [make_disjoint_window(w) for w in theirs]
    predicted = [t for _, cont in rolling.windows(tokens) for t in cont]
    assert predicted == tokens  # every token predicted exactly once


def _documents() -> list[str]:
    """Documents of a few to ~15 windows of 16 tokens, a special token at the start of one, and non-ASCII text."""
    text = load_text("austen", split="test")
    return [
        text[:40],
        text[1000:1300],
        text[5000:5900],
        "<|endoftext|>Emma \u2014 \u201chandsome\u201d,  clever\n\nand rich.",
    ]


def hflm_loglikelihoods(folder: str, docs: list[str], max_length: int) -> list[float]:
    """lm-eval's own ``HFLM.loglikelihood_rolling`` of ``docs`` (it loads the folder itself, on the CPU, fp32)."""
    lm = HFLM(pretrained=folder, device="cpu", batch_size=3, max_length=max_length, dtype="float32")
    requests = [Instance("loglikelihood_rolling", {}, (d,), i) for i, d in enumerate(docs)]
    return [float(ll) for ll in lm.loglikelihood_rolling(requests, disable_tqdm=True)]


def lm_eval_metrics(docs: list[str], loglikelihoods: list[float]) -> dict[str, float]:
    """lm-eval's wikitext metrics: its per-document counts, its aggregations."""
    items = [process_results({"page": d}, [ll]) for d, ll in zip(docs, loglikelihoods, strict=True)]
    return {
        "word_perplexity": weighted_perplexity([i["word_perplexity"] for i in items]),
        "byte_perplexity": weighted_perplexity([i["byte_perplexity"] for i in items]),
        "bits_per_byte": bits_per_byte([i["bits_per_byte"] for i in items]),
    }


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_loglikelihoods_equal_lm_evals_hflm(hf_models, which: str) -> None:
    docs = _documents()
    folder = str(getattr(hf_models, which))
    theirs = hflm_loglikelihoods(folder, docs, WINDOW)
    ours = P.evaluate_perplexity(f"hf:{folder}", docs, max_length=WINDOW, batch_size=5)
    lm = load_hf(folder, max_length=WINDOW)
    assert max(len(w) for w in (lm.rolling.windows(lm.tokenizer.encode(d)) for d in docs)) >= 10  # many windows
    worst = max(abs(a - b) for a, b in zip(ours.loglikelihoods, theirs, strict=True))
    print(f"{which}: max |log-likelihood difference| vs lm-eval's HFLM = {worst:.3g} over {len(docs)} documents")
    assert worst <= 1e-5 * max(1.0, max(abs(t) for t in theirs)), (ours.loglikelihoods, theirs)
    for name, value in lm_eval_metrics(docs, theirs).items():
        assert getattr(ours, name) == pytest.approx(value, rel=1e-6), name
    # the same aggregation of the same log-likelihoods is the same number, exactly
    for name, value in lm_eval_metrics(docs, list(ours.loglikelihoods)).items():
        assert getattr(ours, name) == value, name


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_strided_windows_equal_lm_evals_windows(hf_models, which: str) -> None:
    """A stride below the window gives each window more context: lm-eval's functions with its ``context_len``."""
    docs, stride = _documents(), 5
    lm = load_hf(str(getattr(hf_models, which)), max_length=WINDOW, stride=stride)
    ours = P.evaluate_perplexity(lm, docs, batch_size=3)
    context = WINDOW - stride + 1
    theirs = []
    for d in docs:
        total = 0.0
        windows = get_rolling_token_windows(lm.tokenizer.encode(d), lm.tokenizer.prefix_token_id, WINDOW, context)
        for ctx, cont in map(make_disjoint_window, windows):
            inp = torch.tensor([(ctx + cont)[-(WINDOW + 1) :][:-1]])
            with torch.no_grad():
                logprobs = torch.log_softmax(lm.hf(inp).logits, dim=-1)[0, -len(cont) :]
            total += float(logprobs.gather(1, torch.tensor(cont)[:, None]).sum())
        theirs.append(total)
    assert ours.loglikelihoods == pytest.approx(theirs, rel=1e-5)


def test_train_and_attack_print_lm_evals_numbers_for_a_file_of_paragraphs(hf_models, tmp_path, capsys) -> None:
    """The issue's "done when": a text file of paragraphs, fine-tuned with robfilt train and attacked with robfilt
    attack; the card and the clean rows give lm-eval's word perplexity of the same (test) paragraphs."""
    from robustbench_filters.cli import run

    text = load_text("austen", split="test")
    paragraphs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 200][:40]
    size = min(len(p) for p in paragraphs)
    paragraphs = [p[: size - 1] + "." for p in paragraphs]  # 40 paragraphs of the same length
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    held_out = paragraphs[-2:]  # the last 5% of the characters: the test split, two whole paragraphs
    out = tmp_path / "ft"
    data = f"text:{tmp_path / 'book.txt'}"
    assert run(["train", "--model", f"hf:{hf_models.gpt2}", "--variant", "none", "--data", data, "--steps", "2",
                "--out", str(out), "-q"]) == 0  # fmt: skip
    capsys.readouterr()
    card = json.loads((out / "card.json").read_text())["metrics"]
    assert run(["attack", "--model", f"hf:{out}", "--attack", "pgd,wordswap", "--data", data, "--steps", "2",
                "--rate", "0,0.1", "--out", str(tmp_path / "run"), "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_examples"] == 2 and summary["split"] == "test"
    clean = summary["models"][f"hf:{out}"]["clean"]
    reference = lm_eval_metrics(held_out, hflm_loglikelihoods(str(out), held_out, 64))
    print(f"clean word perplexity: robfilt attack {clean['word_perplexity']:.6f}, lm-eval HFLM "
          f"{reference['word_perplexity']:.6f}, robfilt train's card {card['test_word_perplexity']:.6f}")  # fmt: skip
    for name, value in reference.items():
        assert clean[name] == pytest.approx(value, rel=1e-5), name
        assert card[f"test_{name}"] == pytest.approx(value, rel=1e-5), name
        assert card[f"test_{name}"] == pytest.approx(clean[name], rel=1e-9), name
    assert card["test_documents"] == 2 and card["test_tokens"] == clean["n_tokens"]


def test_attack_rows_hold_each_documents_lm_eval_numbers(hf_models) -> None:
    """The clean rows of an attack run hold each document's lm-eval log-likelihood, words and bytes."""
    from robustbench_filters.api.evaluate import evaluate
    from robustbench_filters.data import load_documents

    run = evaluate(f"hf:{hf_models.gpt2}", "pgd", [0.0], n_examples=5, batch_size=2, steps=1, max_length=24)
    clean = run.rows[run.rows.kind == "clean"].sort_values("example_id")
    pool = load_documents("austen", "test").texts
    docs = [pool[int(i)] for i in clean.example_id]
    ref = P.evaluate_perplexity(load_hf(str(hf_models.gpt2), max_length=24), docs)
    assert (-clean.nll_sum.to_numpy()).tolist() == pytest.approx(ref.loglikelihoods, rel=1e-6)
    assert clean.n_words.tolist() == list(ref.n_words) and clean.n_bytes.tolist() == list(ref.n_bytes)
    entry = run.summary.models[f"hf:{hf_models.gpt2}"].clean.to_dict()
    assert entry["word_perplexity"] == pytest.approx(ref.word_perplexity, rel=1e-6)
    assert entry["bits_per_byte"] == pytest.approx(ref.bits_per_byte, rel=1e-6)
    assert math.isfinite(entry["word_perplexity_lo"]) and entry["word_perplexity_lo"] <= entry["word_perplexity"]


def test_bad_windows_and_empty_documents_are_one_line(hf_models) -> None:
    with pytest.raises(RobfiltError, match="^stride 9 must be between 1 and max_length 8"):
        R.Rolling(8, 9, 0)
    with pytest.raises(RobfiltError, match="no documents"):
        P.evaluate_perplexity(object(), [])
    with pytest.raises(RobfiltError, match="1 of 2 documents have no tokens"):
        P.evaluate_perplexity(f"hf:{hf_models.gpt2}", ["It is a truth.", ""], max_length=WINDOW)
