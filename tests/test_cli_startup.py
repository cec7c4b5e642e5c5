"""The command line starts without the heavy libraries, and its light copies of names equal the heavy originals.

``robfilt --help``, ``<command> --help``, ``--version`` and ``models list`` must not import torch, timm,
torchattacks, pandas or matplotlib (seconds of start-up). Each case runs in a fresh interpreter and reports which
of them ended up in ``sys.modules``. The names those paths use (:mod:`robustbench_filters.core.names`,
:mod:`robustbench_filters.models.zoo_index`) are checked against the modules that build models and attacks.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from robustbench_filters.cli import LAZY, run
from robustbench_filters.core import names
from robustbench_filters.core.family import Family
from robustbench_filters.core.names import ZOO_MODELS
from robustbench_filters.core.versions import __version__
from robustbench_filters.models import zoo_index

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "timm", "torchattacks", "pandas", "matplotlib")
MARK = "@@heavy-modules@@"

# Runs the CLI in-process in a fresh interpreter, then names the heavy modules it imported (on stderr).
PROBE = f"""
import json, sys
from robustbench_filters.cli import run
try:
    code = run(sys.argv[1:])
finally:
    sys.stdout.flush()
    sys.stderr.write("{MARK}" + json.dumps([m for m in {HEAVY!r} if m in sys.modules]) + "\\n")
sys.exit(code)
"""


def _probe(*argv: str) -> tuple[int, str, list[str]]:
    """(exit code, stdout, heavy modules imported) of ``robfilt ARGV`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=REPO, capture_output=True, text=True)
    line = next((x for x in done.stderr.splitlines() if x.startswith(MARK)), None)
    assert line is not None, done.stderr[-2000:]
    return done.returncode, done.stdout, json.loads(line[len(MARK) :])


def test_importing_the_cli_imports_no_heavy_library() -> None:
    code = f"import json, sys, robustbench_filters.cli; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []


COMMANDS = ("train", "attack", "lipschitz", "certify", "report", "check", "study", "verify")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["-V"],
        ["models", "--help"],
        ["models", "list", "--help"],
        ["models", "show", "--help"],
        *[[c, "--help"] for c in COMMANDS],
    ],
    ids=" ".join,
)
def test_help_and_version_start_without_heavy_libraries(argv: list[str]) -> None:
    code, out, heavy = _probe(*argv)
    assert code == 0 and out.strip()
    assert heavy == []


def _list_table_the_heavy_way() -> list[dict[str, Any]]:
    """What ``models list`` showed before it went light: the registry, timm names and cards read by checkpoint."""
    from robustbench_filters.models import checkpoint as ck
    from robustbench_filters.models import registry as reg
    from robustbench_filters.models import timm_registry as tr

    rows = []
    for name in reg.MODEL_NAMES:
        family, bsa, grc = reg.parse_name(name)
        zoo, noisy = {}, {}
        for size in reg.SIZES[family]:
            if (ck.zoo_path(name, size) / ck.WEIGHTS).exists():
                zoo[size] = ck.read_card(ck.zoo_path(name, size) / ck.CARD)["metrics"]
            for sigma in ck.ZOO_NOISE_SIGMAS:
                folder = ck.zoo_path(name, size, sigma)
                if (folder / ck.WEIGHTS).exists():
                    card = ck.read_card(folder / ck.CARD)
                    noisy[f"{size}-{ck.noise_tag(sigma)}"] = {
                        "metrics": card["metrics"],
                        "certification": card.get("certification"),
                    }
        timm = {s: tr.timm_name(name, s) for s in reg.SIZES[family]} if family is Family.IMAGE else {}
        rows.append({"name": name, "family": family.value, "bsa": bsa, "grc": grc, "sizes": list(reg.SIZES[family]),
                     "zoo": zoo, "timm": timm, "zoo_noise": noisy})  # fmt: skip
    for name, (arch, training) in ZOO_MODELS.items():  # the zoo models: an architecture's weights, their own name
        family, bsa, grc = reg.parse_name(arch)
        card = ck.read_card(ck.zoo_path(name, "micro") / ck.CARD)
        rows.append({"name": name, "family": family.value, "bsa": bsa, "grc": grc, "sizes": ["micro"],
                     "zoo": {"micro": card["metrics"]}, "timm": {}, "zoo_noise": {}, "architecture": card["name"],
                     "training": training})  # fmt: skip
    return rows


def test_models_list_is_light_and_shows_what_the_heavy_path_shows() -> None:
    code, out, heavy = _probe("models", "list", "--json")
    assert code == 0 and heavy == []
    rows = json.loads(out)
    assert rows == json.loads(json.dumps(_list_table_the_heavy_way()))
    assert any(r["zoo"] for r in rows) and any(r["zoo_noise"] for r in rows)  # the bundled zoo is listed

    code, table, heavy = _probe("models", "list")
    assert code == 0 and heavy == []
    deit = next(r for r in rows if r["name"] == "deit")
    assert f"acc {100 * deit['zoo']['micro']['test_acc']:.1f}%" in table
    assert "certified" in table and "deit_micro_bsa_grc_patch4_28" in table


def test_light_model_names_equal_the_registry() -> None:
    from robustbench_filters.models import checkpoint as ck
    from robustbench_filters.models import registry as reg
    from robustbench_filters.models import timm_registry as tr
    from robustbench_filters.models.config import DeiTConfig
    from robustbench_filters.models.deit import DEIT_SIZES

    assert names.SIZES == reg.SIZES and all(
        reg.resolve_spec(n).family is names.parse_name(n)[0] for n in reg.MODEL_NAMES
    )
    for size, kw in DEIT_SIZES.items():
        cfg = DeiTConfig(**kw)
        assert names.DEIT_GEOMETRY[size] == (cfg.patch_size, cfg.img_size)
    assert set(names.DEIT_GEOMETRY) == set(DEIT_SIZES) and names.TIMM_VARIANTS == tr.VARIANTS
    assert all(names.timm_name(n, s) == tr.timm_name(n, s) for n in tr.VARIANTS for s in DEIT_SIZES)
    assert ck.zoo_path is zoo_index.zoo_path  # one folder rule for the light index and the loader


def test_light_attack_names_equal_the_catalogue() -> None:
    from robustbench_filters import configs
    from robustbench_filters.attacks.catalogue import ATTACKS
    from robustbench_filters.attacks.corruption_transforms import CORRUPTIONS

    assert tuple(n for n, a in ATTACKS.items() if Family.IMAGE in a.families) == names.attacks_for(Family.IMAGE)
    assert tuple(n for n, a in ATTACKS.items() if Family.LM in a.families) == names.LM_ATTACKS
    assert tuple(CORRUPTIONS) == names.CORRUPTIONS
    assert (names.WORDSWAP, names.CORRUPTION) == (configs.WORDSWAP, configs.CORRUPTION)
    assert set(configs.CONTAMINATIONS) == {names.WORDSWAP, names.CORRUPTION}
    text = names.attack_help()
    assert all(n in text for n in (*ATTACKS, *CORRUPTIONS, configs.WORDSWAP, configs.CORRUPTION))


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([flag]) == 0
    assert capsys.readouterr().out == f"robfilt {__version__}\n"
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__


def test_lazy_commands_are_listed_with_their_own_summary(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    monkeypatch.setenv("COLUMNS", "300")  # one line per command in the help panel

    for name, (module, summary) in LAZY.items():
        command = next(
            obj
            for obj in vars(importlib.import_module(module, "robustbench_filters.cli")).values()
            if inspect.isfunction(obj) and obj.__name__ == f"{name}_cmd"
        )
        first = inspect.cleandoc(command.__doc__).split("\n\n")[0]
        assert " ".join(first.split()) == summary
    assert run(["--help"]) == 0
    listing = [line.strip("│ ").split(None, 1) for line in capsys.readouterr().out.splitlines()]
    listed = {row[0]: row[1].strip() for row in listing if len(row) == 2}
    assert all(listed[name] == summary for name, (_, summary) in LAZY.items())
    assert run(["check", "--help"]) == 0  # a lazy command still shows its own options
    assert "--spec" in capsys.readouterr().out


def test_light_timm_configs_equal_the_model_configs() -> None:
    """The pretrained_cfg registered from plain names (before robfilt's models are imported) is the model's own."""
    from robustbench_filters.models.registry import resolve_spec
    from robustbench_filters.models.timm_registry import REGISTERED, _pretrained_cfg

    assert names.TIMM_REGISTERED == REGISTERED
    for arch, (name, size) in REGISTERED.items():
        assert names.timm_pretrained_cfg(arch) == _pretrained_cfg(resolve_spec(name, size).config, arch), arch
