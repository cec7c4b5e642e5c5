"""How images are prepared for a model: channels, size, and timm's eval resize and crop. No normalisation.

A model's own config decides the preprocessing (a timm ``pretrained_cfg``: ``input_size``, ``crop_pct``,
``interpolation``, ``crop_mode``; a registry DeiT: its ``img_size`` and ``in_chans``), so a 28x28 grey model gets
28x28 grey images and a 224 px RGB model gets timm's 224 px eval crop. An explicit ``img_size`` / ``in_chans``
overrides it (what ``--img-size`` sets). Mean/std are not applied here: they live inside the model.

Image files and Hugging Face images go through :func:`pil_transform`; tensor data sets through
:func:`adapt_tensor` (channels always follow the model, size only on request).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch

from ..core.errors import RobfiltError, suggest

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
CROP_MODES = ("center", "squash", "border")
#: What an image folder gets when neither a model nor an explicit size says otherwise: timm's DeiT-tiny eval.
DEFAULT_PREPROCESS = "deit_tiny_patch16_224"
_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, the weights PIL's convert("L") uses


@dataclass(frozen=True)
class InputSpec:
    """What a model takes: ``in_chans`` x ``size`` images in [0, 1], made by timm's eval resize/crop.

    ``crop_pct``: the image is resized to ``size / crop_pct`` (shorter side, aspect kept) and center-cropped to
    ``size``; 1.0 means resize straight to ``size``.
    """

    in_chans: int = 3
    size: tuple[int, int] = (224, 224)
    interpolation: str = "bicubic"
    crop_pct: float = 1.0
    crop_mode: str = "center"

    def __post_init__(self) -> None:
        size = _as_size(self.size, "img_size")
        object.__setattr__(self, "size", size)
        if int(self.in_chans) != self.in_chans or self.in_chans <= 0:
            raise RobfiltError(f"in_chans must be a positive integer, got {self.in_chans!r}.")
        object.__setattr__(self, "in_chans", int(self.in_chans))
        if self.interpolation not in INTERPOLATIONS:
            raise RobfiltError(
                f"unknown interpolation {self.interpolation!r}.{suggest(str(self.interpolation), INTERPOLATIONS)} "
                f"Use one of: {', '.join(INTERPOLATIONS)}."
            )
        if not (isinstance(self.crop_pct, int | float) and 0 < self.crop_pct <= 4 and math.isfinite(self.crop_pct)):
            raise RobfiltError(f"crop_pct must be a number in (0, 4], e.g. 0.875 or 1.0, got {self.crop_pct!r}.")
        object.__setattr__(self, "crop_pct", float(self.crop_pct))
        if self.crop_mode not in CROP_MODES:
            raise RobfiltError(f"unknown crop_mode {self.crop_mode!r}; use one of: {', '.join(CROP_MODES)}.")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of every prepared image."""
        return (self.in_chans, *self.size)

    def settings(self) -> dict[str, Any]:
        """The fields as plain JSON values (for manifests and digests)."""
        d = asdict(self)
        d["size"] = list(self.size)
        return d

    def override(self, img_size: int | tuple[int, int] | None = None, in_chans: int | None = None) -> InputSpec:
        """This spec with an explicit size and/or channel count (timm's rule: crop_pct and interpolation stay)."""
        changes: dict[str, Any] = {}
        if img_size is not None:
            changes["size"] = _as_size(img_size, "img_size")
        if in_chans is not None:
            changes["in_chans"] = in_chans
        return replace(self, **changes) if changes else self

    @classmethod
    def from_timm_cfg(cls, cfg: Mapping[str, Any] | Any) -> InputSpec:
        """From a timm ``pretrained_cfg`` (dict or ``PretrainedCfg``): input_size, interpolation, crop_pct/mode."""
        if not isinstance(cfg, Mapping):
            cfg = cfg.to_dict() if hasattr(cfg, "to_dict") else vars(cfg)
        c, h, w = tuple(cfg.get("input_size") or (3, 224, 224))
        interp = cfg.get("interpolation") or "bicubic"
        return cls(
            in_chans=int(c),
            size=(int(h), int(w)),
            interpolation=interp if interp in INTERPOLATIONS else "bicubic",
            crop_pct=float(cfg.get("crop_pct") or 0.875),  # timm's default when a config has none
            crop_mode=cfg.get("crop_mode") or "center",
        )


def _as_size(value: Any, what: str) -> tuple[int, int]:
    """An int or an (h, w) pair of positive ints."""
    vals = list(value) if isinstance(value, list | tuple) else [value, value]
    if len(vals) != 2 or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in vals):
        raise RobfiltError(f"{what} must be a positive integer or an (height, width) pair, got {value!r}.")
    return int(vals[0]), int(vals[1])


def input_spec_of(obj: Any) -> InputSpec | None:
    """The preprocessing ``obj`` asks for, or None when it does not say.

    ``obj``: an :class:`InputSpec`; a loaded model (``.input`` / ``.module``); a module carrying
    ``robfilt_input`` (every robfilt loader sets it) or a timm ``pretrained_cfg``; a timm data-config dict; or a
    timm model name.
    """
    if obj is None or isinstance(obj, InputSpec):
        return obj
    if isinstance(obj, Mapping):
        return InputSpec.from_timm_cfg(obj)
    if isinstance(obj, str):
        import timm

        try:
            cfg = timm.models.get_pretrained_cfg(obj)
        except RuntimeError:  # a wrong tag of a known architecture
            cfg = None
        if cfg is None:
            raise RobfiltError(
                f"unknown timm model {obj!r} for preprocessing.{suggest(obj, timm.list_models())} "
                f"Pass a timm model name such as {DEFAULT_PREPROCESS!r}, a data-config dict or an img_size."
            )
        return InputSpec.from_timm_cfg(cfg)
    spec = getattr(obj, "input", None)
    if isinstance(spec, InputSpec):
        return spec
    module = getattr(obj, "module", obj)
    spec = getattr(module, "robfilt_input", None)
    if isinstance(spec, InputSpec):
        return spec
    cfg = getattr(module, "pretrained_cfg", None)
    if cfg:
        return InputSpec.from_timm_cfg(cfg)
    return None


def resolve_input_spec(
    preprocess: Any = None, img_size: int | tuple[int, int] | None = None, in_chans: int | None = None
) -> InputSpec:
    """The spec for image files: ``preprocess``'s (or DeiT-tiny's), with explicit ``img_size`` / ``in_chans``."""
    base = input_spec_of(preprocess)
    if base is None:
        base = input_spec_of(DEFAULT_PREPROCESS) if img_size is None else InputSpec(crop_pct=1.0)
    return base.override(img_size, in_chans)


# ----------------------------------------------------------------------------------------------- PIL path
def convert_mode(img: Any, in_chans: int) -> Any:
    """A PIL image in grey ('L', 1 channel) or 'RGB' (3 channels): 16-bit scaled to 8, alpha dropped."""
    from PIL import Image

    if in_chans not in (1, 3):
        raise RobfiltError(f"image files can be read as 1 (grey) or 3 (RGB) channels, not in_chans={in_chans}.")
    if img.mode.startswith("I") or img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        arr = arr if img.mode == "F" else arr / 65535.0  # 16-bit PNG/TIFF (Pillow opens them as I;16 or I)
        img = Image.fromarray(np.clip(np.rint(arr * 255.0), 0, 255).astype(np.uint8), mode="L")
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    return img.convert("RGB" if in_chans == 3 else "L")


def pil_transform(spec: InputSpec) -> Callable[[Any], torch.Tensor]:
    """PIL image -> uint8 tensor ``spec.image_shape``: mode conversion, then timm's eval resize/crop."""
    from timm.data import create_transform

    resize = create_transform(
        input_size=spec.image_shape,
        interpolation=spec.interpolation,
        crop_pct=spec.crop_pct,
        crop_mode=spec.crop_mode,
        is_training=False,
        normalize=False,
    )
    return _PilTransform(spec.in_chans, resize)


class _PilTransform:
    """A picklable callable (DataLoader workers may be spawned, not forked)."""

    def __init__(self, in_chans: int, resize: Callable[[Any], Any]) -> None:
        self.in_chans, self.resize = in_chans, resize

    def __call__(self, img: Any) -> torch.Tensor:
        out = self.resize(convert_mode(img, self.in_chans))
        return out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out))


# -------------------------------------------------------------------------------------------- tensor path
def convert_channels(x: torch.Tensor, in_chans: int) -> torch.Tensor:
    """(N, C, H, W) float in [0, 1] to ``in_chans`` channels: grey -> RGB repeats, RGB(A) -> grey by luma."""
    c = x.shape[1]
    if c == in_chans:
        return x
    if c == 4:  # RGBA: drop alpha, as for image files
        x, c = x[:, :3], 3
        if in_chans == 3:
            return x
    if c == 1 and in_chans == 3:
        return x.expand(-1, 3, -1, -1).contiguous()
    if c == 3 and in_chans == 1:
        w = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        return (x * w).sum(1, keepdim=True)
    raise RobfiltError(f"cannot convert {c}-channel images to in_chans={in_chans}; give 1 or 3 channel images.")


def adapt_tensor(x: torch.Tensor, spec: InputSpec | None, resize: bool) -> torch.Tensor:
    """Float (N, C, H, W) in [0, 1] to ``spec``'s channels, and to its size when ``resize`` (timm's eval crop)."""
    if spec is None:
        return x
    x = convert_channels(x, spec.in_chans)
    if resize and tuple(x.shape[-2:]) != spec.size:
        from timm.data import create_transform

        tf = create_transform(
            input_size=spec.image_shape, interpolation=spec.interpolation, crop_pct=spec.crop_pct,
            crop_mode=spec.crop_mode, is_training=False, normalize=False,
        )  # fmt: skip
        x = tf(x).clamp_(0.0, 1.0).contiguous()  # bicubic overshoots [0, 1]
    return x
