"""Embedding-space FGSM and PGD for language models (small hand-written kernels; torchattacks is image-only).

The perturbation ``delta`` (B, T, C) is added to the token embeddings ``model.embed(idx)`` and the model runs
``model.forward_embeddings(emb + delta)``; positions are added inside the model, so only content is perturbed.
The attack maximises the next-token loss: the mean cross-entropy over the real (unpadded) positions of each
sequence, which is also the quantity perplexity is computed from.

Threat model, per token position t:

- ``linf``: ``max_c |delta[t, c]| <= eps_abs`` (one box over every coordinate);
- ``l2``: ``||delta[t]||_2 <= eps_abs`` (a ball per token, so a long sequence gets a budget per token rather than
  one budget spread over the whole sequence).

eps is *relative* by default (``eps_mode="relative"``), because embedding scales differ across models and
training runs while a fraction of a typical embedding is comparable:

- ``l2``: ``eps_abs = eps * mean_v ||E_v||_2`` (mean L2 norm of the rows of the token-embedding matrix E);
- ``linf``: ``eps_abs = eps * mean_{v,c} |E_{v,c}|`` (mean absolute entry of E).

So ``eps=0.1`` lets each token move by 10% of a typical embedding (L2) or each coordinate by 10% of a typical
coordinate (Linf). The scale is reported as ``eps_scale`` in the summary. ``eps_mode="absolute"`` uses eps as is.

PGD: ``steps`` iterations (default 20) of size ``step_size`` (default ``0.15 * eps_abs``) from a random start in
the ball; FGSM: one step of size ``eps_abs`` (the sign of the gradient under Linf, the per-token normalised
gradient under L2, i.e. FGM). Random starts are drawn per sequence from generators seeded by the caller, so a
sequence's perturbation does not depend on which other sequences share its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..core.errors import RobfiltError, unknown
from ..core.names import EMBEDDING_ATTACKS, EPS_MODES
from ..models.lm_batch import sequence_nll
from .catalogue import Norm

_TINY = 1e-12


def embedding_matrix(model: nn.Module) -> torch.Tensor:
    """The token-embedding matrix (V, C) of an LM that has ``embed`` / ``forward_embeddings``."""
    if not (hasattr(model, "embed") and hasattr(model, "forward_embeddings")):
        raise RobfiltError(
            f"{type(model).__name__} has no embed()/forward_embeddings(); embedding attacks need a robfilt CausalLM."
        )
    tok = getattr(model, "tok_embed", None)
    if isinstance(tok, nn.Embedding):
        return tok.weight.detach()
    raise RobfiltError(f"{type(model).__name__} has no tok_embed embedding table to scale eps by.")


def eps_scale(model: nn.Module, norm: Norm, eps_mode: str = "relative") -> float:
    """The factor that turns a relative eps into an absolute radius (see the module docstring); 1 if absolute."""
    if eps_mode not in EPS_MODES:
        raise unknown("eps mode", eps_mode, EPS_MODES)
    if eps_mode == "absolute":
        return 1.0
    e = embedding_matrix(model).float()
    return float(e.norm(dim=1).mean()) if norm is Norm.L2 else float(e.abs().mean())


def token_norms(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    """Per-token size of a perturbation (B, T): Linf or L2 over the embedding dimension."""
    return delta.abs().amax(-1) if norm is Norm.LINF else delta.norm(dim=-1)


def perturbation_size(delta: torch.Tensor, norm: Norm) -> torch.Tensor:
    """The per-sequence size that must stay <= eps_abs: the largest per-token norm (B,)."""
    return token_norms(delta, norm).amax(-1)


def project(delta: torch.Tensor, eps_abs: float, norm: Norm) -> torch.Tensor:
    """Project onto the per-token ball of radius ``eps_abs``.

    A low-precision ``delta`` (bf16 models) is projected in fp32 onto a ball shrunk by one unit of its precision
    (0.8% for bf16) and rounded back, so rounding can never carry it outside the requested ball.
    """
    if delta.dtype not in (torch.float32, torch.float64):
        shrunk = eps_abs * (1 - torch.finfo(delta.dtype).eps)
        return project(delta.float(), shrunk, norm).to(delta.dtype)
    if norm is Norm.LINF:
        return delta.clamp(-eps_abs, eps_abs)
    n = delta.norm(dim=-1, keepdim=True)
    return delta * torch.clamp(eps_abs / (n + _TINY), max=1.0)


def _ascent_direction(grad: torch.Tensor, norm: Norm) -> torch.Tensor:
    if norm is Norm.LINF:
        return grad.sign()
    return grad / (grad.norm(dim=-1, keepdim=True) + _TINY)


def _loss(model: nn.Module, emb: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over the batch of each sequence's *mean* CE (each sequence is attacked on its own objective)."""
    nll = sequence_nll(model.forward_embeddings(emb), targets, mask)
    return (nll / mask.sum(1).clamp(min=1)).sum()


def random_start(
    shape: tuple[int, ...],
    eps_abs: float,
    norm: Norm,
    generators: Sequence[torch.Generator],
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """A uniform point in the Linf box, or a random direction at a uniform radius in each token's L2 ball.

    One generator per sequence, so the start of a sequence is fixed by its own seed.
    """
    _, t, c = shape
    starts = []
    for g in generators:
        if norm is Norm.LINF:
            d = (torch.rand(t, c, generator=g) * 2 - 1) * eps_abs
        else:
            direction = torch.randn(t, c, generator=g)
            direction = direction / (direction.norm(dim=-1, keepdim=True) + _TINY)
            d = direction * torch.rand(t, 1, generator=g) * eps_abs
        starts.append(d)
    return torch.stack(starts).to(device=device, dtype=dtype)  # drawn in fp32, so bf16 models get the same start


@dataclass(frozen=True)
class EmbeddingAttack:
    """One embedding-space attack: ``fgsm`` or ``pgd`` under ``norm`` with an absolute radius."""

    name: str
    norm: Norm
    eps_abs: float
    steps: int = 20
    step_size: float | None = None  # None: 0.15 * eps_abs for PGD; FGSM always steps eps_abs

    def __post_init__(self) -> None:
        if self.name not in EMBEDDING_ATTACKS:
            raise unknown("embedding attack", self.name, EMBEDDING_ATTACKS)
        if not (self.eps_abs >= 0):
            raise RobfiltError(f"eps {self.eps_abs} is negative or NaN; eps is a radius in embedding space.")

    @property
    def alpha(self) -> float:
        return self.step_size if self.step_size is not None else 0.15 * self.eps_abs

    def perturb(
        self,
        model: nn.Module,
        emb: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        generators: Sequence[torch.Generator] | None = None,
        support: torch.Tensor | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> torch.Tensor:
        """Return ``delta`` (same shape as ``emb``), zero outside ``support`` (default: where ``mask`` scores; a
        rolling window also perturbs its unscored context) and inside the per-token ball. ``on_step(i)`` is called
        after step i (1-based): one forward and one backward pass per row."""
        emb = emb.detach()
        keep = (mask if support is None else support).unsqueeze(-1).to(emb.dtype)
        if self.eps_abs == 0:
            return torch.zeros_like(emb)
        if self.name == "fgsm":
            delta = torch.zeros_like(emb)
            steps, alpha = 1, self.eps_abs
        else:
            gens = generators or [torch.Generator().manual_seed(i) for i in range(emb.shape[0])]
            delta = random_start(tuple(emb.shape), self.eps_abs, self.norm, gens, emb.device, emb.dtype) * keep
            steps, alpha = self.steps, self.alpha
        for step in range(steps):
            delta.requires_grad_(True)
            with torch.enable_grad():
                loss = _loss(model, emb + delta, targets, mask)
                (grad,) = torch.autograd.grad(loss, delta)
            delta = project(delta.detach() + alpha * _ascent_direction(grad, self.norm), self.eps_abs, self.norm) * keep
            if on_step is not None:
                on_step(step + 1)
        return delta.detach()
