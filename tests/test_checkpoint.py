"""Checkpoints: safetensors + JSON card round trips, corruption, pickle refusal and card validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors.torch
import torch

from robustbench_filters.core.errors import CheckpointError, RobfiltError
from robustbench_filters.models import create_model, load_checkpoint, save_checkpoint
from robustbench_filters.models.built import built_of
from robustbench_filters.models.checkpoint import CARD, WEIGHTS, sha256_file

ALL_VARIANTS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc", "lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]


def _input(name: str) -> torch.Tensor:
    return torch.rand(2, 1, 28, 28) if name.startswith("deit") else torch.randint(0, 128, (2, 16))


def _perturb(model: torch.nn.Module) -> None:
    """Move every weight off its init, so a load that silently keeps fresh weights is caught."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))


@pytest.fixture
def deit_ckpt(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    model = create_model("deit-bsa-grc", checkpoint="none")
    _perturb(model)
    return model, save_checkpoint(model, tmp_path / "ckpt", recipe={"epochs": 1}, metrics={"test_acc": 0.5})


@pytest.mark.parametrize("name", ALL_VARIANTS)
def test_round_trip_gives_identical_outputs(name: str, tmp_path: Path) -> None:
    overrides = {"grc_learnable": True} if name == "lm-bsa-grc" else {}
    model = create_model(name, **overrides, checkpoint="none")
    _perturb(model)
    folder = save_checkpoint(model, tmp_path / name, recipe={"lr": 1e-3}, metrics={"test_acc": 0.9})
    assert sorted(p.name for p in folder.iterdir()) == [CARD, WEIGHTS]
    card = json.loads((folder / CARD).read_text())
    assert card["name"] == name and card["size"] == "micro" and card["metrics"] == {"test_acc": 0.9}
    assert card["weights_sha256"] == sha256_file(folder / WEIGHTS)
    assert ("bsa" in card["filters"]) == ("bsa" in name) and ("grc" in card["filters"]) == ("grc" in name)

    loaded = load_checkpoint(folder, name=name)
    assert not loaded.training
    assert built_of(loaded).spec.config == built_of(model).spec.config
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    x = _input(name)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    # create_model(checkpoint=...) goes through the same loader
    via_factory = create_model(name, checkpoint=folder)
    with torch.no_grad():
        assert torch.equal(via_factory(x), model(x))


def test_lm_tied_head_stays_tied_after_loading(tmp_path: Path) -> None:
    model = create_model("lm", checkpoint="none")
    _perturb(model)
    loaded = load_checkpoint(save_checkpoint(model, tmp_path / "lm"))
    assert loaded.lm_head.weight is loaded.tok_embed.weight
    assert torch.equal(loaded.tok_embed.weight, model.tok_embed.weight)


def test_fused_attn_may_change_on_load_but_architecture_may_not(deit_ckpt) -> None:
    model, folder = deit_ckpt
    manual = load_checkpoint(folder, fused_attn=False)
    assert manual.blocks[0].attn.fused_attn is False
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(manual(x), model(x), atol=1e-5)
    with pytest.raises(CheckpointError, match="cannot override"):
        load_checkpoint(folder, grc_lambda=0.3)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupted_weights_are_detected(deit_ckpt, damage: str) -> None:
    _, folder = deit_ckpt
    weights = folder / WEIGHTS
    data = bytearray(weights.read_bytes())
    if damage == "flip":
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
    else:
        data = data[: len(data) - 1000]
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted") as info:
        load_checkpoint(folder)
    assert "\n" not in str(info.value)


def test_pickle_files_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    model = create_model("deit", checkpoint="none")
    torch.save(model.state_dict(), tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="pickle.*safetensors.*allow_pickle=True"):
        load_checkpoint(tmp_path / "x.pt", name="deit")
    # content, not only the suffix: a zip pickle renamed to model.safetensors is refused too
    (tmp_path / "renamed").mkdir()
    torch.save(model.state_dict(), tmp_path / "renamed" / WEIGHTS)
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(tmp_path / "renamed")


def test_allow_pickle_loads_a_state_dict_with_weights_only(tmp_path: Path) -> None:
    model = create_model("deit-bsa", checkpoint="none")
    _perturb(model)
    torch.save(model.state_dict(), tmp_path / "x.pt")
    loaded = load_checkpoint(tmp_path / "x.pt", name="deit-bsa", allow_pickle=True)
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    # a state dict for another architecture does not fit
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(tmp_path / "x.pt", name="deit", allow_pickle=True)
    # weights_only=True: a pickle holding an arbitrary object is not unpickled
    torch.save({"obj": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="weights_only"):
        load_checkpoint(tmp_path / "evil.pt", name="deit", allow_pickle=True)


class _Evil:
    """Stands for a pickle payload; weights_only loading must refuse to build it."""


def test_checkpoint_under_the_wrong_model_name_is_refused(deit_ckpt) -> None:
    _, folder = deit_ckpt
    with pytest.raises(CheckpointError, match="'deit-bsa-grc', not 'deit-bsa'"):
        load_checkpoint(folder, name="deit-bsa")
    with pytest.raises(CheckpointError, match="not 'lm'"):
        create_model("lm", checkpoint=folder)


def test_card_with_unknown_config_keys_is_refused(deit_ckpt) -> None:
    _, folder = deit_ckpt
    card = json.loads((folder / CARD).read_text())
    card["config"]["attn_temperature"] = 2.0
    (folder / CARD).write_text(json.dumps(card))
    with pytest.raises(RobfiltError, match="unknown config keys.*attn_temperature"):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda card: card.update(format="something-else"), "not a robfilt checkpoint card"),
        (lambda card: card.update(schema_version=99), "schema 99"),
        (lambda card: card.pop("weights_sha256"), "lacks the field 'weights_sha256'"),
        (lambda card: card["config"].update(grc=False), "config has bsa=True, grc=False"),
    ],
)
def test_bad_cards_are_refused(deit_ckpt, edit, match: str) -> None:
    _, folder = deit_ckpt
    card = json.loads((folder / CARD).read_text())
    edit(card)
    (folder / CARD).write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder)


def test_missing_or_broken_card_and_missing_path(deit_ckpt, tmp_path: Path) -> None:
    _, folder = deit_ckpt
    (folder / CARD).write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(folder)
    (folder / CARD).unlink()
    with pytest.raises(CheckpointError, match="card .* is missing"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")


def test_safetensors_header_starting_with_0x80_is_not_taken_for_a_pickle(tmp_path: Path) -> None:
    """Regression: the header length is a little-endian u64 padded to 8 bytes, so about 1 file in 32 starts
    with byte 0x80, the pickle protocol marker. Such a valid safetensors file must load."""
    model = create_model("deit", checkpoint="none")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    weights = folder / WEIGHTS
    for pad in range(256):
        blob = safetensors.torch.save(model.state_dict(), metadata={"pad": "x" * pad})
        if blob[:1] == b"\x80":
            break
    else:  # pragma: no cover - the padding always hits within 256 steps
        pytest.fail("could not build a header whose first byte is 0x80")
    weights.write_bytes(blob)
    card = json.loads((folder / CARD).read_text())
    card["weights_sha256"] = sha256_file(weights)
    (folder / CARD).write_text(json.dumps(card))
    loaded = load_checkpoint(folder, name="deit")
    assert torch.equal(loaded.head.weight, model.head.weight)


def test_zoo_without_weights_explains_how_to_get_them(tmp_path, monkeypatch) -> None:
    import robustbench_filters.models.zoo_index as zoo_index

    monkeypatch.setattr(zoo_index, "ZOO_DIR", tmp_path)  # an empty zoo
    with pytest.raises(CheckpointError, match="robfilt train"):
        create_model("lm-bsa", checkpoint="zoo")
