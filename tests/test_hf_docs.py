"""docs/hf-models.md runs as written: every ``robfilt`` command, the gate spec and the Python block.

The commands run in process, in order, in a folder holding the names the page uses (``tiny-gpt2`` and
``tiny-llama``: tests/_hf_models.py; ``austen.txt``; ``hf.toml`` from the page's TOML block). Only flags that shrink
the work are appended (``--n-examples``, ``--steps``, ``-n``; the spec gets ``n_examples`` and ``steps``).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from robustbench_filters.cli import run

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "hf-models.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
SHRINK = {"attack": ["--n-examples", "4", "--steps", "10"], "train": ["--steps", "2"], "lipschitz": ["-n", "2"]}


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(PAGE) if kind == lang]


def _commands() -> list[list[str]]:
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == "robfilt":
                out.append(argv[1:])
    return out


def test_the_page_shows_what_issue_24_asks_for() -> None:
    commands = [" ".join(c) for c in _commands()]
    for needle in (
        "attack --model hf:tiny-gpt2,hf:tiny-llama --attack pgd,wordswap --data text:",
        "train --model hf:tiny-gpt2 --variant none",
        "train --model hf:tiny-gpt2 --variant bsa-grc",
        "attack --model hf:tiny-gpt2-ft,hf:tiny-gpt2-bsa-grc",
        "--split all",
        "--variant grc",
        "--max-length",
        "--stride",
        "--precision bf16",
        "--tokenizer",
        "lipschitz --model hf:",
        "report ",
        "check --spec",
    ):
        assert any(needle in c for c in commands), needle  # fmt: skip
    for word in ("word_perplexity", "byte_perplexity", "bits_per_byte", "pip install robustbench-filters[hf]",
                 "rotary", "local Hugging Face", "mean L2 norm", "by default\n`test`", "rolling windows",
                 "fine-tuned by the same recipe", "auto_map", "trust_remote_code=False"):  # fmt: skip
        assert word in PAGE, word


@pytest.mark.slow
def test_every_command_of_the_page_runs(hf_models, tmp_path, monkeypatch) -> None:
    shutil.copytree(hf_models.gpt2, tmp_path / "tiny-gpt2")
    shutil.copytree(hf_models.llama, tmp_path / "tiny-llama")
    shutil.copy(hf_models.text, tmp_path / "austen.txt")
    (tmp_path / "pyproject.toml").write_text("")  # the project root a spec's paths must stay in
    (spec,) = _blocks("toml")
    (tmp_path / "hf.toml").write_text(spec.replace("[lm]\n", "[lm]\nn_examples = 4\nsteps = 10\n", 1))
    monkeypatch.chdir(tmp_path)
    for argv in _commands():
        code = run([*argv, *SHRINK.get(argv[0], []), "-q"])
        assert code == 0, f"robfilt {' '.join(argv)} exited {code}"
    assert (tmp_path / "tiny-gpt2-bsa-grc" / "config.json").exists()
    assert (tmp_path / "reports" / "hf" / "tables" / "lm_eval.md").exists()
    (python,) = _blocks("python")
    exec(compile(python, "docs/hf-models.md", "exec"), {})
