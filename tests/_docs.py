"""Reading the documentation as data: its fenced blocks, their markers, the commands they show, links and anchors.

Shared by tests/test_docs.py (links, anchors, what a page may cite), tests/test_doc_commands.py (every command and
snippet runs) and tests/test_docs_numbers.py (generated numbers). The documents are README.md and docs/*.md.

A fenced block may be preceded (blank lines allowed) by one marker comment that says who runs it:

- ``<!-- robfilt:not-run REASON -->``: the block cannot run offline or in a test (an install, a GPU);
- ``<!-- robfilt:run-by tests/test_x.py: REASON -->``: another test module runs it, with the fixtures it needs.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS: tuple[Path, ...] = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*robfilt:(?P<kind>not-run|run-by)\b\s*(?P<arg>.*?)\s*-->", re.S)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    marker: str | None = None  # "not-run" | "run-by" | None
    marker_arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def run_by(self) -> str | None:
        """The test module a run-by marker names (``tests/test_x.py``), else None."""
        if self.marker != "run-by":
            return None
        return self.marker_arg.split(":", 1)[0].strip()

    @property
    def reason(self) -> str:
        if self.marker == "run-by":
            return self.marker_arg.split(":", 1)[1].strip() if ":" in self.marker_arg else ""
        return self.marker_arg


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order, with the marker comment just above it (if any)."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip()
        marker = MARKER.search(before[before.rfind("\n\n") + 1 :]) if before.endswith("-->") else None
        out.append(
            Block(
                path=path,
                line=text.count("\n", 0, m.start()) + 1,
                lang=m.group("lang"),
                body=m.group("body"),
                marker=marker.group("kind") if marker else None,
                marker_arg=" ".join(marker.group("arg").split()) if marker else "",
            )
        )
    return out


def all_blocks() -> list[Block]:
    return [b for path in DOCUMENTS for b in blocks(path)]


def command_lines(block: Block) -> list[str]:
    """The logical lines of a shell block: continuations joined, blank lines and comment-only lines dropped."""
    lines = []
    for line in block.body.replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    return lines


def argv(line: str) -> list[str]:
    """A shell line as its words, with a trailing comment removed."""
    return shlex.split(line, comments=True)


def strip_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=value`` assignments, and the command after them."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        name, _, value = words[0].partition("=")
        env[name] = value
        words = words[1:]
    return env, words


def robfilt_args(words: list[str]) -> list[str] | None:
    """The robfilt arguments of a command line: ``robfilt ...``, ``python -m robustbench_filters.cli ...`` or a
    ``torchrun ... -m robustbench_filters.cli -- ...``; None for any other command."""
    _, words = strip_env(words)
    if words[:1] == ["robfilt"]:
        return words[1:]
    if words[:3] == ["python", "-m", "robustbench_filters.cli"]:
        return words[3:]
    if words[:1] == ["torchrun"] and "robustbench_filters.cli" in words:
        rest = words[words.index("robustbench_filters.cli") + 1 :]
        return rest[1:] if rest[:1] == ["--"] else rest
    return None


# --- links and anchors ---------------------------------------------------------------------------------------
def unfenced(path: Path) -> str:
    """The text of ``path`` with its fenced code blocks blanked (line numbers kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"))


def prose(path: Path) -> str:
    """The text of ``path`` outside fenced code blocks and inline code (where links are links)."""
    return INLINE_CODE.sub("", unfenced(path))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes for the headings of ``path`` (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in unfenced(path).splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The targets of the Markdown links of ``path`` (outside code)."""
    return [m.group("target") for m in LINK.finditer(prose(path))]
