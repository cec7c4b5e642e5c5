"""Language models are measured on whole documents in rolling token windows, with a ledger, as lm-eval measures them.

Text sources are lists of documents (blank-line paragraphs of a file, one per file of a folder, one per row of a
dataset), ``--split`` picks all/train/val/test (test by default, said at the start of the run), no document is cut
mid-word, ``--max-length``/``--stride`` roll over each document (so a stride changes the numbers and the window does
not change which documents are scored), rows carry forward/backward passes, and a document without tokens fails a
check instead of printing the perplexity of a perfect model.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path

import pytest

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import CharTokenizer, load_documents, load_text
from robustbench_filters.models import create_model

PARAGRAPHS = [  # 40 paragraphs of the same length: 5% of the characters is two of them
    f"Paragraph {i:02d}: it is a truth universally acknowledged, that a single man in possession of a good fortune "
    f"must be in want of a wife, said narrator {i:02d}."
    for i in range(40)
]


@pytest.fixture
def book(tmp_path: Path) -> Path:
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(PARAGRAPHS) + "\n", encoding="utf-8")
    return path


def test_a_text_file_is_its_paragraphs_and_split_picks_a_contiguous_run(book: Path) -> None:
    everything = load_documents(f"text:{book}", "all")
    assert list(everything.texts) == PARAGRAPHS
    parts = {s: load_documents(f"text:{book}", s).texts for s in ("train", "val", "test")}
    assert sum(map(len, parts.values())) == 40 and parts["train"] + parts["val"] + parts["test"] == tuple(PARAGRAPHS)
    assert len(parts["test"]) == 2 and len(parts["val"]) == 2  # 5% of the characters each, whole paragraphs
    assert load_documents(f"text:{book}").split == "test"  # the default
    assert "\n\n".join(parts["train"]) == load_text(f"text:{book}", "train")  # training streams read the same split


def test_a_folder_of_txt_files_is_one_document_per_file_and_hidden_files_are_skipped(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"{i:02d}.txt").write_text(f"Letter {i}.\n\nIt has two paragraphs, but is one document.\n")
    (tmp_path / ".hidden.txt").write_text("never read")
    docs = load_documents(f"text:{tmp_path}", "all")
    assert len(docs.texts) == 20 and docs.unit == "file" and all("Letter" in d for d in docs.texts)


def test_too_few_documents_for_a_split_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("A single paragraph, with no blank line in it.\nA second line of it.\n")
    assert len(load_documents(f"text:{path}", "all").texts) == 1
    with pytest.raises(RobfiltError, match="test split of .* holds no documents.*--split all"):
        load_documents(f"text:{path}", "test")
    with pytest.raises(RobfiltError, match="unknown split 'tset'"):
        load_documents(f"text:{path}", "tset")


def test_the_run_says_which_documents_and_why_fewer_than_asked(book: Path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="robustbench_filters"):
        res = evaluate(["lm"], ["wordswap"], checkpoint="none", data=f"text:{book}", rates=[0.1])
    text = caplog.text
    assert f"text:{book}: split test (the default; --split all, train, val or test), 2 documents" in text
    assert "scoring all 2 documents" in text and "fewer than --n-examples 64" in text
    assert res.summary.n_examples == 2 and res.summary.split == "test"
    res = evaluate(["lm"], ["wordswap"], checkpoint="none", data=f"text:{book}", rates=[0.1], split="all")
    assert res.summary.n_examples == 40


def _tiny_lm(block: int = 32):
    tok = CharTokenizer.train(load_text("austen", "train")[:50_000])
    return create_model(
        "lm", vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=32, block_size=block, checkpoint="none"
    ), tok


def test_windows_roll_over_whole_documents(book: Path) -> None:
    """Every character of a document is predicted once, whatever the window; a stride changes the numbers; the
    window never changes which documents are scored."""
    model, tok = _tiny_lm()
    common = dict(tokenizer=tok, data=f"text:{book}", split="all", n_examples=6, rates=[0.0])
    runs = {(w, s): evaluate([model], ["wordswap"], max_length=w, stride=s, **common) for w, s in
            ((32, None), (32, 16), (16, None))}  # fmt: skip
    clean = {k: r.rows[r.rows.kind == "clean"].sort_values("example_id") for k, r in runs.items()}
    docs = load_documents(f"text:{book}", "all").texts
    ids = clean[(32, None)].example_id.tolist()
    for rows in clean.values():
        assert rows.example_id.tolist() == ids  # the same documents at every window
        assert rows.n_tokens.tolist() == [len(docs[i]) for i in ids]  # char tokenizer: every character, once
    assert clean[(32, None)].n_windows.tolist() == [math.ceil(len(docs[i]) / 32) for i in ids]
    assert clean[(32, 16)].n_windows.tolist() == [1 + math.ceil((len(docs[i]) - 32) / 16) for i in ids]
    assert clean[(32, 16)].nll_sum.tolist() != clean[(32, None)].nll_sum.tolist()  # --stride does something
    assert next(iter(runs[(32, 16)].summary.windows.values())) == {
        "max_length": 32,
        "stride": 16,
        "prefix_token_id": tok.encode("\n")[0],
    }


def test_rows_carry_the_compute_ledger(book: Path) -> None:
    model, tok = _tiny_lm()
    res = evaluate([model], ["fgsm", "pgd"], [0.0, 0.05], tokenizer=tok, data=f"text:{book}", split="all",
                   n_examples=4, steps=3)  # fmt: skip
    rows = res.rows
    clean = rows[rows.kind == "clean"].set_index("example_id")
    assert (clean.fwd == clean.n_windows).all() and (clean.bwd == 0).all()
    pgd = rows[(rows.attack == "pgd") & (rows.eps == 0.05)].set_index("example_id")
    assert (pgd.fwd == 4 * pgd.n_windows).all() and (pgd.bwd == 3 * pgd.n_windows).all()  # 3 steps + scoring
    fgsm0 = rows[(rows.attack == "fgsm") & (rows.eps == 0.0)].set_index("example_id")
    assert (fgsm0.fwd == fgsm0.n_windows).all() and (fgsm0.bwd == 0).all()  # eps 0: nothing to attack
    (m,) = res.summary.models.values()
    assert m.clean.cost["fwd"] == float(clean.fwd.sum())
    assert m.cost["pgd"]["passes"] == float(rows[rows.attack == "pgd"][["fwd", "bwd"]].to_numpy().sum())
    assert m.cost["pgd"]["per_example"] == m.cost["pgd"]["passes"] / 4


class NoTokens(CharTokenizer):
    """A tokenizer that drops every character it was not built from (here: all of them)."""

    def encode(self, text: str) -> list[int]:
        return [t for t in super().encode(text) if t != 0]


def test_a_document_without_tokens_fails_a_check_and_prints_no_perplexity(book: Path, capsys, tmp_path) -> None:
    model, _ = _tiny_lm()
    tok = NoTokens(["\n", "\u2603"])  # the book has neither a snowman nor (inside paragraphs) newlines
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's All-NaN slice, mean of empty slice, 0/0
        res = evaluate([model], ["pgd", "wordswap"], [0.05], tokenizer=tok, data=f"text:{book}", split="all",
                       n_examples=3, steps=1, rates=[0.0, 0.1])  # fmt: skip
    checks = {c.name: c for c in res.summary.checks}
    assert checks["every document has tokens"].status == "fail"
    assert "3 of 3 documents have no tokens" in checks["every document has tokens"].detail
    clean = next(iter(res.summary.models.values())).clean
    for key in ("ppl", "ppl_lo", "ppl_hi", "word_perplexity", "byte_perplexity", "bits_per_byte", "ppl_median_seq"):
        assert math.isnan(getattr(clean, key)), key


def test_the_cli_exits_3_and_shows_no_number_for_no_tokens(book: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    import robustbench_filters.data.tokenizers as T

    monkeypatch.setattr(T.CharTokenizer, "encode", lambda self, text: [])
    code = run(["attack", "--model", "lm", "--checkpoint", "none", "--attack", "wordswap", "--rate", "0,0.1",
                "--data", f"text:{book}", "--split", "all", "-n", "3", "--out", str(tmp_path / "r"), "-q"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3
    clean_line = next(line for line in out.splitlines() if line.strip("│ ").startswith("clean"))
    assert "1.00" not in clean_line and "1 [1, 1]" not in out and "-" in clean_line, out


def test_split_is_an_option_of_every_surface(book: Path, tmp_path: Path, capsys) -> None:
    code = run(["attack", "--model", "lm", "--checkpoint", "none", "--attack", "wordswap", "--rate", "0.1",
                "--data", f"text:{book}", "--split", "val", "--out", str(tmp_path / "r"), "--json"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["split"] == "valid" and summary["n_examples"] == 2
    assert run(["attack", "--model", "lm", "--attack", "wordswap", "--split", "dev2", "-q"]) == 2
