"""Every command shown in README.md and docs/*.md is run by a test, and every documented flag exists.

What is shown: the ``bash`` blocks (their ``robfilt ...`` lines, ``python -m robustbench_filters.cli ...``,
``torchrun ... -m robustbench_filters.cli -- ...``, ``python scripts/<x>.py ...`` and ``python -m benchmarks.<x>``),
the ``python`` blocks and the ``toml`` blocks. A block another test runs says so in a marker just above it,
``<!-- robfilt:run-by tests/test_x.py: why -->``; a block that cannot run in a test at all (a pip install from the
network, a GPU, a run of tens of minutes) says ``<!-- robfilt:not-run why -->``. Markers are few and give reasons.

Fast (the default suite): every shell line is a command this file runs or sits in a marked block; every ``robfilt``
command line parses against the real command (its flags exist, its values have the right types, required options
are there), checked through click without running anything; every script and benchmark a page names exists and
takes the flags shown; python blocks compile and toml blocks parse; run-by markers name tests that exist.

Slow (``make test-slow``): each page's blocks run in document order, so a ``report`` finds the runs an ``attack``
before it wrote, in a fresh folder per page that holds the files the pages name (tiny weights, image folders,
Hugging Face data sets: :func:`_assets`). The rewrite rules, and nothing else, make them small:

1. ``robfilt attack``/``certify``: ``-n``/``--n-examples`` at most 4 (added when absent); ``lipschitz``: at most 2;
2. ``robfilt train``: ``--epochs`` dropped, ``--steps 2`` and ``--eval-max 16``;
3. ``--quiet`` is added to commands that take it (the output is not what is tested; the exit code is 0);
4. ``n_examples = N`` in a toml block that is a file (below), and ``n_examples=N`` in a python block, at most 8;
5. ``torchrun`` is ``python -m torch.distributed.run`` (the same launcher), the robfilt part rewritten as in 1-3;
6. ``python scripts/lipschitz_gap.py``: ``--n`` at most 1; scripts and benchmarks run from the page's folder with
   the repository on ``PYTHONPATH``;
7. a toml or python block whose first line is ``# <path>.toml`` / ``# <path>.py`` is a file the page's commands
   read: every such block of the page is written to the page's folder before the first command runs.

``robfilt`` commands run in this process (``robustbench_filters.cli.run``, as the CLI's own tests do); the gate
evaluates in process too (the ``gate_in_process`` fixture), and everything else runs as a subprocess.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from _docs import DOCUMENTS, ROOT, Block, all_blocks, argv, blocks, command_lines, robfilt_args, strip_env, unfenced
from dist_kinds import TORCHRUN_ENV

from robustbench_filters.cli import app

BLOCKS = all_blocks()
SHELL = [b for b in BLOCKS if b.lang == "bash"]
KNOWN_LANGS = {"bash", "python", "toml", ""}  # "" is a plain block (a syntax line, a diagram): nothing to run
MAX_NOT_RUN = 6


def _id(block: Block) -> str:
    return block.where


def _lines(blocks_: list[Block]) -> list[tuple[Block, str]]:
    return [(b, line) for b in blocks_ for line in command_lines(b)]


LINES = _lines(SHELL)
ROBFILT_LINES = [(b, line) for b, line in LINES if robfilt_args(argv(line)) is not None]


# --- what a line is ---------------------------------------------------------------------------------------------
def _script(words: list[str]) -> tuple[str, Path, list[str]] | None:
    """``python scripts/x.py ...`` or ``python -m benchmarks.x ...``: (kind, file, arguments), else None."""
    _, words = strip_env(words)
    if words[:1] != ["python"]:
        return None
    if len(words) > 1 and words[1].startswith("scripts/") and words[1].endswith(".py"):
        return "script", ROOT / words[1], words[2:]
    if words[1:2] == ["-m"] and len(words) > 2 and words[2].startswith("benchmarks."):
        return "benchmark", ROOT / (words[2].replace(".", "/") + ".py"), words[3:]
    return None


def _runnable(line: str) -> bool:
    words = argv(line)
    return robfilt_args(words) is not None or _script(words) is not None


# --- fast: the documentation parses against the program ---------------------------------------------------------
def test_every_block_has_a_known_language() -> None:
    unknown = [f"{b.where} ```{b.lang}" for b in BLOCKS if b.lang not in KNOWN_LANGS]
    assert not unknown, f"blocks in a language no test reads: {unknown}"


def test_every_shell_line_is_run_here_or_its_block_is_marked() -> None:
    unmarked = [f"{b.where}: {line}" for b, line in LINES if b.marker is None and not _runnable(line)]
    assert not unmarked, (
        "shell lines no test runs; make them robfilt/script commands or mark the block "
        f"<!-- robfilt:not-run why --> / <!-- robfilt:run-by tests/...: why -->: {unmarked}"
    )


def test_markers_are_few_and_say_why() -> None:
    marked = [b for b in BLOCKS if b.marker]
    not_run = [b for b in marked if b.marker == "not-run"]
    assert len(not_run) <= MAX_NOT_RUN, f"{len(not_run)} blocks are not run: {[b.where for b in not_run]}"
    for b in marked:
        assert len(b.reason.split()) >= 4, f"{b.where}: a marker needs a reason, got {b.marker_arg!r}"
    for b in (b for b in marked if b.marker == "run-by"):
        module = ROOT / str(b.run_by)
        assert re.fullmatch(r"tests/test_\w+\.py", str(b.run_by)) and module.is_file(), f"{b.where}: {b.run_by}"
        source = module.read_text()
        for name in re.findall(r"\btest_\w+", b.reason):
            assert f"def {name}(" in source, f"{b.where}: {b.run_by} has no {name}"


def test_marked_blocks_exist_where_expected() -> None:
    """Guards the marker reader: the install block is run by the install test, the GPU block by nobody."""
    readme = blocks(ROOT / "README.md")
    assert any(b.run_by == "tests/test_install.py" and "pip install ." in b.body for b in readme)
    scaling = blocks(ROOT / "docs" / "scaling.md")
    assert any(b.marker == "not-run" and "--device cuda" in b.body for b in scaling)
    assert any(b.marker is None and "torchrun" in b.body for b in scaling)


_GROUP = typer.main.get_command(app)


def _parse(args: list[str]) -> Any:
    """Parse ``robfilt ARGS`` as the program would, without running it: the click context of the command."""
    root = typer.Context(_GROUP, info_name="robfilt")
    if args[:1] in (["--version"], ["-V"]):
        return root
    command, name, rest = _GROUP, "robfilt", list(args)
    while hasattr(command, "get_command") and rest:
        sub = command.get_command(root, rest[0])
        assert sub is not None, f"robfilt has no command {rest[0]!r}"
        command, name, rest = sub, rest[0], rest[1:]
    return command.make_context(name, rest, parent=root)


@pytest.mark.parametrize(("block", "line"), ROBFILT_LINES, ids=[f"{b.where} {ln[:50]}" for b, ln in ROBFILT_LINES])
def test_every_documented_robfilt_command_parses(block: Block, line: str) -> None:
    args = robfilt_args(argv(line))
    assert args, f"{block.where}: {line}"
    _parse(args)  # raises NoSuchOption, BadParameter, MissingParameter, ... naming the problem


INLINE = [
    (f"{path.relative_to(ROOT)}", m.group(1))
    for path in DOCUMENTS
    for m in re.finditer(r"`(robfilt [^`<]+)`", unfenced(path))
]


def _flags_of(words: list[str]) -> tuple[Any, list[str]]:
    """The command ``robfilt WORDS`` names (as deep as its words go), and the flags among the words."""
    root = typer.Context(_GROUP, info_name="robfilt")
    command, rest = _GROUP, list(words)
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        sub = command.get_command(root, rest[0])
        assert sub is not None, f"robfilt has no command {rest[0]!r}"
        command, rest = sub, rest[1:]
    return command, [w.split("=", 1)[0] for w in rest if w.startswith("-")]


@pytest.mark.parametrize(("doc", "code"), INLINE, ids=[f"{d} {c[:40]}" for d, c in INLINE])
def test_every_inline_robfilt_flag_exists(doc: str, code: str) -> None:
    """Prose names commands and flags too (`robfilt attack --amp bf16`): the command and each flag exist."""
    command, flags = _flags_of(re.split(r"\s\\?\|\s", code)[0].split()[1:])  # up to a shell pipe
    known = {o for p in command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    known |= {"--help", "-h"}  # click adds the help option itself
    missing = [f for f in flags if f not in known]
    assert not missing, f"{doc}: `{code}` names {missing}, which {command.name} does not take"


def test_the_parser_check_can_fail() -> None:
    try:  # the click typer runs on: vendored as typer._click by typer >= 0.20
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as click_exc

    for bad in (["attack", "--modle", "deit"], ["lipschitz"], ["certify", "--n", "many"], ["nosuch"]):
        with pytest.raises((click_exc.ClickException, AssertionError)):
            _parse(bad)
    command, flags = _flags_of(["attack", "--amp-atacks", "--amp=bf16"])
    assert command.name == "attack" and flags == ["--amp-atacks", "--amp"]
    assert not any("--amp-atacks" in p.opts for p in command.params if hasattr(p, "opts"))


SCRIPT_LINES = [(b, line) for b, line in LINES if _script(argv(line)) is not None]


@pytest.mark.parametrize(("block", "line"), SCRIPT_LINES, ids=[f"{b.where} {ln[:50]}" for b, ln in SCRIPT_LINES])
def test_every_documented_script_exists_and_takes_its_flags(block: Block, line: str) -> None:
    kind, path, args = _script(argv(line))  # type: ignore[misc]
    assert path.is_file(), f"{block.where}: {path.relative_to(ROOT)} does not exist"
    source = path.read_text()
    if kind == "benchmark":
        source += (ROOT / "benchmarks" / "_common.py").read_text()  # the command line every benchmark shares
    for flag in (a.split("=", 1)[0] for a in args if a.startswith("--")):
        assert f'"{flag}"' in source, f"{block.where}: {path.relative_to(ROOT)} takes no {flag}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=_id)
def test_python_blocks_compile(block: Block) -> None:
    ast.parse(block.body, filename=block.where)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "toml"], ids=_id)
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(block.body)


# --- the rewrite rules ------------------------------------------------------------------------------------------
CAPS = {"attack": 4, "certify": 4, "lipschitz": 2}


def _cap(args: list[str], flags: tuple[str, ...], cap: int) -> list[str]:
    """Every value of ``flags`` at most ``cap``; the first flag with ``cap`` appended when none is given."""
    out, seen, i = [], False, 0
    while i < len(args):
        a = args[i]
        if a in flags and i + 1 < len(args):
            out += [a, str(min(int(args[i + 1]), cap))]
            seen, i = True, i + 2
            continue
        if "=" in a and a.split("=", 1)[0] in flags:
            flag, value = a.split("=", 1)
            out.append(f"{flag}={min(int(value), cap)}")
            seen = True
        else:
            out.append(a)
        i += 1
    return out if seen else [*out, flags[0], str(cap)]


def _without(args: list[str], flag: str) -> list[str]:
    out, i = [], 0
    while i < len(args):
        if args[i] == flag:
            i += 2
            continue
        if args[i].startswith(flag + "="):
            i += 1
            continue
        out.append(args[i])
        i += 1
    return out


def _takes(args: list[str], flag: str) -> bool:
    ctx = _parse([a for a in args if a not in ("-q", "--quiet")])
    return any(flag in getattr(p, "opts", ()) for p in ctx.command.params)


def shrink(args: list[str]) -> list[str]:
    """Rules 1-3 of the module docstring."""
    args = list(args)
    if args[0] in CAPS:
        args = _cap(args, ("-n", "--n-examples"), CAPS[args[0]])
    if args[0] == "train":
        args = _without(_without(_without(args, "--epochs"), "--steps"), "--eval-max")
        args += ["--steps", "2", "--eval-max", "16"]
    if not {"-q", "--quiet"} & set(args) and _takes(args, "--quiet"):
        args.append("--quiet")
    return args


def shrink_text(text: str, pattern: str) -> str:
    """Rule 4: ``n_examples = N`` (toml) / ``n_examples=N`` (python) at most 8."""
    return re.sub(pattern, lambda m: f"{m.group(1)}{min(int(m.group(2)), 8)}", text)


TOML_N = r"(^\s*n_examples\s*=\s*)(\d+)"
PY_N = r"(\bn_examples=)(\d+)"


def test_the_rewrite_rules() -> None:
    assert shrink(["attack", "--model", "deit", "-n", "64"]) == ["attack", "--model", "deit", "-n", "4", "--quiet"]
    assert shrink(["attack", "--model", "deit", "--json"])[-3:] == ["-n", "4", "--quiet"]
    assert shrink(["certify", "--n", "1000", "--n-examples=16"]) == ["certify", "--n", "1000", "--n-examples=4",
                                                                      "--quiet"]  # fmt: skip
    assert shrink(["lipschitz", "--model", "deit", "-n", "1", "-q"]) == ["lipschitz", "--model", "deit", "-n", "1",
                                                                         "-q"]  # fmt: skip
    assert shrink(["train", "--model", "deit", "--epochs", "10", "--out", "x"]) == [
        "train", "--model", "deit", "--out", "x", "--steps", "2", "--eval-max", "16", "--quiet"]  # fmt: skip
    assert shrink(["verify", "runs/x"]) == ["verify", "runs/x"]  # verify takes no --quiet
    assert shrink_text("n_examples = 500\nseed = 0\n", TOML_N) == "n_examples = 8\nseed = 0\n"
    assert shrink_text("f(n_examples=64, x=1); g(n_examples=4)", PY_N) == "f(n_examples=8, x=1); g(n_examples=4)"


# --- slow: every page runs ------------------------------------------------------------------------------------
WNIDS = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079")  # Imagenette's first five classes


def _png(path: Path, rng: Any, size: tuple[int, int]) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype="uint8")).save(path)


def _hf_images(path: Path, rng: Any, n: int, classes: int, image: str, label: str) -> None:
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as HFImage
    from PIL import Image

    images = [Image.fromarray(rng.integers(0, 256, (36, 36, 3), dtype="uint8")) for _ in range(n)]
    feats = Features({image: HFImage(), label: ClassLabel(num_classes=classes)})
    data = Dataset.from_dict({image: images, label: [i % classes for i in range(n)]}, features=feats)
    DatasetDict({"test": data}).save_to_disk(str(path))


def _weights(path: Path, arch: str, **kwargs: Any) -> None:
    import safetensors.torch
    import timm
    import torch

    import robustbench_filters  # noqa: F401  (registers the BSA/GRC DeiTs with timm)

    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in timm.create_model(arch, **kwargs).state_dict().items()}
    if path.suffix == ".pth":
        torch.save(state, path)
    else:
        safetensors.torch.save_file(state, path)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the pages name, tiny: image folders, Hugging Face data sets, weights for timm models."""
    import numpy as np
    from datasets import Dataset, DatasetDict

    root = tmp_path_factory.mktemp("doc-assets")
    rng = np.random.default_rng(0)
    for c in range(10):
        for i in range(2):
            _png(root / "data" / "val" / f"class{c}" / f"{i}.png", rng, (40, 48))
    for folder in ("imagenet/val", "imagenette2-160/val"):
        for w in WNIDS:
            for i in range(2):
                _png(root / folder / w / f"{i}.png", rng, (64, 64))
    _hf_images(root / "data" / "flowers", rng, 8, 10, "img", "fine_label")
    _hf_images(root / "data" / "c100", rng, 8, 100, "image", "label")
    text = (
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want. "
    )
    DatasetDict({"test": Dataset.from_dict({"body": [text * 3] * 6})}).save_to_disk(str(root / "data" / "wiki"))
    _weights(root / "r18.safetensors", "resnet18", num_classes=10, in_chans=1)
    _weights(root / "mynet.safetensors", "resnet18", num_classes=10)
    _weights(root / "cnx.safetensors", "convnext_atto", num_classes=100)
    _weights(root / "vit.pth", "vit_tiny_patch16_224")
    _weights(root / "bsa_grc.safetensors", "deit_tiny_bsa_grc_patch16_224", img_size=32, num_classes=10)
    return root


#: what a page needs besides the shared assets
SETUP: dict[str, Callable[[Path], None]] = {
    "study.md": lambda world: shutil.copytree(ROOT / "reports" / "study", world / "reports" / "study"),
}

RUN_LANGS = ("bash", "python", "toml")
PAGES = sorted({b.path for b in BLOCKS if b.marker is None and b.lang in RUN_LANGS and b.body.strip()})


def _run_shell(line: str, world: Path, where: str) -> None:
    from robustbench_filters.cli import run

    env_vars, words = strip_env(argv(line))
    args = robfilt_args(words)
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(env_vars, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    if words[0] == "robfilt" or words[:3] == ["python", "-m", "robustbench_filters.cli"]:
        code = run(shrink(args))  # type: ignore[arg-type]
        assert code == 0, f"{where}: `{line}` exited {code}"
        return
    if words[0] == "torchrun":
        launcher = words[1 : words.index("-m")]
        cmd = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "robustbench_filters.cli", "--",
               *shrink(args)]  # fmt: skip
    else:
        kind, path, script_args = _script(words)  # type: ignore[misc]
        if path.name == "lipschitz_gap.py":
            script_args = _cap(script_args, ("--n",), 1)
        head = [sys.executable, str(path)] if kind == "script" else [sys.executable, "-m", words[words.index("-m") + 1]]
        cmd = [*head, *script_args]
    done = subprocess.run(cmd, cwd=world, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (
        f"{where}: `{line}` exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    )


FILE_BLOCK = {
    "toml": (re.compile(r"#\s*([\w/.-]+\.toml)\b"), TOML_N),
    "python": (re.compile(r"#\s*([\w/.-]+\.py)\b"), PY_N),
}


def _write_file_block(block: Block, world: Path) -> bool:
    """Rule 7: a block that is a file is written into the page's folder (True), else nothing happens (False)."""
    if block.lang not in FILE_BLOCK or not block.body.strip():
        return False
    pattern, numbers = FILE_BLOCK[block.lang]
    target = pattern.match(block.body.splitlines()[0])
    if not target:
        return False
    path = world / target.group(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(shrink_text(block.body, numbers))
    return True


def _run_block(block: Block, world: Path) -> None:
    if block.lang == "bash":
        for line in command_lines(block):
            _run_shell(line, world, block.where)
    elif block.lang == "python":  # a file block runs too: it must at least import and define what it names
        code = shrink_text(block.body, PY_N)
        exec(compile(code, block.where, "exec"), {"__name__": "__doc_example__"})  # noqa: S102 - our own docs


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_runs(
    page: Path, assets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gate_in_process: Path
) -> None:
    import torch

    world = tmp_path / "world"
    world.mkdir()
    for entry in assets.iterdir():
        (world / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (world / "pyproject.toml").write_text("")  # the project a spec's paths must stay inside
    SETUP.get(page.name, lambda w: None)(world)
    monkeypatch.chdir(world)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        page_blocks = [b for b in blocks(page) if b.marker is None and b.lang in RUN_LANGS]
        for block in page_blocks:
            _write_file_block(block, world)
        ran = 0
        for block in page_blocks:
            _run_block(block, world)
            ran += 1
        assert ran, f"{page.name}: nothing ran"
    finally:
        torch.set_num_threads(threads)
