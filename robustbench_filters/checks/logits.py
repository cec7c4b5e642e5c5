"""What a user's model returns, checked where robfilt reads it: a finite tensor of logits, one row per input.

A classifier must return a ``(batch, classes)`` tensor (a language model ``(batch, seq, vocab)``). Two moments:

- **At the start** (:func:`require_logits`), on a probe batch before any folder is written: a tuple, a dict, a
  list, a non-tensor, the wrong rank or batch, or non-finite values cannot be measured honestly, so they are
  refused in one line (:class:`~robustbench_filters.core.errors.RobfiltError`, exit 2). The class count a run uses is
  the logits' last dimension, read here, never the data's largest label.
- **Mid-run** (:func:`guard_logits`), on adversarial, corrupted or noisy inputs and on later batches: a model
  may go bad only there. Raising would lose what it says about the model, and trusting it would be worse
  (``argmax`` of an all-NaN row is 0, a confident "class 0"). So a bad row becomes a row of NaN, which
  :func:`predictions` turns into -1 (no class), which no label equals, and whose margin and loss are NaN.
  The row checks (:func:`check_finite_rows`) then fail the run (exit 3).

The guard never synchronises with a GPU: it checks types and shapes in Python and finiteness with tensor ops.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import RobfiltError
from .base import FAIL, PASS, Check

#: The check name every kind of run reports for its rows' model outputs.
FINITE_OUTPUTS = "model outputs finite"


def _what(out: Any) -> str:
    """How a non-tensor output is named in an error: its type, and for a dict its keys."""
    if isinstance(out, dict):
        keys = ", ".join(map(str, list(out)[:4]))
        return f"a dict (keys: {keys})" if keys else "an empty dict"
    name = type(out).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _hint(out: Any) -> str:
    if isinstance(out, dict):
        return "return the logits tensor itself (e.g. out['logits'])"
    if isinstance(out, tuple | list):
        return "return only the logits tensor (e.g. `return logits`, not `return logits, features`)"
    return "return a torch tensor of logits"


def require_logits(
    out: Any,
    batch: int,
    *,
    model: str,
    rank: int = 2,
    min_classes: int = 2,
    where: str = "the first examples",
    finite: bool = True,
) -> int:
    """The class count of ``out``, or a one-line :class:`RobfiltError` when it is not finite logits.

    ``out`` must be a floating tensor of ``rank`` dimensions (2: (batch, classes); 3: (batch, seq, vocab)) whose
    first dimension is ``batch``, with at least ``min_classes`` classes and (``finite``) no NaN or inf.
    """
    shape = "(batch, classes)" if rank == 2 else "(batch, seq, vocab)"
    if not isinstance(out, torch.Tensor):
        raise RobfiltError(
            f"model {model} returns {_what(out)}, not a tensor of logits; {_hint(out)}: robfilt needs {shape}."
        )
    if out.dim() != rank or out.shape[0] != batch:
        rows = f"{out.shape[0]} rows for a batch of {batch} inputs, " if out.dim() and out.shape[0] != batch else ""
        raise RobfiltError(
            f"model {model} returns {rows}outputs of shape {tuple(out.shape)}; it must return {shape} logits, "
            f"one row per input."
        )
    classes = int(out.shape[-1])
    if classes < min_classes:
        raise RobfiltError(
            f"model {model} returns {classes} class{'es' if classes != 1 else ''} (shape {tuple(out.shape)}); "
            f"a classifier needs at least {min_classes} logits per input."
        )
    if not out.is_floating_point():
        raise RobfiltError(f"model {model} returns {out.dtype} outputs; return floating-point logits.")
    bad = ~torch.isfinite(out.detach())
    if finite and bool(bad.any()):
        rows = int(bad.flatten(1).any(1).sum())
        raise RobfiltError(
            f"model {model} returns non-finite logits (NaN or inf) for {rows} of {batch} inputs of {where}; "
            "robfilt cannot measure outputs that are not numbers: fix the model (weights, divisions, logs)."
        )
    return classes


def guard_logits(out: Any, batch: int, classes: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Mid-run: ``out`` as ``(batch, classes)`` logits in which every row that is not finite is all NaN.

    Anything but a tensor of exactly that shape (a tuple, a dict, another shape) makes every row NaN: none of
    them is a prediction (they land on ``device``, the inputs' device). Finite rows pass through unchanged (same
    values, dtype and autograd graph).
    """
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (batch, classes) or not out.is_floating_point():
        return torch.full((batch, classes), float("nan"), device=device)
    ok = torch.isfinite(out).all(1, keepdim=True)
    return torch.where(ok, out, torch.full_like(out, float("nan")))


class GuardedLogits(nn.Module):
    """``model`` with every output passed through :func:`guard_logits`, for code that calls the model itself
    (torchattacks' loops, the eps cascade). A replaced output stays tied to the input with a zero gradient, so
    an attack neither crashes on it nor moves that example, and the rows show no prediction for it. Finite
    outputs are unchanged (values and gradients), so a well-behaved model is attacked exactly as before.
    """

    def __init__(self, model: nn.Module, classes: int) -> None:
        super().__init__()
        self.model, self.classes = model, int(classes)
        self.train(model.training)  # torchattacks restores the mode it finds here, onto the model too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = guard_logits(self.model(x), len(x), self.classes, x.device)
        if x.requires_grad and not out.requires_grad:  # replaced: keep autograd.grad(loss, x) defined (zero)
            out = out + 0.0 * x.flatten(1).sum(1, keepdim=True)
        return out


def predictions(logits: torch.Tensor) -> torch.Tensor:
    """The predicted class of each row, or -1 for a row with any non-finite logit (never ``argmax``'s 0)."""
    ok = torch.isfinite(logits).all(-1)
    return torch.where(ok, logits.argmax(-1), torch.full_like(ok, -1, dtype=torch.long))


def margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per example: the true class's logit minus the best other one (> 0: correctly classified; NaN for a guarded
    row). The rows record it; PGD's margin loss maximises its negative."""
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf")).amax(1)
    return true - other


def check_finite_rows(bad: pd.Series, model: str, what: str = "rows") -> Check:
    """FAIL when any row's model output was not finite logits (``bad`` is True there)."""
    n, k = int(len(bad)), int(bad.sum())
    if k:
        return Check(
            FINITE_OUTPUTS, model, FAIL,
            f"{k} of {n} {what} had NaN/inf or malformed outputs; they count as no prediction (wrong)",
        )  # fmt: skip
    return Check(FINITE_OUTPUTS, model, PASS, f"{n} {what} with finite logits")


def check_image_rows(rows: pd.DataFrame, model: str) -> Check:
    """Attack and corruption rows: a row's margin is NaN exactly when its logits were guarded away (a finite
    logit row always has a finite or overflowing, never NaN, top-1 minus runner-up margin)."""
    sub = rows[rows.model == model]
    return check_finite_rows(sub["margin"].isna(), model)


__all__ = [
    "FINITE_OUTPUTS",
    "GuardedLogits",
    "check_finite_rows",
    "check_image_rows",
    "guard_logits",
    "predictions",
    "require_logits",
]
