"""Run the BSA/GRC comparison of docs/hf-models.md as written and keep its summary for the page's table.

Why a script: the page compares BSA and GRC conversions of a GPT-2 with the plain GPT-2 fine-tuned by the same
recipe (``robfilt train --variant none``); its numbers must come from running the page's own commands. This script
builds the folders the page names (``tiny-gpt2``, ``tiny-llama`` and ``austen.txt``: the test suite's tiny models,
tests/_hf_models.py, a 2-layer GPT-2 and Llama with a BPE tokenizer trained on the bundled text), runs every
``robfilt`` line of the page's "BSA and GRC" block in order, at full size, in a scratch folder, and copies the
comparison run's ``summary.json`` to ``reports/hf/variants.json``. ``python scripts/readme_numbers.py`` then writes
the page's table from it (tests/test_docs_numbers.py fails when the table and the file disagree).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/hf_variants.py                 # about 10 minutes on 2 cores
    .venv/bin/python scripts/hf_variants.py --workdir /tmp/hf-variants        # keep the folders and runs
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "hf-models.md"
OUT = ROOT / "reports" / "hf" / "variants.json"
HEADING = "### BSA and GRC for Hugging Face models"


def block_commands(page: Path = PAGE, heading: str = HEADING) -> list[list[str]]:
    """The robfilt arguments of every line of the first bash block under ``heading``."""
    text = page.read_text(encoding="utf-8")
    body = re.search(r"^```bash\n(.*?)^```", text[text.index(heading) :], re.S | re.M)
    assert body is not None, f"no bash block under {heading!r} in {page}"
    lines = [ln for ln in body.group(1).replace("\\\n", " ").splitlines() if ln.strip() and not ln.startswith("#")]
    return [shlex.split(ln, comments=True)[1:] for ln in lines if ln.startswith("robfilt ")]


def main(
    workdir: Annotated[
        str | None, typer.Option("--workdir", help="Folder to work in (default: a temporary one).")
    ] = None,
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from _hf_models import build  # the test suite's tiny models: the folders the page names

    from robustbench_filters.cli import run

    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hf-variants-"))
    work.mkdir(parents=True, exist_ok=True)
    models = build(work)
    for folder, name in ((models.gpt2, "tiny-gpt2"), (models.llama, "tiny-llama")):
        assert folder.name == name, folder
    commands = block_commands()
    os.chdir(work)
    summary: Path | None = None
    for argv in commands:
        print("robfilt", " ".join(shlex.quote(a) for a in argv), flush=True)
        code = run([*argv, "--overwrite"])
        if code != 0:
            raise SystemExit(f"robfilt {' '.join(argv)} exited {code}")
        if argv[0] == "attack":
            out = Path(argv[argv.index("--out") + 1])
            summary = out / "summary.json"
    if summary is None:
        raise SystemExit(f"the block under {HEADING!r} has no robfilt attack line")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(summary, OUT)  # the run's summary.json as written
    print(f"wrote {OUT.relative_to(ROOT)}")
    if not workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
