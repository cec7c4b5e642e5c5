"""The architecture holds: no import cycles between files, and the arrows follow the data flow.

config -> runner -> measurement -> run folder -> report. The runner never imports a measurement; the report package
and the gate's judgement (gating/) read run folders only (they never run models or attacks); records do not import
models. Every import counts, including those inside functions and under TYPE_CHECKING, because a lazy import is
still an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "robustbench_filters"


def _modules() -> dict[str, Path]:
    """Module name -> file, with cli/ installed as robustbench_filters.cli."""
    out: dict[str, Path] = {}
    for base, prefix in ((ROOT / PACKAGE, PACKAGE), (ROOT / "cli", f"{PACKAGE}.cli")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports (a from-import of a submodule counts as that submodule)."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_files() -> None:
    assert _cycles() == []


def _reach(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for w in GRAPH[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _under(names: set[str], *prefixes: str) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)}


MEASUREMENTS = (
    f"{PACKAGE}.attacks",
    f"{PACKAGE}.crown",
    f"{PACKAGE}.lipschitz",
    f"{PACKAGE}.smoothing",
    f"{PACKAGE}.api",
)


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith(f"{PACKAGE}.runs")])
def test_the_runner_never_imports_a_measurement(module: str) -> None:
    assert _under(_reach(module), *MEASUREMENTS, f"{PACKAGE}.configs") == set()


@pytest.mark.parametrize(
    "module", [m for m in MODULES if m.startswith(f"{PACKAGE}.report") or m.startswith(f"{PACKAGE}.gating")]
)
def test_the_report_and_the_gate_judgement_read_run_folders_only(module: str) -> None:
    forbidden = (*MEASUREMENTS, f"{PACKAGE}.runs.runner", f"{PACKAGE}.gate", f"{PACKAGE}.models", f"{PACKAGE}.train")
    assert _under(_reach(module), *forbidden) == set()


def test_configs_never_import_the_lipschitz_estimator() -> None:
    """The method names a Lipschitz config validates live in core/names.py, below both (no configs <-> lipschitz cycle)."""
    for module in [m for m in MODULES if m.startswith(f"{PACKAGE}.configs")]:
        assert _under(_reach(module), f"{PACKAGE}.lipschitz") == set(), module


def test_records_and_base_modules_import_no_models() -> None:
    base = [m for m in MODULES if _package(m) in TIERS[0][1]]
    assert f"{PACKAGE}.core.errors" in base
    for module in [f"{PACKAGE}.runs.folder", *base]:
        assert _under(_reach(module), f"{PACKAGE}.models") == set(), module


def test_the_graph_sees_known_arrows() -> None:
    """Guards the scanner itself: relative, package and lazy imports are all seen."""
    assert f"{PACKAGE}.runs.folder" in GRAPH[f"{PACKAGE}.runs.runner"]
    assert f"{PACKAGE}.checks.image" in GRAPH[f"{PACKAGE}.attacks.image"]  # from ..checks import image as IC
    assert f"{PACKAGE}.api.evaluate" in GRAPH[f"{PACKAGE}.cli.lipschitz"]  # a lazy import inside a function
    assert f"{PACKAGE}.cli._render" in GRAPH[f"{PACKAGE}.cli.attack"]


def test_every_package_is_installed() -> None:
    """The wheel ships robustbench_filters/ whole and cli/ as robustbench_filters/cli, so every package is in a fresh
    install (tests/test_install.py checks the built wheel file by file)."""
    import tomllib

    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == [PACKAGE] and wheel["force-include"] == {"cli": f"{PACKAGE}/cli"}


# The package order, bottom to top. A package may import packages of its own tier or of a lower one, never of a
# higher one; with the package-level acyclicity below, every arrow in the code follows this order. A new package
# must be placed here (the test names it).
# fmt: off
TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary and utilities", ("core", "errors", "stats", "summaries")),
    ("data and models", ("data", "models")),
    ("checks, configs and the runner", ("checks", "configs", "runs")),
    ("measurements", ("attacks", "crown", "lipschitz", "smoothing", "train")),
    ("readers", ("report", "gating")),
    ("entry points", ("api", "gate", "study", "cli")),
)
# fmt: on
TIER = {name: i for i, (_, names) in enumerate(TIERS) for name in names}


def _package(module: str) -> str | None:
    """The top-level package or module of ``robustbench_filters`` a module belongs to (None: the root itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _package_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) package pairs, each with the files that make the arrow."""
    out: dict[tuple[str, str], list[str]] = {}
    for module, deps in GRAPH.items():
        a = _package(module)
        for dep in deps:
            b = _package(dep)
            if a is not None and b is not None and a != b:
                out.setdefault((a, b), []).append(module)
    return out


def test_every_package_has_a_place_in_the_order() -> None:
    packages = {_package(m) for m in MODULES} - {None}
    assert packages - set(TIER) == set(), "add the new package to TIERS"


def test_imports_follow_the_package_order() -> None:
    upward = [
        f"{a} ({TIERS[TIER[a]][0]}) -> {b} ({TIERS[TIER[b]][0]}) in {sorted(files)[0]}"
        for (a, b), files in sorted(_package_edges().items())
        if TIER[b] > TIER[a]
    ]
    assert upward == []


def test_no_import_cycles_between_packages() -> None:
    edges = _package_edges()
    cycles = sorted(f"{a} <-> {b}" for (a, b) in edges if a < b and (b, a) in edges)
    assert cycles == []
    # longer cycles: a package that reaches itself
    succ: dict[str, set[str]] = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    for start in succ:
        seen, todo = set(), list(succ[start])
        while todo:
            n = todo.pop()
            assert n != start, f"{start} reaches itself through its imports"
            if n not in seen:
                seen.add(n)
                todo.extend(succ.get(n, ()))


def test_the_package_order_test_sees_an_upward_arrow() -> None:
    """Guards the check: the runner importing a measurement would be an upward arrow."""
    assert TIER["runs"] < TIER["attacks"] and ("attacks", "runs") in _package_edges()
    assert ("runs", "attacks") not in _package_edges()
