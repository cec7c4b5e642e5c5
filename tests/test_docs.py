"""The documentation is generated or checked against the program, so it cannot drift: the CLI reference is
rendered from the commands, every link and anchor resolves, no page cites a file users do not have, and the README
stays a front door. (Commands and snippets: tests/test_doc_commands.py; numbers: tests/test_docs_numbers.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _docs import DOCUMENTS, anchors, links, prose

from robustbench_filters.cli._reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_current() -> None:
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/cli.md is stale: run python -m robustbench_filters.cli._reference"


def test_the_cli_reference_lists_every_command_and_option() -> None:
    text = render()
    for command in ("train", "attack", "lipschitz", "certify", "report", "check", "study", "verify", "models list"):
        assert f"## robfilt {command}\n" in text
    for flag in ("`--n-examples`", "`--image-column`", "`--model-arg`", "`--sigma`", "`--gap-rho`", "`--variant`"):
        assert flag in text


# --- links, anchors and what a page may cite ------------------------------------------------------------------
EXTERNAL = ("http://", "https://", "mailto:")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_name)
def test_every_link_resolves(doc: Path) -> None:
    """Relative links name files or folders of the repository, and their #anchors name headings of the target."""
    broken = []
    for target in links(doc):
        if target.startswith(EXTERNAL):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {_name(dest)} has no heading #{anchor}")
    assert not broken, f"{_name(doc)}: " + "; ".join(broken)


def test_the_link_checker_sees_links_and_anchors() -> None:
    """Guards the checker: it finds links, skips code, and spells anchors as GitHub does."""
    readme = links(ROOT / "README.md")
    assert "docs/gate.md" in readme and "docs/design.md" in readme and len(readme) >= 20
    assert "certified-accuracy-certify" in anchors(ROOT / "docs" / "gate.md")
    assert "benchmark-robustbenchs-call-on-robfilts-engine" in anchors(ROOT / "docs" / "own-models.md")
    assert "how-it-differs-from-autoattacks-versionstandard" in anchors(ROOT / "docs" / "attacks.md")
    assert "robfilt-attack" in anchors(ROOT / "docs" / "cli.md")
    assert "[x](nowhere.md)" not in prose(ROOT / "README.md")


def test_every_page_is_linked_from_the_readme_or_another_page() -> None:
    linked = set()
    for doc in DOCUMENTS:
        for target in links(doc):
            if not target.startswith(EXTERNAL) and target.partition("#")[0]:
                linked.add((doc.parent / target.partition("#")[0]).resolve())
    orphans = [_name(p) for p in DOCUMENTS[1:] if p.resolve() not in linked]
    assert not orphans, f"pages no document links to: {orphans}"


#: what users of a clone or of the wheel do not have: the team's design document and notes, this machine's paths
FOREIGN = re.compile(r"\.\./shared|shared/notes|DESIGN\.md|/work/|notes/\w+\.md")


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_name)
def test_no_page_cites_files_users_do_not_have(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    found = sorted({m.group(0) for m in FOREIGN.finditer(text)})
    assert not found, f"{_name(doc)} cites {found}; write the content out instead"


def test_the_readme_is_a_front_door() -> None:
    """At most 150 lines; the manual lives in docs/, and the README links every page of it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, f"README.md has {len(text.splitlines())} lines; move detail to docs/"
    linked = {t.partition("#")[0] for t in links(ROOT / "README.md")}
    pages = {f"docs/{p.name}" for p in DOCUMENTS[1:] if p.name not in ("lipschitz_bounds.md",)}
    assert pages <= linked, f"README.md does not link {sorted(pages - linked)}"
