"""The eight model variants: timm parity, GRC parity at lambda = 0, causality, gradients and input validation."""

from __future__ import annotations

import copy

import pytest
import timm
import torch

from robustbench_filters import create_model, list_models
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models import BilateralAttention, BlockStack, set_fused_attn
from robustbench_filters.models.built import built_of
from robustbench_filters.models.config import IMAGENET_MEAN, IMAGENET_STD

DEIT_VARIANTS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]
LM_VARIANTS = ["lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]
ALL_VARIANTS = DEIT_VARIANTS + LM_VARIANTS
# every variant with its default config, plus the untied position kernel for the BSA ones
VARIANT_CASES = [(n, {}) for n in ALL_VARIANTS] + [(n, {"pos_kernel": "untied"}) for n in ALL_VARIANTS if "bsa" in n]


def _case_id(case: tuple[str, dict]) -> str:
    name, overrides = case
    return name + "".join(f"[{v}]" for v in overrides.values())


def _input(name: str) -> torch.Tensor:
    return torch.rand(2, 1, 28, 28) if name.startswith("deit") else torch.randint(0, 128, (2, 24))


def test_registry_lists_the_eight_variants() -> None:
    assert sorted(list_models()) == sorted(ALL_VARIANTS)


# ----------------------------------------------------------------------------------------------------------
# timm parity


def test_deit_tiny_is_timm_deit_tiny_patch16_224() -> None:
    """Same state-dict keys and shapes as timm's model, and the same logits on normalised input."""
    ours = create_model("deit", size="tiny", checkpoint="none")
    ref = timm.create_model("deit_tiny_patch16_224", pretrained=False).eval()
    ours_sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert list(ours_sd) == list(ref_sd)
    assert all(ours_sd[k].shape == ref_sd[k].shape for k in ref_sd)
    ref.load_state_dict(ours_sd, strict=True)
    set_fused_attn(ref, True)
    x01 = torch.rand(1, 3, 224, 224)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        logits = ours(x01)
        expected = ref((x01 - mean) / std)
        unnormalised = ref(x01)
    assert logits.shape == (1, 1000)
    assert torch.allclose(logits, expected, atol=1e-6, rtol=0)
    # the wrong reference (no normalisation) must not match: the normaliser is really inside our model
    assert not torch.allclose(logits, unnormalised, atol=1e-3)


def test_normaliser_adds_no_state_dict_keys() -> None:
    model = create_model("deit", checkpoint="none")
    assert not any("input_norm" in k for k in model.state_dict())
    ref = timm.create_model(
        "deit_tiny_patch16_224", pretrained=False, img_size=28, patch_size=4, in_chans=1, num_classes=10,
        embed_dim=64, depth=4, num_heads=4,
    )  # fmt: skip
    assert list(model.state_dict()) == list(ref.state_dict())


# ----------------------------------------------------------------------------------------------------------
# GRC parity


def test_deit_grc_with_lambda_zero_is_exactly_deit(images: torch.Tensor) -> None:
    deit = create_model("deit", checkpoint="none")
    grc0 = create_model("deit-grc", grc_lambda=0.0, checkpoint="none")
    result = grc0.load_state_dict(deit.state_dict(), strict=False)
    assert result.missing_keys == ["blocks.grc_lambda"] and not result.unexpected_keys
    grc1 = create_model("deit-grc", grc_lambda=0.1, checkpoint="none")
    grc1.load_state_dict(deit.state_dict(), strict=False)
    with torch.no_grad():
        expected = deit(images)
        assert torch.equal(grc0(images), expected)
        assert not torch.allclose(grc1(images), expected, atol=1e-4)


def test_lm_grc_with_lambda_zero_is_exactly_lm(tokens: torch.Tensor) -> None:
    lm = create_model("lm", checkpoint="none")
    grc0 = create_model("lm-grc", grc_lambda=0.0, checkpoint="none")
    result = grc0.load_state_dict(lm.state_dict(), strict=False)
    assert result.missing_keys == ["blocks.grc_lambda"] and not result.unexpected_keys
    grc1 = create_model("lm-grc", grc_lambda=0.1, checkpoint="none")
    grc1.load_state_dict(lm.state_dict(), strict=False)
    with torch.no_grad():
        expected = lm(tokens)
        assert torch.equal(grc0(tokens), expected)
        assert not torch.allclose(grc1(tokens), expected, atol=1e-4)


@pytest.mark.parametrize("name", ["deit-grc", "lm-bsa-grc"])
def test_learnable_grc_lambda_gets_gradients_through_the_model(name: str) -> None:
    model = create_model(name, grc_learnable=True, grc_lambda=0.2, checkpoint="none").train()
    assert isinstance(model.blocks, BlockStack)
    assert "blocks.grc_logit" in dict(model.named_parameters())
    assert torch.allclose(model.blocks.lambdas(), torch.tensor(0.2), atol=1e-6)
    model(_input(name)).square().mean().backward()
    grad = model.blocks.grc_logit.grad
    assert grad is not None and torch.isfinite(grad).all()
    assert (grad.flatten()[1:] != 0).all()  # [0, 0] is inert: the first block's input is Y_0


def test_grc_attn_only_leaves_the_mlp_residual_stock(tokens: torch.Tensor) -> None:
    """In a full model: boosting attention only equals a hand-written loop over the block's submodules."""
    model = create_model("lm-grc", grc_lambda=0.3, grc_sublayers="attn", checkpoint="none")
    assert model.blocks.lambdas().shape == (3, 1)
    emb = model.embed(tokens) + model.pos_embed[:, : tokens.shape[1]]
    y0 = y = emb
    with torch.no_grad():
        for blk in model.blocks:
            y = y + blk.attn(blk.norm1(y), is_causal=True) + 0.3 * (y0 - y)
            y = y + blk.mlp(blk.norm2(y))
        expected = model.lm_head(model.norm(y))
        assert torch.allclose(model(tokens), expected, atol=1e-5)
        boosted_all = create_model("lm-grc", grc_lambda=0.3, checkpoint="none")
        weights = {k: v for k, v in model.state_dict().items() if k != "blocks.grc_lambda"}
        boosted_all.load_state_dict(weights, strict=False)
        assert not torch.allclose(boosted_all(tokens), expected, atol=1e-4)


# ----------------------------------------------------------------------------------------------------------
# BSA structure


def test_gaussian_bsa_models_have_no_additive_positions() -> None:
    assert create_model("deit-bsa", checkpoint="none").pos_embed is None
    assert create_model("lm-bsa", checkpoint="none").pos_embed is None
    for name in ("deit-bsa", "lm-bsa-grc"):
        layers = [m for m in create_model(name, checkpoint="none").modules() if isinstance(m, BilateralAttention)]
        assert len(layers) == (4 if name.startswith("deit") else 3)


def test_untied_bsa_uses_positions_only_in_the_bias() -> None:
    """Untied DeiT keeps timm's pos_embed (so pretrained positions load) but never adds it to the tokens."""
    model = create_model("deit-bsa", pos_kernel="untied", checkpoint="none")
    assert model.pos_embed.shape == (1, 50, 64)
    patches = torch.randn(2, 7, 7, 64)
    tokens = model._pos_embed(patches)
    assert torch.equal(tokens[:, 1:], patches.view(2, 49, 64))
    assert torch.equal(tokens[:, 0], model.cls_token[0].expand(2, -1))
    # ... and the positions do reach the output through the bias
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        before = model(x)
        model.pos_embed.normal_(0, 1.0)
        assert not torch.allclose(model(x), before, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# causality


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("case", [c for c in VARIANT_CASES if c[0].startswith("lm")], ids=_case_id)
def test_lm_is_causal(case: tuple[str, dict], fused: bool) -> None:
    name, overrides = case
    model = create_model(name, fused_attn=fused, **overrides, checkpoint="none")
    idx = torch.randint(0, 128, (1, 20))
    positions = (0, 7, 19)
    batch = idx.repeat(len(positions) + 1, 1)  # row 0: original; row r: token positions[r - 1] changed
    for r, t in enumerate(positions, start=1):
        batch[r, t] = (idx[0, t] + 1) % 128
    with torch.no_grad():
        logits = model(batch)
    for r, t in enumerate(positions, start=1):
        a, b = logits[0], logits[r]
        assert torch.allclose(a[:t], b[:t], atol=1e-6, rtol=0), f"{name}: position < {t} saw token {t}"
        assert (a[t:] - b[t:]).abs().max() > 1e-5, f"{name}: changing token {t} changed nothing"


# ----------------------------------------------------------------------------------------------------------
# forward / backward for every variant


@pytest.mark.parametrize("case", VARIANT_CASES, ids=_case_id)
def test_variant_forward_shape_and_finite_gradients(case: tuple[str, dict]) -> None:
    name, overrides = case
    model = create_model(name, **overrides, checkpoint="none").train()
    assert built_of(model).spec.name == name
    x = _input(name)
    out = model(x)
    assert out.shape == ((2, 10) if name.startswith("deit") else (2, 24, 128))
    assert torch.isfinite(out).all()
    torch.nn.functional.cross_entropy(
        out.reshape(-1, out.shape[-1]), torch.zeros(out.numel() // out.shape[-1]).long()
    ).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: {pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: {pname} has a non-finite gradient"
    # the filter parameters really learn. Exception: DeiT reads out the CLS token only, and the Gaussian kernel
    # gives CLS b = 0, so the last block's widths only shape patch tokens that no one reads (zero gradient).
    layers = [m for m in model.modules() if isinstance(m, BilateralAttention)]
    if name.startswith("deit") and layers and layers[-1].pos_kernel == "gaussian":
        assert layers[-1].sigma_theta.grad.abs().sum() == 0
        layers = layers[:-1]
    for m in layers:
        learned = m.sigma_theta if m.pos_kernel == "gaussian" else m.pos_q.weight
        assert learned.grad.abs().sum() > 0


def test_fused_and_manual_paths_give_the_same_model_output(images: torch.Tensor, tokens: torch.Tensor) -> None:
    for name in ALL_VARIANTS:
        x = images if name.startswith("deit") else tokens
        model = create_model(name, checkpoint="none")
        with torch.no_grad():
            fused = model(x)
            manual = set_fused_attn(model, False)(x)
        assert torch.allclose(fused, manual, atol=1e-5), name


# ----------------------------------------------------------------------------------------------------------
# bad input: one-line RobfiltError with a fix


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("deit-bsx", {}, "Did you mean 'deit-bsa'"),
        ("lm-grcc", {}, "Did you mean 'lm-grc'"),
        ("deit-grc", {"grc_lambda": 1.0}, r"grc_lambda must be in \[0, 1\)"),
        ("deit-grc", {"grc_lambda": -0.1}, r"grc_lambda must be in \[0, 1\)"),
        ("lm-grc", {"grc_lambda": float("nan")}, r"grc_lambda must be in \[0, 1\)"),
        ("lm-grc", {"grc_lambda": "lots"}, r"grc_lambda must be a number in \[0, 1\), got 'lots'"),
        ("deit-bsa", {"bsa_sigma": (0, 4)}, "sigma must be positive"),
        ("lm-bsa", {"bsa_sigma": (-1, 4)}, "sigma must be positive"),
        ("deit", {"img_size": 30}, "not divisible by patch_size"),
        ("deit", {"grc_lamda": 0.2}, "unknown model option 'grc_lamda'. Did you mean 'grc_lambda'"),
        ("deit-bsa", {"pos_kernel": "cosine"}, "unknown pos_kernel"),
        ("deit-grc", {"grc_sublayers": "mlp"}, "unknown grc_sublayers"),
        ("deit", {"grc": True}, "set by the model name"),
    ],
)
def test_bad_model_input_raises_one_line_robfilt_error(name: str, overrides: dict, match: str) -> None:
    with pytest.raises(RobfiltError, match=match) as info:
        create_model(name, **overrides, checkpoint="none")
    assert "\n" not in str(info.value)


def test_unknown_size_lists_the_sizes() -> None:
    with pytest.raises(RobfiltError, match="micro"):
        create_model("lm", size="base", checkpoint="none")


def test_lm_sequence_longer_than_block_size_is_a_user_error() -> None:
    model = create_model("lm-bsa", block_size=16, checkpoint="none")
    with pytest.raises(RobfiltError, match="exceeds block_size 16"):
        model(torch.randint(0, 128, (1, 17)))


def test_grc_deit_refuses_timm_paths_that_would_skip_the_boosting(images: torch.Tensor) -> None:
    """timm's grad checkpointing and forward_intermediates iterate model.blocks and would drop GRC silently."""
    model = create_model("deit-grc", grc_lambda=0.5, checkpoint="none")
    with pytest.raises(RobfiltError, match="not supported for GRC"):
        model.set_grad_checkpointing(True)
    model.set_grad_checkpointing(False)  # turning it off is harmless
    with pytest.raises(RobfiltError, match="not supported for GRC"):
        model.forward_intermediates(images)
    create_model("deit", checkpoint="none").set_grad_checkpointing(True)  # the stock model keeps timm's behaviour


@pytest.mark.parametrize(
    "case",
    [("deit-bsa-grc", {}), ("deit-bsa", {"pos_kernel": "untied"}), ("lm-bsa-grc", {"pos_kernel": "untied"})],
    ids=_case_id,
)
def test_deepcopy_is_independent_and_identical(case: tuple[str, dict]) -> None:
    """The Lipschitz code estimates on a deep copy; untied BSA must then read the copy's positions."""
    name, overrides = case
    model = create_model(name, **overrides, checkpoint="none")
    clone = copy.deepcopy(model)
    x = _input(name)
    with torch.no_grad():
        assert torch.equal(clone(x), model(x))
        if overrides.get("pos_kernel") == "untied":
            assert all(m._pos_owner[0] is clone for m in clone.modules() if isinstance(m, BilateralAttention))
            clone.pos_embed.normal_(0, 1.0)
            assert not torch.allclose(clone(x), model(x), atol=1e-5)
