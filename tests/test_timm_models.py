"""``timm:<arch>`` for every family, with model arguments, the root normaliser and plain weight files."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

from robustbench_filters.core.errors import CheckpointError, RobfiltError
from robustbench_filters.models import create_model
from robustbench_filters.models.built import built_of
from robustbench_filters.models.loading import load_model
from robustbench_filters.models.normalize import get_normalizer
from robustbench_filters.models.ref import ModelKind

R18 = "timm:resnet18?num_classes=10&in_chans=1&img_size=32"


def _save(model: torch.nn.Module, path: Path) -> Path:
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


@pytest.fixture(scope="module")
def r18_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    """A 10-class, 1-channel resnet18 (trained weights stand-in: seed 7), saved as safetensors."""
    trained = load_model(R18, checkpoint="none", seed=7).module
    return _save(trained, tmp_path_factory.mktemp("w") / "r18.safetensors"), trained


def test_ten_class_grey_resnet18_round_trip_gives_identical_logits(r18_file) -> None:
    path, trained = r18_file
    loaded = load_model(R18, checkpoint=str(path), seed=0)
    assert loaded.ref.kind is ModelKind.TIMM and loaded.source == str(path)
    assert loaded.input is not None and loaded.input.image_shape == (1, 32, 32)
    x = torch.rand(4, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded.module(x), trained(x))
        assert loaded.module(x).shape == (4, 10)
    # the keys are timm's own: the file loads into a bare timm model too
    bare = timm.create_model("resnet18", num_classes=10, in_chans=1)
    bare.load_state_dict(safetensors.torch.load_file(str(path)), strict=True)


def test_model_args_from_the_command_line_are_merged(r18_file) -> None:
    path, trained = r18_file
    loaded = load_model("timm:resnet18", checkpoint=str(path), model_args={"num_classes": 10, "in_chans": 1})
    x = torch.rand(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded.module(x), trained(x))
    assert loaded.label == "timm:resnet18?num_classes=10&in_chans=1"


def test_a_checkpoint_for_another_head_is_one_line_with_the_fix(r18_file) -> None:
    path, _ = r18_file
    with pytest.raises(CheckpointError) as info:
        load_model("timm:resnet18?in_chans=1", checkpoint=str(path))
    msg = str(info.value)
    assert "\n" not in msg and "does not fit timm:resnet18?in_chans=1" in msg
    assert "fc.weight: file 10x512 vs model 1000x512" in msg and "num_classes=10" in msg
    with pytest.raises(CheckpointError, match=r"conv1.weight: file 64x1x7x7 vs model 64x3x7x7.*in_chans=1"):
        load_model("timm:resnet18?num_classes=10", checkpoint=str(path))


def test_missing_and_unexpected_keys_are_listed(tmp_path: Path, r18_file) -> None:
    _, trained = r18_file
    state = dict(trained.state_dict())
    state.pop("fc.bias")
    state["extra.weight"] = torch.zeros(1)
    safetensors.torch.save_file(state, str(tmp_path / "bad.safetensors"))
    with pytest.raises(CheckpointError, match=r"1 missing \(fc.bias\); 1 unexpected \(extra.weight\)"):
        load_model(R18, checkpoint=str(tmp_path / "bad.safetensors"))


def test_torch_files_need_allow_pickle_and_lose_their_wrappers(tmp_path: Path, r18_file) -> None:
    _, trained = r18_file
    wrapped = {"epoch": 3, "state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}}
    torch.save(wrapped, tmp_path / "ddp.pth")
    with pytest.raises(CheckpointError, match="pickle/torch file"):
        load_model(R18, checkpoint=str(tmp_path / "ddp.pth"))
    loaded = load_model(R18, checkpoint=str(tmp_path / "ddp.pth"), allow_pickle=True)
    x = torch.rand(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded.module(x), trained(x))
    torch.save({"model": {f"model.{k}": v for k, v in trained.state_dict().items()}}, tmp_path / "pl.pt")
    assert load_model(R18, checkpoint=str(tmp_path / "pl.pt"), allow_pickle=True).source.endswith("pl.pt")
    (tmp_path / "junk.safetensors").write_bytes(b"not a weights file")
    with pytest.raises(CheckpointError, match="cannot read .*junk.safetensors as safetensors"):
        load_model(R18, checkpoint=str(tmp_path / "junk.safetensors"))


@pytest.mark.parametrize(
    ("ref", "shape", "classes"),
    [
        ("timm:resnet18", (3, 64, 64), 1000),
        ("timm:convnext_atto?num_classes=7", (3, 64, 64), 7),
        ("timm:mobilenetv3_small_050?num_classes=5&in_chans=1", (1, 64, 64), 5),
        ("timm:vit_tiny_patch16_224?img_size=32&patch_size=8&num_classes=10", (3, 32, 32), 10),
        ("timm:swin_tiny_patch4_window7_224?num_classes=3&embed_dim=24&depths=[1,1,1,1]", (3, 224, 224), 3),
        ("timm:deit_tiny_bsa_grc_patch16_224?img_size=32&num_classes=10", (3, 32, 32), 10),
    ],
)
def test_every_family_builds_with_arguments_and_a_normaliser(ref: str, shape: tuple, classes: int) -> None:
    loaded = load_model(ref, checkpoint="none")
    assert get_normalizer(loaded.module) is not None and not loaded.module.training
    arch, _, _ = ref[5:].partition("?")
    args = loaded.ref.args
    bare = timm.create_model(arch, **{k: v for k, v in args.items() if not (k == "img_size" and "resnet" in arch)})
    assert list(loaded.module.state_dict()) == list(bare.state_dict())
    with torch.no_grad():
        assert loaded.module(torch.rand(1, *shape)).shape == (1, classes)
    assert loaded.input.in_chans == shape[0]


def test_normaliser_comes_from_the_pretrained_cfg_or_the_arguments() -> None:
    norm = get_normalizer(load_model("timm:resnet18", checkpoint="none").module)
    assert torch.allclose(norm.mean.flatten(), torch.tensor([0.485, 0.456, 0.406]))
    grey = get_normalizer(load_model("timm:resnet18?in_chans=1", checkpoint="none").module)
    assert torch.allclose(grey.mean.flatten(), torch.tensor([0.449]), atol=1e-6)
    mine = load_model(
        "timm:resnet18?in_chans=1&mean=0.5&std=[0.25]&crop_pct=1&interpolation=bilinear", checkpoint="none"
    )
    assert get_normalizer(mine.module).mean.item() == 0.5 and get_normalizer(mine.module).std.item() == 0.25
    assert mine.input.crop_pct == 1.0 and mine.input.interpolation == "bilinear"


def test_same_seed_same_random_weights() -> None:
    a = load_model("timm:resnet18?num_classes=3", checkpoint="none", seed=1).module
    b = load_model("timm:resnet18?num_classes=3", checkpoint="none", seed=1).module
    c = load_model("timm:resnet18?num_classes=3", checkpoint="none", seed=2).module
    assert torch.equal(a.fc.weight, b.fc.weight) and not torch.equal(a.fc.weight, c.fc.weight)


def test_zoo_weights_through_the_timm_name_equal_the_registry_model() -> None:
    loaded = load_model("timm:deit_micro_grc_patch4_28", checkpoint="zoo")
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(loaded.module(x), create_model("deit-grc", checkpoint="zoo")(x))


@pytest.mark.parametrize(
    ("ref", "checkpoint", "match"),
    [
        ("timm:resnet18", "zoo", "has no zoo weights; pass checkpoint=FILE.safetensors, or checkpoint=none"),
        ("timm:resnet18?foo=1", "none", "does not take the argument 'foo'"),
        ("timm:resnet18?pretrained=true", "none", "'pretrained' is not a model argument here"),
        ("timm:resnet18?num_classes=ten", "none", "model timm:resnet18\\?num_classes=ten: timm.create_model"),
        ("timm:resnet18?in_chans=2", "none", "mean has 3 values but the model takes 2 channels"),
        ("timm:resnet18?mean=abc", "none", "bad mean/std"),
        ("timm:resnet18?interpolation=cubic", "none", "unknown interpolation 'cubic'"),
        ("timm:deit_tiny_bsa_patch16_224?grc_lamda=0.2", "none", "unknown model option 'grc_lamda'"),
        ("timm:resnet18", "/no/such/file.safetensors", "does not exist"),
        ("deit-grc?grc_lamda=0", "none", "unknown model option 'grc_lamda'. Did you mean 'grc_lambda'"),
    ],
)
def test_bad_timm_and_registry_arguments_are_one_line(ref: str, checkpoint: str, match: str) -> None:
    with pytest.raises(RobfiltError, match=match) as info:
        load_model(ref, checkpoint=checkpoint)
    assert "\n" not in str(info.value)


def test_registry_models_take_arguments_and_plain_state_dicts(tmp_path: Path) -> None:
    boosted = load_model("deit-grc?grc_lambda=0.0&size=micro", checkpoint="none", seed=0).module
    assert built_of(boosted).spec.config.grc_lambda == 0.0
    zoo = create_model("deit-bsa", checkpoint="zoo")
    path = _save(zoo, tmp_path / "plain.safetensors")  # no card beside it: a plain state dict
    loaded = load_model("deit-bsa", checkpoint=str(path))
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(loaded.module(x), zoo(x))
