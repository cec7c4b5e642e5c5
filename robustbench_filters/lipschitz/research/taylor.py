"""Second-order (Taylor) certified local bound: exact Jacobian at x0 plus a certified bound on how far it can move.

Composing per-layer Lipschitz constants loses 4-6 decades on the zoo DeiTs even when every layer constant is
exact (the product of exact per-sublayer Jacobian norms at x0 is 1e4-1e6 times ||J(x0)||): the layers' worst
directions do not line up. This bound avoids multiplying layer norms at first order. For a chain
f = R o g_K o ... o g_1 o E (E affine, Y_0 = E(x) held as a second input of the boosting stages),

    J(x) - J(x0) = sum_k Q_k(x) (Dg_k(h_{k-1}(x)) - Dg_k(h_{k-1}(x0))) P_{k-1}(x0)      (telescoping, exact)

with P_k the prefix Jacobian dh_k/dx and Q_k the suffix Jacobian d out/dh_k (Y_0 fixed; the boosting term is
linear in the affine Y_0, so it adds nothing to the difference). Hence on B(x0, rho)

    Lip <= ||J(x0)|| + sum_k c_k kappa_k r_{k-1} ||P_{k-1}(x0)|| + kappa_R r_K ||P_K(x0)||,

where ||J(x0)||, ||P_k(x0)|| and ||Q_k(x0)|| are exact (dense float64 Jacobians: one jvp per input dimension,
one vjp per output), kappa_k is the stage's curvature bound on its ball (:mod:`..stage_bounds`), r_k the radius
of the reachable ball, and c_k >= sup ||Q_k|| follows the backward recursion
``f_{k-1} <= f_k sup_k + ||Q_k(x0)|| kappa_k r_{k-1}``, ``c_k = min(||Q_k(x0)|| + f_k, c_{k+1} sup_{k+1})``. The
radii themselves come from the forward recursion on the prefix Jacobian,
``e_k <= sup_k e_{k-1} + kappa_k r_{k-1} ||P_{k-1}(x0)||``, ``r_k = rho (||P_k(x0)|| + e_k)`` (per token with the
token's rows of P_k), which is far smaller than rho times a product of layer constants.

As rho -> 0 the bound tends to ||J(x0)||, the exact local constant. Its first-order corrections still compose
through the per-stage ``sup_k``, which is what remains loose (see docs in the report). It needs dense prefix
Jacobians (input dim x state dim per example), so it is for small models: :data:`MAX_ENTRIES`.

:class:`TaylorState` is a :class:`..local_bound.Refinement`: the stage-wise sweep calls it after every stage.
"""

from __future__ import annotations

import math

import torch
from torch.func import jvp, vjp, vmap

from ..chain import Chain
from ..stage_bounds import ReadoutLocal, StageLocal

MAX_ENTRIES = 8_000_000  # input dim x state dim: the dense prefix Jacobian per example (64 MB in float64)
MAX_OUTPUTS = 1024  # the backward (suffix) pass needs one vjp per output
CHUNK = 128


def supported(chain: Chain, x: torch.Tensor, h0: torch.Tensor) -> str | None:
    """None when the Taylor bound applies to this chain and input shape, else the reason it does not."""
    n_in = x[0].numel()
    if n_in * h0[0].numel() > MAX_ENTRIES:
        return f"dense prefix Jacobians of {n_in} x {h0[0].numel()} exceed {MAX_ENTRIES} entries"
    if chain.grc and chain.y0_stage != 0:
        return "the boosting input Y_0 is not affine in the input (norm_pre before the blocks)"
    return None


def _op_norm(m: torch.Tensor) -> float:
    """Exact spectral norm of a dense matrix via the smaller Gram matrix (float64)."""
    m = m.double()
    g = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    return math.sqrt(max(torch.linalg.eigvalsh(g)[-1].item(), 0.0))


def _row_scaled(scale: torch.Tensor, token_norms: torch.Tensor, norm: float) -> torch.Tensor:
    """Bound on ||diag(s_t) P|| (rows of token t scaled by s_t, (B, K, N)): min(max_t s_t ||P||, (sum_t s_t^2 ||P_t||^2)^1/2)."""
    rowwise = (scale * token_norms.to(scale)[None, None, :]).pow(2).sum(-1).sqrt()
    return torch.minimum(scale.amax(-1) * norm, rowwise)


def _token_norms(p: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """||rows of token t|| for P (n*d, n_in): (n,)."""
    blocks = p.double().reshape(n, d, -1)
    gram = blocks @ blocks.transpose(1, 2)
    return torch.linalg.eigvalsh(gram)[:, -1].clamp_min(0.0).sqrt()


class TaylorState:
    """The forward and backward recursions for ONE example (batch of 1) and K radii."""

    def __init__(self, chain: Chain, x: torch.Tensor, rhos: torch.Tensor) -> None:
        self.chain = chain
        self.rhos = rhos.double()
        self.x = x.detach()
        self.p: torch.Tensor | None = None  # (n_in, 1, N, D): columns of P_k as tangents
        self.p_y0: torch.Tensor | None = None
        self.e = torch.zeros(1, len(rhos), dtype=torch.float64, device=x.device)
        self.norms: list[float] = []  # ||P_k(x0)|| per boundary
        self.tokens: list[torch.Tensor] = []  # (N,) ||rows of token t of P_k(x0)|| per boundary
        self.deltas: list[torch.Tensor] = []  # (1, K) per stage
        self.sups: list[torch.Tensor] = []
        self.curvs: list[torch.Tensor] = []
        self.radii: list[torch.Tensor] = []  # (1, K) total input radius per stage

    def _tangents_norms(self, p: torch.Tensor) -> tuple[float, torch.Tensor]:
        n, d = p.shape[2], p.shape[3]
        mat = p.reshape(p.shape[0], -1).T  # (N*D, n_in)
        return _op_norm(mat), _token_norms(mat, n, d)

    def start(self) -> tuple[torch.Tensor, torch.Tensor]:
        """P_0 = dE/dx at x0 (E affine). Returns (a_0, per-token a_0) as (1, K) / (1, K, N) radii factors."""
        fn = self.chain.embedding.fn
        n_in = self.x[0].numel()
        basis = torch.eye(n_in, dtype=self.x.dtype, device=self.x.device).reshape(n_in, *self.x.shape)

        def tangent(v: torch.Tensor) -> torch.Tensor:
            return jvp(fn, (self.x,), (v,))[1]

        self.p = vmap(tangent, chunk_size=CHUNK)(basis).detach()
        if self.chain.grc:
            self.p_y0 = self.p
        norm, tokens = self._tangents_norms(self.p)
        self.norms.append(norm)
        self.tokens.append(tokens)
        ones = torch.ones(1, len(self.rhos), dtype=torch.float64, device=self.x.device)
        return norm * ones, tokens[None, None, :].expand(1, len(self.rhos), -1)

    def step(self, k: int, h: torch.Tensor, y0: torch.Tensor | None, local: StageLocal, total_r, token_r):
        """After stage k: update the deviation bound and P; returns (a_k, per-token a_k)."""
        stage = self.chain.stages[k]
        norm_in, tok = self.norms[-1], self.tokens[-1]
        delta = local.curvature * total_r * norm_in
        if local.token_curvature is not None:  # block diagonal: (D_t(x) - D_t(x0)) acts on token t's rows only
            delta = torch.minimum(delta, _row_scaled(local.token_curvature * token_r, tok, norm_in))
        elif local.inner_curvature is not None:  # attention: split D = J_A(LN h) J_LN(h) and weight tokens
            z_total = torch.minimum(local.ln_gain.amax(-1) * total_r, (local.ln_gain * token_r).pow(2).sum(-1).sqrt())
            term_a = local.inner_curvature * z_total * _row_scaled(local.ln_gain, tok, norm_in)
            term_ln = local.inner_lip * _row_scaled(local.ln_curvature * token_r, tok, norm_in)
            delta = torch.minimum(delta, stage.ls * (term_a + term_ln))
        delta = torch.where(torch.isfinite(delta), delta, torch.full_like(delta, math.inf))
        self.deltas.append(delta)
        self.sups.append(local.sup)
        self.curvs.append(local.curvature)
        self.radii.append(total_r)
        self.e = local.sup * self.e + delta
        y_fixed = y0.detach() if y0 is not None else None

        def tangent(ph: torch.Tensor, py: torch.Tensor | None) -> torch.Tensor:
            if y_fixed is None or stage.kind == "norm":
                return jvp(lambda t: stage.forward(t, y_fixed), (h,), (ph,))[1]
            return jvp(stage.forward, (h, y_fixed), (ph, py))[1]

        py = self.p_y0 if self.p_y0 is not None else self.p
        self.p = vmap(tangent, chunk_size=CHUNK)(self.p, py).detach()
        norm, tokens = self._tangents_norms(self.p)
        self.norms.append(norm)
        self.tokens.append(tokens)
        return norm + self.e, tokens[None, None, :] + self.e[..., None]

    def finish(self, h_last: torch.Tensor, y0: torch.Tensor | None, hs: list[torch.Tensor], readout: ReadoutLocal,
               total_r: torch.Tensor, token_r: torch.Tensor) -> tuple[torch.Tensor, float]:  # fmt: skip
        """The bound (1, K) on B(x0, rho) and the exact ||J(x0)||."""
        chain = self.chain
        out, back = vjp(chain.readout.forward, h_last.detach())
        m = out.shape[-1]
        p_last = self.p.reshape(self.p.shape[0], -1).T  # (N*D, n_in)
        reach, rows = total_r, self.norms[-1]
        if chain.readout.pool == "token":  # the readout sees one token: its radius and its rows of P_K
            idx = chain.readout.index % h_last.shape[1]
            reach, rows = token_r[..., idx], self.tokens[-1][idx].item()
        delta_r = readout.curvature * reach * rows
        forward_only = readout.sup * self.e + delta_r
        if m > MAX_OUTPUTS:
            return forward_only + math.inf, math.nan
        eye = torch.eye(m, dtype=out.dtype, device=out.device)[:, None, :]
        q = vmap(back)(eye)[0].detach()  # (m, 1, N, D): rows of Q_K
        q_mat = q.reshape(m, -1)
        j0 = _op_norm(q_mat @ p_last.to(q_mat.dtype))
        c = torch.minimum(readout.sup, _op_norm(q_mat) + readout.curvature * reach)
        f = readout.curvature * reach
        total = j0 + delta_r
        for k in reversed(range(len(chain.stages))):
            stage, h = chain.stages[k], hs[k].detach()
            total = total + c * self.deltas[k]
            q_norm = _op_norm(q.reshape(m, -1))
            f = f * self.sups[k] + q_norm * self.curvs[k] * self.radii[k]
            y_fixed = y0.detach() if y0 is not None else None
            _, back_k = vjp(lambda t, stage=stage, y_fixed=y_fixed: stage.forward(t, y_fixed), h)
            q = vmap(back_k)(q)[0].detach()
            c = torch.minimum(c * self.sups[k], _op_norm(q.reshape(m, -1)) + f)
        bound = torch.minimum(total, j0 + forward_only)
        return torch.where(torch.isnan(bound), torch.full_like(bound, math.inf), bound), j0
