"""``attack(model, x, y)``: adversarial examples from tensors, torchattacks-style, by robfilt's engine and checks.

The same catalogue builders and per-example worst-case cascade as a run, at one eps, on the caller's tensors: no
run folder and no data set. Its seeds derive as a run's do, from the seed, the model's run label (``model0`` for a
plain module) and the example ids, which are 0..n-1 here (batch b starts at id b * batch_size). So
``attack(model, x, y, attack=a, eps=e, seed=s, batch_size=b)`` returns exactly the points that
``evaluate(model, a, [e], data=(x, y), n_examples=None, batch_size=b, seed=s, save_adversarial=True)`` saves for
images given as (N, C, H, W); same seed, same x_adv.

The model is attacked in eval mode with its weights frozen, as in a run; its modes and ``requires_grad`` flags,
the caller's tensors and torch's global random state are as they were afterwards.

Checks (``check=True``, the default). Before the attack, on a few examples (as many as a run probes): two passes in
eval mode agree, the outputs are logits (not probabilities) and the input gradients are finite and not all zero.
After it: every output the attack saw was finite logits, and every x_adv lies inside the eps-ball and [0, 1].
A failed check raises a one-line :class:`RobfiltError` naming it (no x_adv comes back: points from a model that
fails them are not evidence of anything); a check that only warns issues a :class:`UserWarning`.
``check=False`` skips them (the inputs are still validated).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import pandas as pd
import torch
from torch import nn

from ..checks import FAIL, WARN, Check
from ..checks import image as IC
from ..checks import model as MC
from ..checks.logits import check_image_rows, guard_logits, predictions, require_logits
from ..configs import ImageAttackConfig, build, read
from ..core.errors import RobfiltError
from ..core.names import DEFAULT_IMAGE_ATTACK
from ..core.surface import Surface
from ..runs.adversarial import AdversarialTrace
from .cascade import cascade
from .image import n_check
from .image_models import frozen

_TOL = 1e-6  # float images may overshoot [0, 1] by rounding (as data from Python may; see data.adapters)


def _check_model(model: Any) -> None:
    if isinstance(model, nn.Module):
        return
    got = f"the class {model.__name__}; pass an instance" if isinstance(model, type) else type(model).__name__
    raise RobfiltError(f"model must be a torch nn.Module taking [0, 1] images and returning logits, got {got}.")


def _images(x: Any) -> torch.Tensor:
    """A float32 copy of ``x`` (a batch of [0, 1] images), detached, as a run reads images from Python."""
    if not isinstance(x, torch.Tensor):
        raise RobfiltError(f"x must be a torch tensor of images in [0, 1], got {type(x).__name__}.")
    if not x.is_floating_point():
        hint = " (uint8 images: x.float() / 255)" if x.dtype == torch.uint8 else ""
        raise RobfiltError(f"x must be a float tensor of images in [0, 1], got dtype {x.dtype}{hint}.")
    if x.dim() < 2 or len(x) == 0:
        raise RobfiltError(f"x must be a non-empty batch of images (N, C, H, W), got shape {tuple(x.shape)}.")
    xs = x.detach().float()
    if not bool(torch.isfinite(xs).all()):
        raise RobfiltError("x contains NaN or inf values; give finite images in [0, 1].")
    lo, hi = float(xs.min()), float(xs.max())
    if lo < -_TOL or hi > 1 + _TOL:
        hint = " (normalised? give raw [0, 1] images: the model normalises)" if lo < 0 else ""
        raise RobfiltError(f"x has values in [{lo:.3g}, {hi:.3g}], not [0, 1]{hint}.")
    return xs.clamp(0.0, 1.0).contiguous()  # clamp copies: the caller's tensor is never touched


def _labels(y: Any, n: int, device: torch.device) -> torch.Tensor:
    if not isinstance(y, torch.Tensor):
        raise RobfiltError(f"y must be a torch tensor of class indices, got {type(y).__name__}.")
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise RobfiltError(f"y must hold integer class indices (e.g. torch.long), got dtype {y.dtype}.")
    if y.dim() != 1 or len(y) != n:
        raise RobfiltError(
            f"y must be one class index per image: shape ({n},) for x's {n} images, got {tuple(y.shape)}."
        )
    return y.detach().to(device=device, dtype=torch.long, copy=True)


def _eps(eps: Any) -> Any:
    if isinstance(eps, bool) or not isinstance(eps, int | float | str):
        raise RobfiltError(f"eps must be one number such as 8/255, got {eps!r}; for an eps grid use evaluate().")
    if isinstance(eps, int | float) and not math.isfinite(eps):
        raise RobfiltError(f"eps must be a finite budget on the [0, 1] image scale, got {eps!r}.")
    return eps


def _check_device(model: nn.Module, device: torch.device) -> None:
    where = next((t.device for t in [*model.parameters(), *model.buffers()]), None)
    if where is not None and where != device:
        raise RobfiltError(f"the model is on {where} but x is on {device}; move one of them (model.to(x.device)).")


@contextlib.contextmanager
def _attacking(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode, frozen weights and a private random state while attacking; the caller's all come back."""
    modes = [(m, m.training) for m in model.modules()]
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), frozen([model]):
            model.eval()
            yield
    finally:
        for m, mode in modes:
            m.training = mode


def _settle(checks: list[Check]) -> None:
    """A failed check raises (one line); a warning warns. Nothing passes silently."""
    for c in checks:
        if c.status == FAIL:
            raise RobfiltError(
                f"attack(): sanity check failed for {c.model}: {c.name}: {c.detail}; fix the model, or pass "
                "check=False to get x_adv unchecked."
            )
    for c in checks:
        if c.status == WARN:
            warnings.warn(f"attack(): sanity check warns for {c.model}: {c.name}: {c.detail}", stacklevel=3)


def attack(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    attack: str = DEFAULT_IMAGE_ATTACK,
    eps: float = 8 / 255,
    *,
    norm: str | None = None,
    steps: int | None = None,
    step_size: float | None = None,
    seed: int = 0,
    early_stop: bool = True,
    batch_size: int | None = None,
    check: bool = True,
) -> torch.Tensor:
    """Adversarial examples of ``x`` for ``model``: ``x_adv`` with x's shape, float32, on x's device, in [0, 1].

    Each example gets the per-example worst case of the attack's components within ``eps`` (the components run in
    order on the examples not yet fooled); an example the model gets wrong unattacked, or that no component fools,
    gets the point the engine holds for it (x itself, or the last component's result). See the module docstring
    for the checks and for the run this equals.

    Args:
        model: an ``nn.Module`` taking [0, 1] images (its own normalisation inside) and returning logits.
        x: images, a float tensor (N, C, H, W) in [0, 1] on the model's device.
        y: the true classes, integer indices (N,) into the model's logits.
        attack: a catalogue name (``autoattack-fast``, ``autoattack``, ``pgd``, ``apgd-ce``, ``fgsm``, ...).
        eps: the budget on the [0, 1] scale (``8/255`` as a number or text); 0 returns x.
        norm: ``linf`` or ``l2`` (default: the attack's own). steps, step_size: as in a run (default: the attack's).
        seed: same seed, same x_adv. early_stop: an example leaves the attack once fooled (same points found).
        batch_size: examples attacked together (default: all of them), as a run's ``batch_size``.
        check: run the sanity checks (default); a failed one raises :class:`RobfiltError`.
    """
    _check_model(model)
    xs = _images(x)
    ys = _labels(y, len(xs), xs.device)
    values = {"models": (model,), "data": (xs, ys), "attacks": attack, "eps": (_eps(eps),), "norm": norm,
              "steps": steps, "step_size": step_size, "seed": seed, "early_stop": early_stop, "n_examples": None,
              "batch_size": len(xs) if batch_size is None else batch_size, "check_convergence": False}  # fmt: skip
    config = build(ImageAttackConfig, read(values, Surface.API))
    if len(config.attacks) != 1:
        raise RobfiltError(f"attack takes one attack name, got {', '.join(config.attacks)}; call it once per attack.")
    _check_device(model, xs.device)
    label = config.labels[0]
    with _attacking(model, xs.device):
        classes = _classes(model, xs, ys, label)
        if check:
            probe = slice(0, n_check(len(xs)))
            _settle([
                MC.check_eval_deterministic(model, label, xs[probe]),
                MC.check_logits(model, label, xs[probe]),
                MC.check_gradients(model, label, xs[probe], ys[probe]),
            ])  # fmt: skip
        points, rows = [], []
        for start in range(0, len(xs), config.batch_size):
            batch = slice(start, min(start + config.batch_size, len(xs)))
            x_adv, frame = _attack_batch(model, label, config, xs[batch], ys[batch], start, classes)
            points.append(x_adv)
            rows.append(frame)
    if check:
        merged = pd.concat(rows, ignore_index=True)
        _settle([check_image_rows(merged, label), IC.check_in_ball(merged, label)])
    return torch.cat(points).reshape(x.shape)


def _classes(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, label: str) -> int:
    """The model's class count (its logits' last dimension, on a probe as a run reads it); y must index it."""
    with torch.no_grad():
        out = model(xs[:2])
    classes = require_logits(out, len(xs[:2]), model=label, where="x")
    bad = ys[(ys < 0) | (ys >= classes)]
    if len(bad):
        raise RobfiltError(
            f"y holds class {int(bad[0])} but the model returns {classes} logits; y must hold class indices in "
            f"[0, {classes})."
        )
    return classes


def _attack_batch(
    model: nn.Module, label: str, config: ImageAttackConfig, x: torch.Tensor, y: torch.Tensor, start: int, classes: int
) -> tuple[torch.Tensor, pd.DataFrame]:
    """One batch through the eps cascade exactly as a run's unit goes (the same clean pass, seeds and ids)."""
    ids = torch.arange(start, start + len(x))
    with torch.no_grad():
        clean_logits = guard_logits(model(x), len(x), classes, x.device).float()
    clean_correct = predictions(clean_logits) == y
    trace = AdversarialTrace()
    rows = cascade(
        model, label, config.attacks[0], config.eps, config.norm, x, y, ids, clean_correct, config.steps,
        config.step_size, classes, config.seed, clean_logits=clean_logits, early_stop=config.early_stop, trace=trace,
    )  # fmt: skip
    return trace.at(0).detach(), rows


__all__ = ["attack"]
