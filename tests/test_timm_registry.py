"""robfilt's DeiT variants in timm's registry: every name builds, and its state dict round-trips with robfilt's."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import robustbench_filters  # noqa: F401 - importing the package registers the names (even after timm)
from robustbench_filters.cli import run
from robustbench_filters.models import TIMM_NAMES, create_model, timm_name
from robustbench_filters.models.built import built_of
from robustbench_filters.models.normalize import get_normalizer

#: every timm name of a robfilt DeiT: the registered ones plus timm's own plain DeiTs
ALL = {**TIMM_NAMES, **{timm_name("deit", s): ("deit", s) for s in ("tiny", "small", "base")}}
FORWARD = {"micro", "tiny"}  # sizes whose logits are compared too (small/base: keys and shapes only, for time)


def test_every_variant_and_size_is_registered() -> None:
    assert len(TIMM_NAMES) == 13
    assert {"deit_tiny_bsa_grc_patch16_224", "deit_micro_grc_patch4_28", "deit_base_bsa_patch16_224"} <= set(TIMM_NAMES)
    assert set(timm.list_models("deit_*_bsa*")) >= {n for n in TIMM_NAMES if "bsa" in n}
    assert not set(timm.list_models(pretrained=True)) & set(TIMM_NAMES)  # no weights to download


@pytest.mark.parametrize("arch", sorted(ALL))
def test_state_dicts_round_trip_between_timm_and_robfilt(arch: str) -> None:
    name, size = ALL[arch]
    torch.manual_seed(0)
    # keys and shapes alone need no weights: the small and base sizes are built on the meta device (seconds saved each)
    with torch.device("cpu" if size in FORWARD else "meta"):
        theirs = timm.create_model(arch).eval()
        ours = create_model(name, size, checkpoint="none")
    assert get_normalizer(theirs) is None and get_normalizer(ours) is not None
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    if size in FORWARD:
        cfg = theirs.pretrained_cfg
        c, h, w = cfg["input_size"]
        x = torch.rand(2, c, h, w)
        mean, std = torch.tensor(cfg["mean"]).view(1, -1, 1, 1), torch.tensor(cfg["std"]).view(1, -1, 1, 1)
        with torch.no_grad():
            assert torch.allclose(ours(x), theirs((x - mean) / std), atol=1e-5, rtol=0)


def test_registered_models_take_timm_arguments_and_build_our_variant() -> None:
    model = timm.create_model("deit_tiny_bsa_grc_patch16_224", num_classes=10, in_chans=1, img_size=32)
    spec = built_of(model).spec
    assert spec.bsa and spec.grc and spec.config.num_classes == 10 and spec.config.img_size == 32
    assert model.pretrained_cfg["input_size"] == (1, 32, 32) and len(model.pretrained_cfg["mean"]) == 1
    assert model(torch.rand(1, 1, 32, 32)).shape == (1, 10)


def test_pretrained_loads_the_bundled_zoo_weights_only() -> None:
    model = timm.create_model("deit_micro_bsa_grc_patch4_28", pretrained=True)
    zoo = create_model("deit-bsa-grc", checkpoint="zoo")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), zoo.state_dict().values(), strict=True))
    with pytest.raises(Exception, match="bundles deit-grc weights at size micro only"):
        timm.create_model("deit_tiny_grc_patch16_224", pretrained=True)


def test_models_list_shows_the_timm_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["deit-bsa-grc"]["timm"]["tiny"] == "deit_tiny_bsa_grc_patch16_224"
    assert rows["deit"]["timm"]["tiny"] == "deit_tiny_patch16_224" and rows["lm"]["timm"] == {}
    assert run(["models", "show", "deit-grc", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timm"] == "deit_micro_grc_patch4_28"


@pytest.mark.parametrize(
    "script",
    [
        "import robustbench_filters, sys; assert 'timm' not in sys.modules; import timm",  # the package first
        "import timm, robustbench_filters",  # timm first
    ],
    ids=["package-then-timm", "timm-then-package"],
)
def test_importing_the_package_alone_registers_the_variants_with_timm(script: str) -> None:
    """The documented contract, in a fresh interpreter: nothing but ``import robustbench_filters`` is needed."""
    import subprocess
    import sys

    check = (
        f"{script}\nm = timm.create_model('deit_micro_bsa_grc_patch4_28')\n"
        "assert type(m).__name__ == 'VisionTransformer'\nprint(len(timm.list_models('deit_*_bsa*')))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 6
