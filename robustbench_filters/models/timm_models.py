"""``timm:<arch>``: any timm model (CNNs, ConvNeXt, Swin, ViT, ... and robfilt's registered DeiTs) as an attack target.

The reference's arguments go to ``timm.create_model`` (``num_classes``, ``in_chans``, ``img_size``, ``drop_rate``,
...), except robfilt's own: ``mean``/``std`` (the normaliser; default: the model's ``pretrained_cfg``) and
``crop_pct``/``interpolation``/``crop_mode`` (the image preprocessing). ``img_size`` is also the input size for
the data; for architectures whose constructor has no ``img_size`` (most CNNs, which take any size) it is only
that. The model gets a root normaliser, so it takes [0, 1] images, and its state-dict keys stay timm's.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch import nn

from ..core.errors import RobfiltError, suggest
from ..data.preprocess import InputSpec
from .normalize import attach_normalizer, channel_stats
from .ref import ModelKind, ModelRef
from .user_code import describe_exception, user_code

log = logging.getLogger(__name__)

#: Arguments robfilt consumes itself instead of passing them to ``timm.create_model``.
ROBFILT_ARGS = ("mean", "std", "crop_pct", "interpolation", "crop_mode")
#: timm keywords that would download or unpickle weights behind robfilt's back.
REFUSED_ARGS = {
    "pretrained": "timm would download weights; pass --checkpoint FILE.safetensors",
    "checkpoint_path": "pass --checkpoint instead (safetensors, or --allow-pickle)",
    "pretrained_cfg": "use mean/std/crop_pct/interpolation arguments instead",
    "pretrained_cfg_overlay": "use mean/std/crop_pct/interpolation arguments instead",
    "cache_dir": "robfilt never downloads weights",
}


def check_timm_arch(arch: str) -> None:
    """Refuse an architecture (or ``arch.tag``) that timm does not know, with close matches."""
    import timm

    from . import timm_registry  # noqa: F401 - robfilt's own names are part of timm's registry

    base, _, tag = arch.partition(".")
    if not timm.models.is_model(base):
        raise RobfiltError(
            f"unknown timm model {base!r}.{suggest(base, timm.list_models())} See timm.list_models() for names."
        )
    try:
        known = timm.models.get_pretrained_cfg(arch, allow_unregistered=True) is not None if tag else True
    except RuntimeError:  # timm raises for a wrong tag of a known architecture
        known = False
    if not known:
        tags = [t.partition(".")[2] for t in timm.list_models(base, pretrained=True) if "." in t]
        raise RobfiltError(f"timm model {base} has no config {tag!r}; its tags: {', '.join(tags) or 'none'}.")


def _create(arch: str, args: dict[str, Any], label: str, pretrained: bool) -> nn.Module:
    import timm

    try:
        return timm.create_model(arch, pretrained=pretrained, **args)
    except KeyboardInterrupt:
        raise
    except RobfiltError:  # robfilt's registered DeiTs validate their own arguments
        raise
    except TypeError as exc:
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if bad and bad.group(1) == "img_size" and "img_size" in args:
            # most CNNs take any input size and have no img_size: then it only sets the data's size
            log.info("timm:%s has no img_size argument; img_size=%s sets the input size only", arch, args["img_size"])
            rest = {k: v for k, v in args.items() if k != "img_size"}
            with user_code(label, f"timm.create_model({arch!r})"):
                return timm.create_model(arch, pretrained=pretrained, **rest)
        if bad:
            raise RobfiltError(
                f"model {label}: timm:{arch} does not take the argument {bad.group(1)!r}; common ones are "
                "num_classes, in_chans, img_size, drop_rate, global_pool."
            ) from None
        raise RobfiltError(
            f"model {label}: timm.create_model({arch!r}) failed with {describe_exception(exc)}."
        ) from None
    except BaseException as exc:  # noqa: BLE001 - a constructor may raise anything for bad values
        raise RobfiltError(
            f"model {label}: timm.create_model({arch!r}) failed with {describe_exception(exc)}."
        ) from None


def build_timm(ref: ModelRef, seed: int = 0, pretrained: bool = False) -> nn.Module:
    """Build a timm model for ``ref`` (seeded random weights, or robfilt's zoo weights with ``pretrained``).

    The result takes [0, 1] images (a root normaliser from the pretrained config or the ``mean``/``std``
    arguments) and carries ``robfilt_input``, the :class:`InputSpec` its data must be prepared with.
    """
    if ref.kind is not ModelKind.TIMM:
        raise ValueError(f"{ref} is not a timm reference")
    arch = ref.target
    check_timm_arch(arch)
    args = dict(ref.args)
    for key, why in REFUSED_ARGS.items():
        if key in args:
            raise RobfiltError(f"model {ref.label}: {key!r} is not a model argument here; {why}.")
    own = {k: args.pop(k) for k in ROBFILT_ARGS if k in args}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _create(arch, args, ref.label, pretrained)
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    try:
        spec = InputSpec.from_timm_cfg(cfg).override(args.get("img_size"), args.get("in_chans"))
        if own.keys() & {"crop_pct", "interpolation", "crop_mode"}:
            fields = {k: own[k] for k in ("crop_pct", "interpolation", "crop_mode") if k in own}
            spec = InputSpec(**{**spec.settings(), "size": spec.size, **fields})
        mean, std = channel_stats(
            own.get("mean", cfg.get("mean") or (0.485, 0.456, 0.406)),
            own.get("std", cfg.get("std") or (0.229, 0.224, 0.225)),
            spec.in_chans,
        )
        attach_normalizer(model, mean, std)
    except RobfiltError as exc:
        raise RobfiltError(f"model {ref.label}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RobfiltError(f"model {ref.label}: bad mean/std ({exc}); give numbers, e.g. mean=[0.5,0.5,0.5].") from None
    model.robfilt_input = spec
    return model.eval()
