"""Text read as text (issue 41, class 4): a UTF-8 byte-order mark is never scored as content, whatever reads the
file (text files, folders of .txt, split files, gzip, Hugging Face rows, specs, baselines, tokenizers, configs), and
a Hugging Face text column is type-checked row by row: a row that holds no string is refused in one line naming it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.textfiles import BOM, read_text
from robustbench_filters.data import CharTokenizer, load_documents, load_text
from robustbench_filters.data.tokenizers import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
MARK = b"\xef\xbb\xbf"
PARAGRAPHS = [f"Paragraph {i:02d}: it is a truth universally acknowledged, said narrator {i:02d}." for i in range(40)]
TEXT = "\n\n".join(PARAGRAPHS) + "\n"
SHORT = "\n\n".join(PARAGRAPHS[:3]) + "\n"  # scored whole: the first document, the one a mark would change, too
SCORED = ["example_id", "kind", "eps", "nll_sum", "n_tokens", "n_bytes", "n_words", "n_swapped", "n_windows"]


def _pair(tmp_path: Path, name: str, data: bytes) -> tuple[Path, Path]:
    """``name`` in plain/ without and in marked/ with a byte-order mark (gzipped too when it ends in .gz)."""
    out = []
    for folder, head in (("plain", b""), ("marked", MARK)):
        path = tmp_path / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = head + data
        path.write_bytes(gzip.compress(body, mtime=0) if name.endswith(".gz") else body)
        out.append(path)
    return out[0], out[1]


def test_read_text_drops_the_mark_and_nothing_else(tmp_path: Path) -> None:
    plain, marked = _pair(tmp_path, "a.txt", "caf\u00e9\r\nline two\n".encode())
    assert read_text(marked) == read_text(plain) == "caf\u00e9\nline two\n"
    inner = tmp_path / "inner.txt"
    inner.write_bytes(b"x" + MARK + b"y")  # further in, U+FEFF is a character of the text
    assert read_text(inner) == f"x{BOM}y"
    gz_plain, gz_marked = _pair(tmp_path, "b.txt.gz", b"zipped\n")
    assert read_text(gz_marked) == read_text(gz_plain) == "zipped\n"


@pytest.mark.parametrize("layout", ["file", "txt-folder", "split-files", "gzip-split-files"])
def test_every_text_source_gives_the_same_documents_with_a_mark(tmp_path: Path, layout: str) -> None:
    if layout == "file":
        plain, marked = _pair(tmp_path, "book.txt", TEXT.encode())
    elif layout == "txt-folder":
        for i, p in enumerate(PARAGRAPHS[:20]):
            _pair(tmp_path, f"{i:02d}.txt", p.encode())
        plain, marked = tmp_path / "plain", tmp_path / "marked"
    else:
        suffix = ".gz" if layout.startswith("gzip") else ""
        for split, part in (("train", PARAGRAPHS[:30]), ("valid", PARAGRAPHS[30:35]), ("test", PARAGRAPHS[35:])):
            _pair(tmp_path, f"{split}.txt{suffix}", "\n\n".join(part).encode())
        plain, marked = tmp_path / "plain", tmp_path / "marked"
    for split in ("all", "train", "test"):
        want = load_documents(f"text:{plain}", split).texts
        got = load_documents(f"text:{marked}", split).texts
        assert got == want and not any(BOM in d for d in got)
    assert load_text(f"text:{marked}", "train") == load_text(f"text:{plain}", "train")  # what training reads


def _scored(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[[c for c in SCORED if c in rows]].sort_values(["kind", "eps", "example_id"]).reset_index(drop=True)


def test_the_api_scores_a_marked_file_as_the_plain_one(tmp_path: Path) -> None:
    """The issue's case: the zoo LM on a file with a byte-order mark; same tokens, bytes and NLL per document."""
    plain, marked = _pair(tmp_path, "book.txt", SHORT.encode())
    common = dict(data=None, split="all", n_examples=3, rates=[0.0, 0.1], seed=0)
    a, b = (evaluate(["lm"], ["wordswap"], **{**common, "data": f"text:{p}"}) for p in (plain, marked))
    assert sorted(a.rows[a.rows.kind == "clean"].example_id) == [0, 1, 2]
    pd.testing.assert_frame_equal(_scored(b.rows), _scored(a.rows))


def test_the_cli_scores_a_marked_file_as_the_plain_one(tmp_path: Path) -> None:
    plain, marked = _pair(tmp_path, "book.txt", SHORT.encode())
    rows = []
    for name, path in (("a", plain), ("b", marked)):
        code = run(["attack", "--model", "lm", "--attack", "wordswap", "--rate", "0.1", "--data", f"text:{path}",
                    "--split", "all", "-n", "3", "--out", str(tmp_path / name), "-q"])  # fmt: skip
        assert code == 0
        rows.append(_scored(pd.read_parquet(tmp_path / name / "rows.parquet")))
    assert sorted(rows[0][rows[0].kind == "clean"].example_id) == [0, 1, 2]
    pd.testing.assert_frame_equal(rows[1], rows[0])


def _hf_text(path: Path, texts: list, **columns: list) -> Path:
    from datasets import Dataset

    Dataset.from_dict({"text": texts, **columns}).save_to_disk(str(path))
    return path


def test_hf_rows_lose_a_leading_mark(tmp_path: Path) -> None:
    plain = _hf_text(tmp_path / "plain", PARAGRAPHS)
    marked = _hf_text(tmp_path / "marked", [BOM + p for p in PARAGRAPHS])
    assert load_documents(f"hf-disk:{marked}", "all").texts == load_documents(f"hf-disk:{plain}", "all").texts


def test_every_hf_row_is_type_checked_and_a_none_row_is_named(tmp_path: Path, capsys) -> None:
    """A None far past the first 100 rows is refused (it was dropped silently), in one line naming the row and the
    column, and the advice is to fix the row, not to pass the (right) column's name."""
    texts: list = [f"row {i} has words in it." for i in range(300)]
    texts[250] = None
    data = _hf_text(tmp_path / "holes", texts)
    capsys.readouterr()  # the datasets library's progress bar
    with pytest.raises(RobfiltError) as err:
        load_documents(f"hf-disk:{data}", "all")
    message = str(err.value)
    assert "row 250" in message and "'text'" in message and "None" in message and "\n" not in message
    assert "column's name" not in message and "drop or fill that row" in message
    code = run(["attack", "--model", "lm", "--attack", "wordswap", "--rate", "0.1", "--data", f"hf-disk:{data}",
                "--split", "all", "-n", "3", "--out", str(tmp_path / "r"), "-q"])  # fmt: skip
    err_out = capsys.readouterr().err.strip()
    assert code == 2 and len(err_out.splitlines()) == 1 and "row 250" in err_out and "Traceback" not in err_out
    assert not (tmp_path / "r").exists()


def test_a_column_that_is_not_text_names_the_text_columns(tmp_path: Path, capsys) -> None:
    data = _hf_text(tmp_path / "numbers", PARAGRAPHS, score=list(range(40)))
    capsys.readouterr()
    with pytest.raises(
        RobfiltError, match=r"column 'score' of .* holds int64, not text; pass text_column .*its text columns: text"
    ):
        load_documents(f"hf-disk:{data}", "all", text_column="score")
    code = run(["attack", "--model", "lm", "--attack", "wordswap", "--rate", "0.1", "--data", f"hf-disk:{data}",
                "--text-column", "score", "--split", "all", "-n", "3", "--out", str(tmp_path / "r"), "-q"])  # fmt: skip
    err_out = capsys.readouterr().err.strip()
    assert code == 2 and "pass --text-column" in err_out and len(err_out.splitlines()) == 1


def test_specs_baselines_tokenizers_and_configs_read_with_a_mark(tmp_path: Path) -> None:
    from robustbench_filters.gate.spec import load_spec
    from robustbench_filters.gating.metrics import load_baseline
    from robustbench_filters.models.hf.trust import read_config_json

    for folder in ("plain", "marked"):
        (tmp_path / folder).mkdir()
    spec = (ROOT / "robustness.toml").read_bytes()
    (tmp_path / "plain" / "robustness.toml").write_bytes(spec)
    (tmp_path / "marked" / "robustness.toml").write_bytes(MARK + spec)
    for folder in ("plain", "marked"):  # the spec names the committed baselines, relative to its folder
        shutil.copytree(ROOT / "baselines", tmp_path / folder / "baselines")
    a, b = (load_spec(tmp_path / f / "robustness.toml") for f in ("plain", "marked"))
    settings = [{k: {**s.settings, "base_dir": None} for k, s in spec.sections.items()} for spec in (a, b)]
    assert settings[0] == settings[1] and set(settings[0]) == {"image", "lm", "lipschitz"}
    assert (a.name, a.out.name, a.policy, a.sanity) == (b.name, b.out.name, b.policy, b.sanity)

    doc = json.dumps({"format": "robfilt-baseline", "version": 1, "metrics": []}).encode()
    plain, marked = _pair(tmp_path, "baseline.json", doc)
    assert load_baseline(marked) == load_baseline(plain)

    tok = CharTokenizer.train("some text to learn characters from")
    saved = tok.save(tmp_path / "tok.json")
    plain, marked = _pair(tmp_path, "tokenizer.json", saved.read_bytes())
    assert load_tokenizer(marked).to_dict() == load_tokenizer(plain).to_dict()

    plain, marked = _pair(tmp_path, "config.json", b'{"model_type": "gpt2"}')
    assert read_config_json(marked.parent, "model") == read_config_json(plain.parent, "model") == {"model_type": "gpt2"}
