"""Softmax over the last dimension, relaxed through ``s_j = 1 / sum_k exp(z_k - z_j)``.

The differences ``d_kj = z_k - z_j`` are linear in the logits, so their bounds come from the logits' linear form
(the correlation between z_k and z_j is kept: a shared shift of every logit leaves d unchanged). Then

    exp(d_kj)  in a_kj d_kj + [..]           (chord / parallel tangent on the d bounds, exp(0) = 1 exactly)
    T_j = sum_k exp(d_kj)                      (bounded from its own linear form, and T_j >= 1)
    s_j = 1 / T_j in p_j T_j + [..]            (chord / parallel tangent of 1/T on the T bounds, p_j < 0)

which composes to one linear map of the logits per row, ``s in C z + [mid +- err]`` with
``C[j, k] = p_j a_kj`` (k != j) and ``C[j, j] = -p_j sum_k a_kj``: equal slopes, like every relaxation here.
This is tighter than relaxing exp(z) / sum exp(z) as a product, which loses the shift invariance.

For the Lipschitz bound, the real Jacobian ``diag(s) - s s^T`` is bounded entrywise from the output bounds of s,
and ``dm`` is its largest distance from C.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import scalar as S
from .interval import Interval, tol
from .ops import Op


@dataclass
class SoftmaxRelax:
    c: torch.Tensor  # (B, L, M, M): row j, column k
    mid: torch.Tensor  # (B, L, M)
    err: torch.Tensor
    dm: torch.Tensor | None = None
    box: Interval | None = None  # s_j in [1 / T_j hi, 1 / T_j lo]: exact for the bounds of T, which keep correlations


def _diff_bounds(bz: Interval, form, domain) -> Interval:
    """Bounds (B, L, M_k, M_j) of d_kj = z_k - z_j from the logits' intervals, and from their form if given."""
    lo = bz.lo[..., :, None] - bz.hi[..., None, :]
    hi = bz.hi[..., :, None] - bz.lo[..., None, :]
    if form is not None and form.a is not None:
        b, k = form.a.shape[:2]
        m = bz.lo.shape[-1]
        a = form.a.reshape(b, k, -1, m)  # (B, K, L, M)
        mid, err = form.mid.reshape(b, -1, m), form.err.reshape(b, -1, m)

        def centre(x: torch.Tensor) -> torch.Tensor:
            v = torch.einsum("bklm,bk->blm", a, x) + mid
            return v[..., :, None] - v[..., None, :]

        def pairwise(p: torch.Tensor, order: float) -> torch.Tensor:  # p (B, L, M, K) -> (B, L, M, M)
            flat = p.reshape(-1, m, k)
            dist = torch.cdist(flat, flat, p=order, compute_mode="donot_use_mm_for_euclid_dist")
            return dist.reshape(b, -1, m, m)

        e = err[..., :, None] + err[..., None, :]
        c_box = centre(domain.mid)
        spread = pairwise((a * domain.rad[:, :, None, None]).permute(0, 2, 3, 1), 1.0)
        f_lo, f_hi = c_box - spread - e, c_box + spread + e
        if domain.rho is not None:
            c_ball = centre(domain.centre)
            r = domain.rho * pairwise(a.permute(0, 2, 3, 1), 2.0)
            f_lo, f_hi = torch.maximum(f_lo, c_ball - r - e), torch.minimum(f_hi, c_ball + r + e)
        s = torch.einsum("bklm,bk->blm", a.abs(), domain.mid.abs() + domain.rad) + mid.abs()
        slack = tol(f_lo.dtype) * (s[..., :, None] + s[..., None, :] + e)
        lo = torch.maximum(lo, (f_lo - slack).reshape(lo.shape))
        hi = torch.minimum(hi, (f_hi + slack).reshape(hi.shape))
    eye = torch.eye(lo.shape[-1], dtype=torch.bool, device=lo.device)
    return Interval(lo.masked_fill(eye, 0.0), hi.masked_fill(eye, 0.0))


class Softmax(Op):
    """Softmax over the last dimension (attention weights)."""

    affine = False
    value_range = (0.0, 1.0)

    def __init__(self, inp: int, shape, name: str) -> None:
        self.inputs, self.shape, self.name = (inp,), tuple(shape), name

    def forward(self, z):
        return z.softmax(-1)

    def ibp(self, bz):
        m = bz.lo.shape[-1]
        eye = torch.eye(m, dtype=torch.bool, device=bz.lo.device)
        up = (bz.hi[..., :, None] - bz.lo[..., None, :]).masked_fill(eye, 0.0)  # d_kj upper, [k, j]
        dn = (bz.lo[..., :, None] - bz.hi[..., None, :]).masked_fill(eye, 0.0)
        lo = 1.0 / torch.exp(up).sum(-2)
        hi = 1.0 / torch.exp(dn).sum(-2)
        t = tol(lo.dtype)
        return Interval((lo * (1 - t)).clamp(0, 1), (hi * (1 + t)).clamp(0, 1))

    def relax(self, bounds, forms, domain):
        bz = bounds[0]
        shape = bz.lo.shape
        m = shape[-1]
        b = shape[0]
        flat = Interval(bz.lo.reshape(b, -1, m), bz.hi.reshape(b, -1, m))
        d = _diff_bounds(flat, forms[0] if forms else None, domain)
        ex = S.relax_exp(d)
        eye = torch.eye(m, dtype=torch.bool, device=d.lo.device)
        a = ex.slope.masked_fill(eye, 0.0)  # (B, L, k, j)
        bmid, berr = ex.mid.masked_fill(eye, 1.0), ex.err.masked_fill(eye, 0.0)
        asum = a.sum(-2)  # (B, L, j)
        tmid, terr = bmid.sum(-2), berr.sum(-2)
        t_lo = torch.exp(d.lo).sum(-2)
        t_hi = torch.exp(d.hi).sum(-2)
        form = forms[0] if forms else None
        if form is not None and form.a is not None:
            k = form.a.shape[1]
            az = form.a.reshape(b, k, -1, m)
            at = torch.einsum("bklm,blmj->bklj", az, a) - az * asum[:, None]
            zm, ze = form.mid.reshape(b, -1, m), form.err.reshape(b, -1, m)
            mid_t = torch.einsum("blm,blmj->blj", zm, a) - zm * asum + tmid
            err_t = torch.einsum("blm,blmj->blj", ze, a) + ze * asum + terr
            from .form import LinearForm

            tb = LinearForm(at, mid_t, err_t).bounds(domain)
            t_lo, t_hi = torch.maximum(t_lo, tb.lo), torch.minimum(t_hi, tb.hi)
        t_lo = t_lo.clamp_min(1.0)
        t_hi = torch.maximum(t_hi, t_lo)
        rec = S.relax_reciprocal(Interval(t_lo, t_hi))
        p = rec.slope  # (B, L, j) < 0
        c = p[..., :, None] * a.transpose(-1, -2)  # [j, k] = p_j a_kj
        c = c - torch.diag_embed(p * asum)
        mid = p * tmid + rec.mid
        err = p.abs() * terr + rec.err
        err = err + tol(mid.dtype) * (mid.abs() + err)
        t = tol(t_lo.dtype)
        box = Interval(((1 - t) / t_hi).reshape(shape).clamp(0, 1), ((1 + t) / t_lo).reshape(shape).clamp(0, 1))
        return SoftmaxRelax(c, mid.reshape(shape), err.reshape(shape), box=box)

    def implied(self, rel):
        return rel.box

    def finish(self, rel, out):
        b, m = out.lo.shape[0], out.lo.shape[-1]
        sl = out.lo.reshape(b, -1, m).clamp(0, 1)
        sh = out.hi.reshape(b, -1, m).clamp(0, 1)
        off_lo = -(sh[..., :, None] * sh[..., None, :])
        off_hi = -(sl[..., :, None] * sl[..., None, :])
        g = lambda s: s - s * s  # noqa: E731
        d_lo = torch.minimum(g(sl), g(sh))
        d_hi = g(torch.minimum(torch.maximum(torch.full_like(sl, 0.5), sl), sh))
        eye = torch.eye(m, dtype=torch.bool, device=sl.device)
        lo = torch.where(eye, torch.diag_embed(d_lo), off_lo)
        hi = torch.where(eye, torch.diag_embed(d_hi), off_hi)
        rel.dm = torch.maximum(hi - rel.c, rel.c - lo).clamp_min(0) + tol(lo.dtype) * (rel.c.abs() + 1)

    def lin(self, rel, ts, mode="c"):
        t = ts[0]
        b, n = t.shape[:2]
        m = t.shape[-1]
        coef = {"c": rel.c, "abs": rel.c.abs(), "dm": rel.dm}[mode]
        out = torch.einsum("bljk,btlk->btlj", coef, t.reshape(b, n, -1, m))
        return out.reshape(t.shape)

    def lin_t(self, rel, lam, mode, in_shapes):
        b, n = lam.shape[:2]
        m = lam.shape[-1]
        coef = {"c": rel.c, "abs": rel.c.abs(), "dm": rel.dm}[mode]
        out = torch.einsum("bljk,btlj->btlk", coef, lam.reshape(b, n, -1, m))
        return [out.reshape(lam.shape)]

    def const(self, rel):
        return rel.mid, rel.err

    def macs(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * self.shape[-1]
