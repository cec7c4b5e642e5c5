"""The BSA/GRC DeiTs in timm's model registry, at every size: how each registered name builds.

``import robustbench_filters`` registers them (:mod:`robustbench_filters.models.timm_hook`, through timm's public
``register_model`` and ``generate_default_cfgs``), as soon as timm is imported::

    deit_micro_patch4_28, deit_micro_{bsa,grc,bsa_grc}_patch4_28       (28x28 grey, 10 classes: the zoo's models)
    deit_{tiny,small,base}_{bsa,grc,bsa_grc}_patch16_224               (timm's DeiT sizes, ImageNet-1k)

so ``timm.create_model("deit_tiny_bsa_grc_patch16_224", num_classes=10)`` and ``timm:<name>`` references build
them; the plain ``deit`` at tiny/small/base is timm's own ``deit_{size}_patch16_224``. Like every timm model,
they take *normalised* images; mean/std, input size and crop are in their ``pretrained_cfg``. Their state dicts
are exactly those of robfilt's registry models (``create_model("deit-bsa-grc", "tiny")``), in both directions.

No weights are downloaded: the configs have no URL. ``pretrained=True`` loads the bundled zoo weights, which
exist for the micro models only.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..core.errors import CheckpointError, RobfiltError
from .built import Built, remember
from .checkpoint import WEIGHTS, zoo_path
from .config import DeiTConfig
from .deit import DEIT_SIZES, build_deit, input_spec
from .normalize import channel_stats
from .registry import resolve_spec

VARIANTS: dict[str, str] = {"deit": "", "deit-bsa": "_bsa", "deit-grc": "_grc", "deit-bsa-grc": "_bsa_grc"}


def timm_name(name: str, size: str) -> str:
    """timm's name of a robfilt DeiT: ('deit-bsa-grc', 'tiny') -> 'deit_tiny_bsa_grc_patch16_224'."""
    if name not in VARIANTS or size not in DEIT_SIZES:
        raise RobfiltError(f"no timm name for {name!r} at size {size!r}; DeiT variants are {', '.join(VARIANTS)}.")
    cfg = DeiTConfig(**DEIT_SIZES[size])
    return f"deit_{size}{VARIANTS[name]}_patch{cfg.patch_size}_{cfg.img_size}"


#: timm name -> (robfilt name, size), for the names this module registers (timm already has plain tiny/small/base)
REGISTERED: dict[str, tuple[str, str]] = {
    timm_name(n, s): (n, s) for n in VARIANTS for s in DEIT_SIZES if not (n == "deit" and s != "micro")
}


def _pretrained_cfg(config: DeiTConfig, architecture: str) -> dict[str, Any]:
    spec = input_spec(config)  # the same preprocessing as robfilt's registry model
    return {
        "url": "",
        "num_classes": config.num_classes,
        "input_size": (config.in_chans, config.img_size, config.img_size),
        "pool_size": None,
        "crop_pct": spec.crop_pct,
        "interpolation": spec.interpolation,
        "fixed_input_size": True,
        "mean": tuple(config.mean),
        "std": tuple(config.std),
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "architecture": architecture,
        "license": "mit",
    }


def _load_zoo(model: nn.Module, arch: str, name: str, size: str) -> None:
    import safetensors.torch

    from .weights import mismatch

    weights = zoo_path(name, size) / WEIGHTS
    if not weights.is_file():
        raise RobfiltError(
            f"no pretrained weights for {arch}: robfilt bundles {name} weights at size micro only "
            f"(timm name {timm_name(name, 'micro')}); train them with `robfilt train --model {name} --size {size}`."
        )
    state = safetensors.torch.load_file(str(weights))
    problem = mismatch(model, state)
    if problem:
        raise CheckpointError(f"the zoo weights of {name} ({size}) do not fit {arch} as built: {problem}.")
    model.load_state_dict(state, strict=True)


def build_registered(arch: str, name: str, size: str, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    """What ``timm.create_model(arch, pretrained, **kwargs)`` builds for a registered variant."""
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        kwargs.pop(key, None)
    if "in_chans" in kwargs and "mean" not in kwargs:  # e.g. a grey tiny model: ImageNet statistics averaged
        base = DeiTConfig(**DEIT_SIZES[size])
        kwargs["mean"], kwargs["std"] = channel_stats(base.mean, base.std, int(kwargs["in_chans"]))
    spec = resolve_spec(name, size, **kwargs)
    model = build_deit(spec.config, normalize=False)
    remember(model, Built(spec))
    model.pretrained_cfg = model.default_cfg = _pretrained_cfg(spec.config, arch)
    if pretrained:
        _load_zoo(model, arch, name, size)
    return model
