"""docs/own-models.md's "In short" section runs as written, and so does its ``benchmark`` example.

Every ``robfilt`` command of the section runs through the CLI (in process) on tiny files this test makes under
the names the section uses (w.safetensors, data/val, data/flowers, data/wiki, models.py, mypkg/nets.py and the
gate spec); only flags that shrink the work (--n-examples, --steps) are appended. The Python blocks run as
they are. The section must keep every command of issue 16 (it was the README's until the README became a front
door; tests/test_doc_commands.py runs the page's other blocks). A spec without ``allow_code = true`` is refused:
tests/test_integrity.py.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import timm
import torch
from PIL import Image

from robustbench_filters.api.benchmark import BenchmarkResult
from robustbench_filters.cli import run
from robustbench_filters.models.loading import load_model

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "own-models.md").read_text()
TITLE = "### In short"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _section(text: str, title: str) -> str:
    assert text.count(f"\n{title}\n") == 1, f"{title!r} must appear once"
    body = text.split(f"\n{title}\n", 1)[1]
    level = title.split(" ", 1)[0]
    return re.split(rf"\n{level} ", body, maxsplit=1)[0]  # up to the next heading of the same level


SECTION = _section(PAGE, TITLE)
DOCS = _section(PAGE, "### `benchmark`: RobustBench's call on robfilt's engine")


def _blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def _commands(text: str) -> list[list[str]]:
    """The robfilt command lines of the bash blocks (continuations joined, comments dropped)."""
    out = []
    for block in _blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == "robfilt":
                out.append(argv[1:])
    return out


COMMANDS = _commands(SECTION)

#: every command issue 16 asked the README to show (now this section's)
ISSUE_16 = [
    "--model timm:resnet18 --model-arg num_classes=10 --model-arg in_chans=1",
    "timm:resnet18?num_classes=10",
    "--checkpoint w.safetensors",
    "name=ref",
    "path/to/file.py:build",
    "pkg.mod:factory",
    "allow_code = true",
    'timm.create_model("deit_tiny_bsa_grc_patch16_224"',
    "--data imagefolder:",
    "--img-size",
    "--num-workers",
    "--data hf-disk:",
    "--image-column",
    "--label-column",
    "--text-column",
    "rf.evaluate(model, data=(x, y)",
    "rf.benchmark(model, data=(x, y)",
    "robfilt lipschitz --model timm:resnet18",
]


def test_the_section_shows_every_command_of_issue_16() -> None:
    missing = [s for s in ISSUE_16 if s not in SECTION]
    assert not missing, f"the section lacks {missing}"
    assert len(COMMANDS) >= 7 and {c[0] for c in COMMANDS} == {"attack", "lipschitz", "check"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the section's commands name, tiny: weights with a DDP prefix, 3 data sets, 2 factories, a spec."""
    root = tmp_path_factory.mktemp("own-models")
    torch.manual_seed(0)
    net = timm.create_model("resnet18", num_classes=10, in_chans=1)
    state = {f"module.{k}": v.contiguous() for k, v in net.state_dict().items()}  # as DDP saves it
    safetensors.torch.save_file(state, root / "w.safetensors")
    rng = np.random.default_rng(0)
    for c in range(10):
        folder = root / "data" / "val" / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as HFImage

    images = [Image.fromarray(rng.integers(0, 256, (36, 36, 3), dtype=np.uint8)) for _ in range(8)]
    feats = Features({"img": HFImage(), "fine_label": ClassLabel(num_classes=10)})
    flowers = Dataset.from_dict({"img": images, "fine_label": [i % 10 for i in range(8)]}, features=feats)
    DatasetDict({"test": flowers}).save_to_disk(str(root / "data" / "flowers"))
    text = (
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want. "
    )
    DatasetDict({"test": Dataset.from_dict({"body": [text * 3] * 6})}).save_to_disk(str(root / "data" / "wiki"))
    factory = (
        "from torch import nn\n\n\ndef build(width: int = 32, num_classes: int = 10) -> nn.Module:\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, width), nn.ReLU(), nn.Linear(width, num_classes))\n"
    )
    (root / "models.py").write_text(factory)
    (root / "gate").mkdir()
    (root / "gate" / "models.py").write_text(factory)
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "nets.py").write_text(
        "from torch import nn\n\n\ndef small_cnn(num_classes: int = 10) -> nn.Module:\n"
        "    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),\n"
        "                         nn.Linear(128, num_classes))\n"
    )
    (root / "pyproject.toml").write_text("")  # the project folder a spec's paths must stay in
    for block in _blocks(SECTION, "toml"):
        first = block.splitlines()[0]
        assert first.startswith("# "), "a toml block starts with '# <path>'"
        (root / first[2:].strip()).write_text(block)
    return root


def _fast(argv: list[str]) -> list[str]:
    """Flags that only shrink the work (the section's own flags are kept)."""
    if argv[0] == "attack":
        attacks = argv[argv.index("--attack") + 1] if "--attack" in argv else "the default"
        steps = [] if attacks == "wordswap" else ["--steps", "1"]  # word swap takes no steps (refused since issue 41)
        return [*argv, "--n-examples", "2" if "wordswap" in attacks else "4", *steps, "--json"]
    if argv[0] == "lipschitz":
        return [*argv, "--n-examples", "1", "--json"]
    return [*argv, "--quiet"]


#: what each command must show beyond exit code 0: the model labels of its run (a reference names its model with
#: --model-arg merged in, in every kind of run, so a spec's requirements and the rows agree)
LABELS = {"r18=": ["r18"], "mynet=": ["mynet"], "mypkg.nets": ["mypkg.nets:small_cnn"],
          "lipschitz": ["timm:resnet18?num_classes=10&in_chans=1"]}  # fmt: skip


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_section_command_runs(
    argv: list[str], world: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(world)
    capsys.readouterr()
    assert run(_fast(argv)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    line = " ".join(argv)
    for key, labels in LABELS.items():
        if key in line:
            assert sorted(json.loads(out)["models"]) == labels


def test_the_checkpoint_loads_through_its_prefix(world: Path) -> None:
    """w.safetensors has DDP's 'module.' prefix; the page says it is stripped: the weights are the file's."""
    state = safetensors.torch.load_file(world / "w.safetensors")
    model = load_model("timm:resnet18?num_classes=10&in_chans=1", checkpoint=str(world / "w.safetensors")).module
    for key, value in model.state_dict().items():
        if f"module.{key}" in state:
            assert torch.equal(value, state[f"module.{key}"]), key
    assert sum(f"module.{k}" in state for k in model.state_dict()) == len(state)


@pytest.mark.parametrize("doc", ["in-short", "benchmark"])
def test_python_examples_run(doc: str, world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(world)
    (block,) = _blocks(SECTION if doc == "in-short" else DOCS, "python")
    namespace: dict = {}
    exec(compile(block, f"<{doc} example>", "exec"), namespace)  # noqa: S102 - our own documentation
    res = namespace["res"]
    assert isinstance(res, BenchmarkResult) and res.attack in ("apgd-adaptive", "apgd-ce")
    assert res.clean.lo <= res.clean.acc <= res.clean.hi and res.robust.acc <= res.clean.acc
    if doc == "in-short":
        assert res.clean.n == 32 and namespace["run"].summary.models[res.model].clean.n == 32
    else:
        assert res.robust.n == 32 and res.all_checks_passed and namespace["robust_acc"] == res.robust.acc
