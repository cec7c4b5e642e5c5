"""``attack(model, x, y)``: adversarial examples from tensors, torchattacks-style, as one image attack run.

``attack(model, x, y, attack=a, eps=e, **options)`` is the run ``evaluate(model, a, [e], data=(x, y),
n_examples=None, save_adversarial=True, **options)`` in a temporary folder, and returns the points that run saves
(:meth:`..runs.runner.RunResult.adversarial`) in x's layout and on x's device. So everything a run has, it has too:
the options with their defaults and rules (:class:`..configs.ImageAttackConfig`: ``norm``, ``steps``,
``step_size``, ``seed``, ``early_stop``, ``batch_size``, ``check_convergence``, ...), the seeds (from the seed,
the model's run label ``model0`` and the example ids 0..n-1), the checks of images and labels that ``evaluate``
gives ``data``, and the sanity checks. Same seed, same x_adv.

The model is attacked in eval mode with its weights frozen, on x's device; its modes and ``requires_grad`` flags,
the caller's tensors and torch's global random state are as they were afterwards.

A failed sanity check raises a one-line :class:`RobfiltError` naming it (no x_adv comes back: points from a model
that fails them are not evidence of anything) unless ``check=False``; a check that warns issues a
:class:`UserWarning`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..configs import ImageAttackConfig, build, read
from ..core.errors import RobfiltError
from ..core.surface import Surface
from ..data.adapters import to_labels, to_unit_float
from ..summaries import Check
from .evaluate import evaluate

#: what attack() decides itself; every other option is the run's
FIXED = ("models", "data", "n_examples", "save_adversarial")


def _check_model(model: Any) -> None:
    if isinstance(model, nn.Module):
        return
    got = f"the class {model.__name__}; pass an instance" if isinstance(model, type) else type(model).__name__
    raise RobfiltError(f"model must be a torch nn.Module taking [0, 1] images and returning logits, got {got}.")


def _check_device(model: nn.Module, device: torch.device) -> None:
    where = next((t.device for t in [*model.parameters(), *model.buffers()]), None)
    if where is not None and where != device:
        raise RobfiltError(f"the model is on {where} but x is on {device}; move one of them (model.to(x.device)).")


def _one(value: Any, what: str, fix: str) -> Any:
    """``value``, which must be one value (a sequence of one is unwrapped): x_adv is one tensor."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 1:
            raise RobfiltError(f"attack takes one {what}, got {len(value)}; {fix}.")
        return value[0]
    return value


@contextlib.contextmanager
def _restored(model: nn.Module, device: torch.device) -> Iterator[None]:
    """A private random state while attacking; the caller's module modes come back (the run sets eval mode)."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            yield
    finally:
        for m, mode in modes:
            m.training = mode


def _settle(checks: list[Check]) -> None:
    """A failed check raises (one line); a warning warns. Nothing passes silently."""
    for c in checks:
        if c.status == "fail":
            raise RobfiltError(
                f"attack(): sanity check failed for {c.model}: {c.name}: {c.detail}; fix the model, or pass "
                "check=False to get x_adv unchecked."
            )
    for c in checks:
        if c.status == "warn":
            warnings.warn(f"attack(): sanity check warns for {c.model}: {c.name}: {c.detail}", stacklevel=3)


def _layout(x_adv: torch.Tensor, x: Any, images: torch.Tensor) -> torch.Tensor:
    """x_adv (N, C, H, W) back in x's layout: (N, H, W) grey, or (N, H, W, C) channel-last."""
    shape = tuple(x.shape)
    if len(shape) == 3:
        return x_adv.squeeze(1)
    if shape != tuple(images.shape):
        return x_adv.permute(0, 2, 3, 1).contiguous()
    return x_adv


def attack(
    model: nn.Module,
    x: Any,
    y: Any,
    attack: str | None = None,
    eps: float | str | None = None,
    *,
    check: bool = True,
    **options: Any,
) -> torch.Tensor:
    """Adversarial examples of ``x`` for ``model``: ``x_adv`` with x's shape, float32, on x's device, in [0, 1].

    Each example gets the per-example worst case of the attack's components within ``eps`` (the components run in
    order on the examples not yet fooled); an example the model gets wrong unattacked, or that no component fools,
    gets the point the engine holds for it (x itself, or the last component's result). See the module docstring
    for the run this is.

    Args:
        model: an ``nn.Module`` taking [0, 1] images (its own normalisation inside) and returning logits.
        x: images, as ``evaluate`` takes ``data``: float in [0, 1] or uint8 in 0-255, (N, C, H, W), (N, H, W, C)
            or (N, H, W), on the model's device.
        y: the true classes, integer indices (N,) into the model's logits.
        attack: a catalogue name (default: the run's, ``apgd-adaptive``; ``autoattack-standard``, ``pgd``,
            ``fgsm``, ...).
        eps: the one budget on the [0, 1] scale (``8/255`` as a number or text); 0 returns x. Tensors have no
            default eps grid, so it must be given.
        check: raise on a failed sanity check (default); False returns x_adv anyway.
        options: any option of an image attack run, named as everywhere (``norm``, ``steps``, ``step_size``,
            ``seed``, ``early_stop``, ``batch_size``, ...), with the run's defaults.
    """
    _check_model(model)
    fixed = sorted(set(options) & set(FIXED))
    if fixed:
        raise RobfiltError(f"attack() sets {fixed[0]} itself (x and y are the data, every example, x_adv returned); "
                           "use evaluate() for a run of your own.")  # fmt: skip
    images = to_unit_float(x, "images x")
    labels = to_labels(y, len(images), "labels y")
    given: dict[str, Any] = {"device": str(images.device), **options}
    if attack is not None:
        given["attacks"] = _one(attack, "attack name", "call it once per attack")
    if eps is not None:
        given["eps"] = (_one(eps, "eps", "for an eps grid use evaluate()"),)
    values = read({"models": (model,), "data": (images, labels), "n_examples": None, "save_adversarial": True,
                   **given}, Surface.API)  # fmt: skip
    config = build(ImageAttackConfig, values)
    assert isinstance(config, ImageAttackConfig)
    if len(config.attacks) != 1:
        raise RobfiltError(f"attack takes one attack name, got {', '.join(config.attacks)}; call it once per attack.")
    device = torch.device(config.device)
    _check_device(model, images.device)
    with _restored(model, device):
        result = evaluate(config=config)
    if check:
        _settle(result.summary.sanity_checks())
    _, x_adv = result.adversarial()
    return _layout(x_adv, x, images).to(images.device)


__all__ = ["attack"]
