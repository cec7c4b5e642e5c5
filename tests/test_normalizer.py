"""The normaliser wraps any model at its root: state-dict keys unchanged, zoo logits identical to before."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from torch import nn

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_images
from robustbench_filters.models import create_model
from robustbench_filters.models.normalize import InputNormalize, attach_normalizer, get_normalizer

ZOO_DEITS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]


def _old_placement(model: nn.Module) -> nn.Module:
    """The previous design: the same normaliser as a pre-hook on the ViT patch embedding, none at the root."""
    old = copy.deepcopy(model)
    norm = old.input_norm
    old._forward_pre_hooks.clear()
    del old.input_norm
    old.patch_embed.input_norm = norm
    old.patch_embed.register_forward_pre_hook(lambda m, args: (m.input_norm(args[0]), *args[1:]))
    return old


@pytest.mark.parametrize("name", ZOO_DEITS)
def test_zoo_checkpoints_give_identical_logits_with_the_root_normaliser(name: str) -> None:
    model = create_model(name, checkpoint="zoo")
    x = load_images(n_max=32).x
    with torch.no_grad():
        now, before = model(x), _old_placement(model)(x)
    assert torch.equal(now, before)
    assert not any("input_norm" in k for k in model.state_dict())
    # and the weights really are the zoo's: a fresh untrained model gives other logits
    with torch.no_grad():
        assert not torch.allclose(create_model(name, checkpoint="none")(x), now)


def test_root_normaliser_works_for_a_cnn_and_keeps_its_keys() -> None:
    plain = timm.create_model("resnet18", pretrained=False, num_classes=5).eval()
    wrapped = attach_normalizer(copy.deepcopy(plain), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    assert isinstance(wrapped, type(plain)) and isinstance(get_normalizer(wrapped), InputNormalize)
    x = torch.rand(2, 3, 32, 32)
    mean, std = torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1), torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    with torch.no_grad():
        assert torch.equal(wrapped(x), plain((x - mean) / std))
    # attaching again replaces mean/std instead of normalising twice
    attach_normalizer(wrapped, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    with torch.no_grad():
        assert torch.equal(wrapped(x), plain(x))
    assert len(wrapped._forward_pre_hooks) == 1


def test_normaliser_refuses_containers_and_bad_std() -> None:
    with pytest.raises(RobfiltError, match="Sequential"):
        attach_normalizer(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), (0.5,), (0.5,))
    with pytest.raises(RobfiltError, match="std values must be positive"):
        attach_normalizer(nn.Linear(2, 2), (0.5,), (0.0,))
