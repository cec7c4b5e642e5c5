"""Language-model attacks: word-swap contamination, embedding FGSM/PGD, the LM engine and its CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from robustbench_filters.api.evaluate import evaluate as evaluate_lm
from robustbench_filters.attacks.catalogue import Norm
from robustbench_filters.attacks.embedding import EmbeddingAttack, eps_scale, perturbation_size
from robustbench_filters.attacks.wordswap import WORD_RE, eligible_spans, swap_words
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import STOPWORDS, CharTokenizer, load_documents, load_text
from robustbench_filters.models import create_model
from robustbench_filters.models.hf.rolling import Rolling, window_rows
from robustbench_filters.models.lm_batch import sequence_nll, window_batch

RATES = (0.0, 0.015, 0.05, 0.1, 0.5, 1.0)
TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32)


@pytest.fixture(scope="module")
def text() -> str:
    return load_text("austen", split="test")[:20_000]


@pytest.fixture(scope="module")
def chunks() -> list[str]:
    """Whole documents (paragraphs) of the test split, the unit LM runs score."""
    return list(load_documents("austen", "test").texts[:40])


# --- word swap --------------------------------------------------------------------------------------------------


def test_wordswap_is_deterministic_for_a_seed(chunks: list[str]) -> None:
    a = [swap_words(c, 0.1, seed=7).text for c in chunks]
    b = [swap_words(c, 0.1, seed=7).text for c in chunks]
    c = [swap_words(c, 0.1, seed=8).text for c in chunks]
    assert a == b
    assert a != c


def test_wordswap_never_touches_stopwords(chunks: list[str]) -> None:
    for chunk in chunks:
        res = swap_words(chunk, 1.0, seed=1)
        assert all(chunk[s:e].lower() not in STOPWORDS for s, e in res.spans)
        kept = [w.lower() for w in WORD_RE.findall(res.text) if w != "AAA"]
        assert [w.lower() for w in WORD_RE.findall(chunk) if w.lower() in STOPWORDS] == kept


@pytest.mark.parametrize("rate", RATES)
def test_wordswap_hits_the_rate_within_one_word(chunks: list[str], rate: float) -> None:
    for i, chunk in enumerate(chunks):
        res = swap_words(chunk, rate, seed=i)
        n_eligible = len(eligible_spans(chunk)[0])
        assert res.n_eligible == n_eligible
        assert abs(res.n_swapped - rate * n_eligible) <= 1
        assert res.text.count("AAA") - chunk.count("AAA") == res.n_swapped


def test_wordswap_low_rates_are_unbiased_over_a_corpus() -> None:
    res = [swap_words(c, 0.015, seed=i) for i, c in enumerate(load_documents("austen", "test").texts)]
    frac = sum(r.n_swapped for r in res) / sum(r.n_eligible for r in res)
    assert 0.008 < frac < 0.022  # stochastic rounding: short sequences still get ~1.5% swapped overall


def test_wordswap_keeps_everything_else_byte_identical(chunks: list[str]) -> None:
    for i, chunk in enumerate(chunks):
        res = swap_words(chunk, 0.3, seed=i, replacement="<X>")
        rebuilt, last = [], 0
        for s, e in res.spans:
            rebuilt += [chunk[last:s], "<X>"]
            last = e
        assert "".join([*rebuilt, chunk[last:]]) == res.text
        # Outside the swapped words the original survives, in order and unchanged.
        outside = re.split(r"<X>", res.text)
        pieces = [
            chunk[a:b]
            for a, b in zip([0, *[e for _, e in res.spans]], [*[s for s, _ in res.spans], len(chunk)], strict=True)
        ]
        assert outside == pieces


def test_wordswap_nests_across_rates_and_keeps_quotes() -> None:
    line = "'Don't,' said Elinor's sister; \"the carriage\" waited -- 3 horses, £20."
    low = swap_words(line, 0.34, seed=3)
    high = swap_words(line, 1.0, seed=3)
    assert set(low.spans) <= set(high.spans)
    assert high.text == "'Don't,' AAA AAA AAA; \"the AAA\" AAA -- 3 AAA, £20."


def test_wordswap_without_eligible_words_is_unchanged_and_rate_is_checked() -> None:
    res = swap_words("and the of to, it is!", 0.5)
    assert (res.text, res.n_eligible, res.n_swapped) == ("and the of to, it is!", 0, 0)
    with pytest.raises(RobfiltError, match=r"outside \[0, 1\]"):
        swap_words("Elinor", 1.5)


# --- embedding attacks ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(text: str) -> tuple[torch.nn.Module, CharTokenizer, object]:
    """A 1-layer LM trained for a few seconds, so its loss surface is not the flat one of random weights."""
    tok = CharTokenizer.train(text)
    torch.manual_seed(0)
    model = create_model("lm", vocab_size=tok.vocab_size, **TINY, checkpoint="none").train()
    data = torch.tensor(tok.encode(text))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        starts = torch.randint(len(data) - 33, (16,), generator=g)
        x = torch.stack([data[s : s + 32] for s in starts])
        y = torch.stack([data[s + 1 : s + 33] for s in starts])
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    docs = load_documents("austen", "test").texts[:6]
    windows = window_rows([tok.encode(d) for d in docs], Rolling(32, 32, tok.prefix_token_id))[:16]
    return model, tok, window_batch(windows, torch.device("cpu"))


def _ppl(model, emb, b) -> float:
    with torch.no_grad():
        return math.exp(float(sequence_nll(model.forward_embeddings(emb), b.targets, b.mask).sum() / b.mask.sum()))


@pytest.mark.parametrize("norm", [Norm.L2, Norm.LINF])
def test_pgd_raises_perplexity_and_stays_in_the_ball(trained, norm: Norm) -> None:
    model, _, b = trained
    emb = model.embed(b.idx).detach()
    clean = _ppl(model, emb, b)
    eps_abs = 0.1 * eps_scale(model, norm)
    results = {}
    for name in ("fgsm", "pgd"):
        delta = EmbeddingAttack(name, norm, eps_abs).perturb(model, emb, b.targets, b.mask)
        assert bool((perturbation_size(delta, norm) <= eps_abs * (1 + 1e-5)).all())
        assert bool((delta[b.mask == 0] == 0).all())  # padding never moves
        results[name] = _ppl(model, emb + delta, b)
    assert results["pgd"] > 1.05 * clean
    assert results["pgd"] >= 0.99 * results["fgsm"]


def test_eps_scale_is_relative_to_the_embedding_table(trained) -> None:
    model, _, _ = trained
    table = model.tok_embed.weight.detach()
    assert eps_scale(model, Norm.L2) == pytest.approx(float(table.norm(dim=1).mean()))
    assert eps_scale(model, Norm.LINF) == pytest.approx(float(table.abs().mean()))
    assert eps_scale(model, Norm.L2, "absolute") == 1.0


def test_eps_zero_moves_nothing(trained) -> None:
    model, _, b = trained
    emb = model.embed(b.idx).detach()
    for name in ("fgsm", "pgd"):
        assert torch.equal(
            EmbeddingAttack(name, Norm.L2, 0.0, steps=2).perturb(model, emb, b.targets, b.mask), torch.zeros_like(emb)
        )


def test_engine_rows_and_checks_on_a_tiny_model(trained, tmp_path: Path) -> None:
    model, tok, _ = trained
    res = evaluate_lm(
        [model],
        ["fgsm", "pgd", "wordswap"],
        [0.0, 0.05, 0.2],
        data="austen",
        n_examples=6,
        out=tmp_path / "run",
        tokenizer=tok,
        rates=[0.0, 0.1],
        check_masking=True,
    )
    rows = res.rows
    assert set(rows.kind) == {"clean", "adversarial", "contamination"}
    assert len(rows) == 6 * (1 + 3 + 3 + 2)
    m = next(iter(res.summary.to_dict()["models"].values()))
    pgd = {r["eps"]: r["ppl"] for r in m["results"] if r["attack"] == "pgd"}
    assert pgd[0.0] == pytest.approx(m["clean"]["ppl"]) and pgd[0.2] > pgd[0.05] > pgd[0.0]
    statuses = {c.name: c.status for c in res.summary.checks}
    assert statuses["rate 0 equals clean"] == "pass"
    assert statuses["eps=0 equals clean"] == "pass"
    assert statuses["inside eps-ball, finite"] == "pass"
    assert statuses["perplexity non-decreasing in eps"] == "pass"
    assert statuses["swap rate as requested"] == "pass"
    assert statuses["5x steps not weaker"] == "pass"
    assert res.summary.checks_summary.fail == 0, res.summary.checks


# --- CLI --------------------------------------------------------------------------------------------------------


def _one_line_error(capsys, argv: list[str], match: str) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    assert re.search(match, err), err


def test_cli_rejects_bad_input_in_one_line(capsys, tmp_path: Path) -> None:
    base = ["attack", "--quiet", "--checkpoint", "none", "--out", str(tmp_path / "r")]
    _one_line_error(capsys, [*base, "--model", "lm", "--attack", "wordswap", "--rate", "1.5"], r"rate 1\.5")
    _one_line_error(capsys, [*base, "--model", "deit", "--attack", "wordswap"], r"wordswap.*does not fit")
    _one_line_error(capsys, [*base, "--model", "lm", "--attack", "pgd", "--rate", "0.1"], r"--rate applies to")
    folder = tmp_path / "stop"
    folder.mkdir()
    (folder / "train.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 20)
    (folder / "test.txt").write_text("and the of to it is was for on with as by at from,\n\n" * 12)
    _one_line_error(
        capsys,
        [*base, "--model", "lm", "--attack", "wordswap", "--data", f"text:{folder}", "--n-examples", "2"],
        r"no eligible words",
    )
    assert not (tmp_path / "r").exists()


ARGV = ["attack", "--model", "lm,lm-bsa", "--attack", "wordswap,pgd", "--checkpoint", "none", "--n-examples", "4",
        "--eps", "0.05,0.1", "--rate", "0,0.1", "--steps", "3", "--batch-size", "2", "--json"]  # fmt: skip


def test_cli_end_to_end_and_resume(capsys, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run([*ARGV, "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["family"] == "lm" and summary["n_examples"] == 4 and summary["rates"] == [0.0, 0.1]
    assert summary["eps_mode"] == "relative" and set(summary["eps_scale"]) == {"lm", "lm-bsa"}
    for m in summary["models"].values():
        assert {(r["attack"], r["eps"]) for r in m["results"]} == {
            ("wordswap", 0.0), ("wordswap", 0.1), ("pgd", 0.05), ("pgd", 0.1)
        }  # fmt: skip
        assert m["clean"]["ppl"] > 1 and 0 <= m["clean"]["acc"] <= 1
    assert summary["checks_summary"]["fail"] == 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert len(rows) == 2 * 4 * (1 + 2 + 2)
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"

    (out / "summary.json").unlink()
    parts = sorted((out / "parts").glob("*pgd*.parquet"))
    parts[-1].unlink()
    assert run([*ARGV, "--out", str(out), "--resume"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["models"] == summary["models"]
    assert pd.read_parquet(out / "rows.parquet").equals(rows)


def test_checkpoint_folder_brings_its_tokenizer(trained, tmp_path: Path) -> None:
    from robustbench_filters.models import save_checkpoint

    model, tok, _ = trained
    folder = save_checkpoint(model, tmp_path / "ckpt")
    with pytest.raises(RobfiltError, match="no tokenizer.json"):
        evaluate_lm(["lm"], ["wordswap"], checkpoint=str(folder), n_examples=3, rates=[0.1])
    tok.save(folder / "tokenizer.json")
    res = evaluate_lm(["lm"], ["wordswap"], checkpoint=str(folder), n_examples=3, rates=[0.1], check_masking=True)
    assert res.summary.models["lm"].clean.ppl < 40  # the trained weights were loaded, not random ones
    assert res.summary.windows["lm"]["max_length"] == TINY["block_size"]
    assert res.summary.windows["lm"]["prefix_token_id"] == tok.encode("\n")[0]  # documents start after a newline
