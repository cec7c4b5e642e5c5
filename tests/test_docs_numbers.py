"""Numbers in the README and docs/ come from the files they describe: generated, or tested for agreement.

Generated blocks (``<!-- robfilt:begin NAME -->`` ... ``<!-- robfilt:end NAME -->``) are written by
``python scripts/readme_numbers.py`` from the study's results.json, the zoo cards, reports/bench and the gate's
spec and baseline. Each committed block must equal what the script writes from the committed files, so a new study,
zoo, benchmark run or baseline turns this red until the script is rerun. Every other number in the README's prose
is either checked against its source here (versions, pins, the demo's size, exit codes) or listed in
``MEASURED`` with what it is.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from _docs import DOCUMENTS, ROOT, unfenced

sys.path.insert(0, str(ROOT / "scripts"))

import readme_numbers  # noqa: E402

README = ROOT / "README.md"


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


WITH_BLOCKS = [p for p in DOCUMENTS if readme_numbers.blocks(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("doc", WITH_BLOCKS, ids=_name)
def test_generated_blocks_equal_what_the_script_writes(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert readme_numbers.render(text, where=_name(doc)) == text, (
        f"{_name(doc)} has stale numbers: run `python scripts/readme_numbers.py` and commit the result"
    )


def test_every_generator_has_a_home_and_the_readme_shows_the_verdicts() -> None:
    used = {name for p in DOCUMENTS for name in readme_numbers.blocks(p.read_text(encoding="utf-8"))}
    assert used == set(readme_numbers.GENERATORS), f"unused: {set(readme_numbers.GENERATORS) - used}"
    assert readme_numbers.blocks(README.read_text(encoding="utf-8")) == ["verdicts"]


def test_the_verdict_block_follows_the_study(tmp_path: Path) -> None:
    """A changed results.json (another study) changes the README's block: the committed block goes stale."""
    study = tmp_path / "reports" / "study"
    study.mkdir(parents=True)
    for name in ("results.json", "study.json"):
        shutil.copy(ROOT / "reports" / "study" / name, study / name)
    before = readme_numbers.verdicts(tmp_path)
    assert before == readme_numbers.verdicts(ROOT)
    results = json.loads((study / "results.json").read_text())
    claim = next(c for c in results["claims"] if c["primary"])
    claim["verdict"] = "not supported" if claim["verdict"] != "not supported" else "supported"
    results["plan"]["seeds"] = [*results["plan"]["seeds"], 99]
    (study / "results.json").write_text(json.dumps(results))
    after = readme_numbers.verdicts(tmp_path)
    assert f"**{claim['verdict']}**" in after and "99" in after and after != before
    text = README.read_text(encoding="utf-8")
    assert readme_numbers.render(text, root=tmp_path) != text


def test_the_verdict_block_shows_every_primary_claim() -> None:
    results = json.loads((ROOT / "reports" / "study" / "results.json").read_text())
    block = readme_numbers.verdicts(ROOT)
    for claim in (c for c in results["claims"] if c["primary"]):
        assert f"({claim['id']}) {claim['claim']}" in block and f"**{claim['verdict']}**" in block
    plan = results["plan"]
    assert f"training seeds {', '.join(str(s) for s in plan['seeds'])}" in block


# --- the README's other numbers --------------------------------------------------------------------------------
def _prose(path: Path) -> str:
    """README text outside code, generated blocks, comments and link targets: where typed numbers live."""
    text = unfenced(path)
    text = readme_numbers.BLOCK.sub("", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", text)


NUMBER = re.compile(r"(?<![\w.])\d+(?:[./]\d+)*")

#: numbers whose source is not a file of the repository: what they are, so a new number cannot slip in unexplained.
#: The install sizes were measured on this project's machine for issue 26 (pip's default CUDA build of torch).
MEASURED = {
    "6.1": "GB, the default (CUDA torch) environment",
    "1.2": "GB, torch in it",
    "3.2": "GB, the nvidia-* libraries in it",
    "0.9": "GB, triton in it",
    "0.86": "GB, everything else",
    "95": "% intervals: the confidence level robfilt reports",
    "0": "the [0, 1] input range",
    "1": "the [0, 1] input range",
    "8/255": "an eps written as a fraction (docs/models.md)",
    "86_64": "x86_64",
    "2506.10371": "the paper's arXiv id",
}


def _checked() -> dict[str, str]:
    """Numbers of the README held to their source files here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M))
    demo = re.search(r"^demo:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), flags=re.M).group(1)  # type: ignore[union-attr]
    from robustbench_filters.cli._common import FAILED_CHECKS_EXIT
    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.core.names import MODEL_NAMES

    return {
        project["requires-python"].removeprefix(">="): "requires-python",
        project["version"]: "the wheel's version",
        pins["torch"].split("+")[0]: "the torch pin",
        pins["timm"]: "the timm pin",
        re.search(r"--n-examples (\d+)", demo).group(1): "make demo's examples",  # type: ignore[union-attr]
        str(len(MODEL_NAMES)): "the variants",
        str(RobfiltError.exit_code): "the exit code of bad input",
        str(FAILED_CHECKS_EXIT): "the exit code of failed checks",
        "2": "GPT-2",
        "11": "B1-B11",
    }


def test_every_number_in_the_readme_prose_is_checked_or_explained() -> None:
    known = {**MEASURED, **_checked()}
    found = set(NUMBER.findall(_prose(README)))
    unexplained = sorted(found - set(known))
    assert not unexplained, (
        f"README.md types {unexplained}: generate them (scripts/readme_numbers.py), check them against their source "
        "here, or list them in MEASURED with what they are"
    )


def test_the_readme_states_the_project_facts_it_is_checked_against() -> None:
    text = " ".join(_prose(README).split())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M))
    assert f"robustbench_filters-{project['version']}-py3-none-any.whl" in text
    assert f"torch {pins['torch']}" in text and f"timm {pins['timm']}" in text
    assert f"Python {project['requires-python'].removeprefix('>=')}" in text
    demo = re.search(r"--n-examples (\d+)", (ROOT / "Makefile").read_text()).group(1)  # type: ignore[union-attr]
    assert f"same {demo} bundled" in text
    assert "exit code 2" in text and "exits 3" in text
