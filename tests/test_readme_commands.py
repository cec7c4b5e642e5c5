"""The README's commands for own data and Hugging Face LMs are the manual's: each one is a line of docs/own-models.md
or docs/hf-models.md, which tests/test_class_maps.py and tests/test_hf_docs.py run (with the fixtures they need)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def _commands(text: str) -> list[str]:
    lines = [line.split("  #", 1)[0].strip() for block in FENCE.findall(text) for line in block.splitlines()]
    return [line for line in lines if line.startswith("robfilt ")]


def test_every_readme_command_of_own_data_and_hf_models_is_run_by_the_manual_tests() -> None:
    readme = (ROOT / "README.md").read_text()
    after = readme.split("robfilt:run-by tests/test_readme_commands.py", 1)[1]
    first = FENCE.search(after)
    assert first is not None
    mine = _commands(first.group(0))
    assert len(mine) == 3
    manual = set(_commands((ROOT / "docs" / "own-models.md").read_text()))
    manual |= set(_commands((ROOT / "docs" / "hf-models.md").read_text()))
    assert [c for c in mine if c not in manual] == []
    assert any("imagefolder:imagenette2-160" in c and "timm:resnet18" in c for c in mine)  # issue 26 item 5
    assert any("hf:" in c and "pgd,wordswap" in c for c in mine) and any("--variant bsa-grc" in c for c in mine)
