"""Every cross-reference in the docstrings and the docs resolves to a module or object that exists.

Docstrings name code with Sphinx roles (``:mod:`..stats.intervals```, ``:func:`~.runs.folder.load_run```) and the
pages in docs/ with dotted paths (```robustbench_filters.attacks.catalogue.register_attack```). A file moved or a
function renamed leaves such a name pointing at nothing, and the reader who follows it is lost; so each one is
resolved here, by importing the module and walking the attributes.

Resolution follows Python's: a leading ``.`` is the module's own package, each further dot one package up; a name
without leading dots is looked up in the module itself, then in its package, then from ``robustbench_filters``; a
trailing ``()`` is dropped. Names of other libraries (torch, timm, ...) are not checked.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "robustbench_filters"
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):`([^`]+)`")
DOTTED = re.compile(r"`((?:robustbench_filters|cli)(?:\.\w+)+)(?:\(\))?`")
FOREIGN = ("torch", "timm", "torchattacks", "numpy", "np", "pandas", "pd", "transformers", "typing", "dataclasses",
           "collections", "pathlib", "scipy", "safetensors", "tokenizers", "datasets", "lm_eval", "typer", "rich",
           "json", "os", "sys", "math", "logging", "contextlib", "hashlib", "functools", "enum", "abc", "re",
           "foolbox", "art", "statsmodels", "matplotlib", "click", "tempfile", "subprocess", "threading",
           "multiprocessing", "concurrent", "weakref", "itertools", "inspect", "warnings", "random", "io")  # fmt: skip


def _module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "cli"):
        parts = [PACKAGE, "cli", *path.relative_to(ROOT / "cli").with_suffix("").parts]
    else:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = sorted([*(ROOT / PACKAGE).rglob("*.py"), *(ROOT / "cli").rglob("*.py")])


@cache
def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names an importable module or an attribute path inside one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _candidates(target: str, module: str, is_package: bool) -> list[str]:
    """Where ``target`` may live, as seen from ``module``."""
    target = target.lstrip("~").removesuffix("()").strip()
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (dots - 1)]
        return [".".join([*base, target[dots:]]) if target[dots:] else ".".join(base)]
    package = module if is_package else module.rpartition(".")[0]
    return [target, f"{module}.{target}", f"{package}.{target}", f"{PACKAGE}.{target}"]


def _docstrings(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, docstring, enclosing class name or "") of the module, its classes and functions."""
    out = []

    def visit(node: ast.AST, cls: str) -> None:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((getattr(node, "lineno", 1), doc, node.name if isinstance(node, ast.ClassDef) else cls))
        inner = node.name if isinstance(node, ast.ClassDef) else cls
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, "")
    return out


def _dangling_in(path: Path) -> list[str]:
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    source = path.read_text(encoding="utf-8")
    comments = [(i + 1, line, "") for i, line in enumerate(source.splitlines()) if "#" in line]
    bad = []
    for line, text, cls in [*_docstrings(ast.parse(source)), *comments]:
        for target in ROLE.findall(text):
            name = target.lstrip("~")
            if name.split(".")[0] in FOREIGN or hasattr(builtins, name):
                continue
            places = _candidates(target, module, is_package) + ([f"{module}.{cls}.{name}"] if cls else [])
            if not any(_resolves(c) for c in places):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_docstring_reference_resolves(path: Path) -> None:
    assert _dangling_in(path) == []


DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_name_in_the_docs_resolves(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    names = [n.replace("cli.", f"{PACKAGE}.cli.", 1) if n.startswith("cli.") else n for n in DOTTED.findall(text)]
    assert [n for n in names if not _resolves(n)] == []


def test_the_resolver_finds_a_dangling_name() -> None:
    """The check can fail: a moved module and a renamed function are reported, a real one is not."""
    assert _resolves(f"{PACKAGE}.runs.folder.load_run")
    assert not _resolves(f"{PACKAGE}.runs.folder.no_such_function")
    assert not _resolves(f"{PACKAGE}.budgets")
    assert _candidates("..stats.intervals", f"{PACKAGE}.checks.convergence", False) == [f"{PACKAGE}.stats.intervals"]
