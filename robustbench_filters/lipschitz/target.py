"""The function whose Lipschitz constant is measured: which input space, which output, which attention path.

Definitions (reported in every summary, because a Lipschitz number means nothing without them):

- image models (``Family.IMAGE``: robfilt DeiTs and any classifier taking [0, 1] images - timm CNNs, ConvNeXt,
  Swin, ViT, a plain ``nn.Module``): input = [0, 1] pixels, flattened (any mean/std normalisation is part of the
  model); output = the logit vector. Norm: l2 on both sides. Pair points stay in the [0, 1] box.
- language models (robfilt's ``CausalLM``, and Hugging Face causal LMs through ``hf.adapter.HFCausalLM``): input =
  the token-embedding sequence (B, T, d) that ``forward_embeddings`` takes,
  i.e. the space embedding attacks perturb; output = the next-token logits at the **last position** only. The
  last position sees every token through the causal mask, so it measures the whole context, and a 10-100 wide
  output keeps the exact Jacobian affordable. Certified bounds are computed for the full-sequence map, which
  bounds the last position too (selecting rows is 1-Lipschitz).
- any other ``nn.Module`` (family None: tests, linear probes on features): input = its input tensor, output = its
  output flattened.

Fused scaled-dot-product attention has no forward-mode AD and no double backward, so every estimator runs on
the manual attention path. A model that has fused attention switched on is copied and switched (logged), never
estimated on the fused path, and the caller's model is left untouched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..core.errors import RobfiltError
from ..core.family import Family
from ..models.built import built_of, copied
from ..models.deit import set_fused_attn
from ..models.lm import CausalLM

log = logging.getLogger(__name__)


def _first_leaf(model: nn.Module) -> nn.Module | None:
    for module in model.modules():
        if not any(True for _ in module.children()):
            return module
    return None


def input_family(model: nn.Module) -> Family | None:
    """What a module's input is, read from its architecture: IMAGE for any image classifier, LM for robfilt
    language models, None for other modules (their input tensor as it is). Unlike
    :func:`robustbench_filters.configs.model_family`, which names a run's family from a reference or a module's
    robfilt spec, this looks at the layers, since the estimators must know which input space to measure in.

    Image classifiers are recognised by construction, not by name: robfilt/timm ViTs, any timm model (its
    ``pretrained_cfg`` has an ``input_size``), or any module whose first layer is a 2D convolution (a ResNet,
    ConvNeXt or Swin stem). Pass ``family=`` to :func:`make_target` to override.
    """
    if isinstance(model, CausalLM) or hasattr(model, "rolling") and hasattr(model, "forward_embeddings"):
        return Family.LM  # robfilt's GPT, or a Hugging Face causal LM behind hf.adapter.HFCausalLM
    if isinstance(model, VisionTransformer):
        return Family.IMAGE
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None)
    if isinstance(cfg, dict) and "input_size" in cfg:
        return Family.IMAGE
    return Family.IMAGE if isinstance(_first_leaf(model), nn.Conv2d) else None


def model_name(model: nn.Module) -> str:
    built = built_of(model)
    return built.spec.name if built is not None else type(model).__name__


def uses_fused_attention(model: nn.Module) -> bool:
    return any(bool(getattr(m, "fused_attn", False)) for m in model.modules())


def prepare_model(
    model: nn.Module,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    on_fused: str = "switch",
) -> nn.Module:
    """Return ``model`` ready for the estimators: eval mode, manual attention, the requested dtype/device.

    The caller's model is never modified: any change happens on a deep copy. ``on_fused="refuse"`` raises a
    :class:`RobfiltError` instead of switching, for callers that must measure exactly the object they pass.
    """
    fused = uses_fused_attention(model)
    if fused and on_fused == "refuse":
        raise RobfiltError(
            f"{model_name(model)} uses fused attention, which has no forward-mode AD; build it with "
            "set_fused_attn(model, False) (or fused_attn=False) before estimating Lipschitz constants."
        )
    param = next(model.parameters(), None)
    wrong_dtype = dtype is not None and param is not None and param.dtype != dtype
    wrong_device = device is not None and param is not None and param.device != torch.device(device)
    if not (fused or model.training or wrong_dtype or wrong_device):
        return model
    model = copied(model)
    if fused:
        log.info("%s uses fused attention; estimating on a copy with the manual attention path", model_name(model))
        set_fused_attn(model, False)
        if hasattr(model, "use_manual_attention"):  # Hugging Face models: the eager attention implementation
            model.use_manual_attention()
    if dtype is not None or device is not None:
        model = model.to(device=device, dtype=dtype)
    return model.eval()


@dataclass
class Target:
    """A prepared model seen as a batched function (B, *input) -> (B, m); samples never interact."""

    name: str
    model: nn.Module
    family: Family | None  # None: a generic module (its input tensor in, its output flattened out)
    box: tuple[float, float] | None  # the input domain for pair points (pixels stay in [0, 1])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.family is Family.LM:
            return self.model.forward_embeddings(x)[:, -1, :]
        return self.model(x).reshape(x.shape[0], -1)

    def inputs(self, data: torch.Tensor) -> torch.Tensor:
        """Turn raw data into the measured input space: token ids -> embeddings for LMs, dtype cast otherwise."""
        param = next(self.model.parameters())
        if self.family is Family.LM and not torch.is_floating_point(data):
            with torch.no_grad():
                return self.model.embed(data.to(param.device)).detach()
        return data.to(device=param.device, dtype=param.dtype)


def make_target(
    model: nn.Module,
    *,
    name: str | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    on_fused: str = "switch",
    family: Family | str | None = None,
) -> Target:
    """Prepare ``model`` and wrap it with its measurement convention (``family`` overrides the detection)."""
    prepared = prepare_model(model, dtype=dtype, device=device, on_fused=on_fused)
    if family is not None:
        try:
            fam = Family(family)
        except ValueError:
            raise RobfiltError(f"unknown family {family!r}; pass 'image' or 'lm'.") from None
        if fam is Family.LM and not hasattr(prepared, "forward_embeddings"):
            raise RobfiltError(f"{model_name(model)} has no forward_embeddings(); only robfilt LMs are family 'lm'.")
    else:
        fam = input_family(prepared)
    box = (0.0, 1.0) if fam is Family.IMAGE else None
    return Target(name=name or model_name(model), model=prepared, family=fam, box=box)
