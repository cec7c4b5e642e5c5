"""B3 attention cost: BSA vs timm's SDPA attention, forward+backward time and memory at N = 50, 197, 1024 tokens.

Question: what does the bilateral position bias cost? BSA adds an (H, N, N) bias to the logits and hands it to
``scaled_dot_product_attention`` as ``attn_mask``, which should keep a fused kernel in use. This benchmark
checks that with the torch profiler: a fused kernel shows up as ``_scaled_dot_product_{flash,efficient,cudnn}...``
(``..._flash_attention_for_cpu`` on CPUs), the unfused fallback as ``_scaled_dot_product_attention_math``.
Targets: BSA / baseline <= 1.3 in time and in memory at every N.

Two modes, because they select different kernels: ``attack`` (weights frozen, gradient w.r.t. the input only:
what every attack and Lipschitz estimate does) and ``train`` (weights, and so BSA's learnable bias, need
gradients; a fused kernel must then also return the bias gradient).

Memory: on CUDA, the peak allocated memory of forward+backward (``torch.cuda.max_memory_allocated``). torch has
no CPU allocator statistics, so on a CPU the peak is reported as n/a and the benchmark measures the bytes the
autograd graph saves for backward instead (``saved_tensors_hooks``): the activation memory that dominates
training and attack memory, and the place where a materialised N x N attention matrix would show up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch
from timm.layers import Attention
from torch import nn
from torch.profiler import ProfilerActivity, profile

from benchmarks import _common as B
from robustbench_filters.models.bsa import bsa_layer

NAME = "b3_attention_cost"
DIM, HEADS = 192, 3  # DeiT-tiny's attention
LAYOUTS = {50: ((7, 7), 1), 197: ((14, 14), 1), 1024: ((32, 32), 0)}  # N -> (patch grid, prefix tokens)
FULL = {"tokens": [50, 197, 1024], "batch": {50: 32, 197: 16, 1024: 2}, "reps": 5, "warmup": 1}
# a GPU needs larger batches, or every kernel is launch-bound and the ratios measure launch overhead
GPU_BATCH = {50: 256, 197: 128, 1024: 16}
SMOKE = {"tokens": [50, 197], "batch": {50: 2, 197: 1}, "reps": 2, "warmup": 0}
FUSED = ("flash", "efficient", "cudnn")
MODES = ("attack", "train")


def build(kind: str, n: int, device: torch.device, mode: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "sdpa":
        module = Attention(DIM, num_heads=HEADS, qkv_bias=True)
    else:
        module = bsa_layer()(DIM, num_heads=HEADS, qkv_bias=True)
        grid, prefix = LAYOUTS[n]
        module.configure(grid=grid, num_prefix_tokens=prefix)
    module.fused_attn = True
    module.requires_grad_(mode == "train")
    return module.to(device).train()


def step(module: nn.Module, x: torch.Tensor) -> None:
    module(x).square().mean().backward()


def saved_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes of distinct storages autograd keeps for backward (CPU stand-in for activation memory)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x).square().mean()
    out.backward()
    inputs = {x.untyped_storage().data_ptr(), *(p.untyped_storage().data_ptr() for p in module.parameters())}
    return sum(size for ptr, size in seen.items() if ptr not in inputs)  # activations only, not inputs or weights


def peak_bytes(module: nn.Module, x: torch.Tensor, device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    step(module, x)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def sdpa_ops(module: nn.Module, x: torch.Tensor) -> list[str]:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if x.is_cuda else [])
    with profile(activities=activities) as prof:
        step(module, x)
    return sorted({e.key for e in prof.key_averages() if "scaled_dot_product" in e.key})


def fused(ops: list[str]) -> bool:
    return any(f in op for op in ops for f in FUSED) and not any("math" in op for op in ops)


def run(smoke: bool = False, out: Path | None = None, reps: int | None = None, device: str = "cpu") -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    dev = B.resolve_device(device)
    if dev.type == "cuda" and not smoke:
        cfg |= {"batch": GPU_BATCH, "reps": max(cfg["reps"], 20), "warmup": 3}
    rows = []
    for mode in MODES:
        for n in cfg["tokens"]:
            b = cfg["batch"][n]
            x = torch.randn(b, n, DIM, device=dev, requires_grad=True)
            modules = {kind: build(kind, n, dev, mode) for kind in ("sdpa", "bsa")}
            fns = {kind: (lambda m=m, x=x: step(m, x)) for kind, m in modules.items()}
            times, _ = B.interleaved(fns, cfg["reps"], dev, cfg["warmup"])
            for kind, m in modules.items():
                ops = sdpa_ops(m, x)
                peak = peak_bytes(m, x, dev)
                rows.append(
                    {
                        "mode": mode,
                        "N": n,
                        "batch": b,
                        "attention": kind,
                        "fwd_bwd_ms": round(1000 * B.median(times[kind]), 3),
                        "peak_MiB": round(peak / 2**20, 2) if peak is not None else "n/a on CPU",
                        "saved_for_backward_MiB": round(saved_bytes(m, x) / 2**20, 3),
                        "fused_kernel": fused(ops),
                        "sdpa_ops": ", ".join(op.removeprefix("aten::") for op in ops),
                    }
                )
    table = pd.DataFrame(rows)
    ratios = []
    mem_key = "peak_MiB" if dev.type == "cuda" else "saved_for_backward_MiB"
    for (mode, n), grp in table.groupby(["mode", "N"], sort=False):
        base = grp[grp.attention == "sdpa"].iloc[0]
        for _, r in grp[grp.attention != "sdpa"].iterrows():
            ratios.append(
                {
                    "mode": mode,
                    "N": n,
                    "attention": r.attention,
                    "time_ratio": round(r.fwd_bwd_ms / base.fwd_bwd_ms, 3),
                    "memory_ratio": round(float(r[mem_key]) / max(float(base[mem_key]), 1e-9), 3),
                    "fused_kernel": r.fused_kernel,
                }
            )
    ratio_table = pd.DataFrame(ratios)
    targets = {}
    for mode in MODES:
        stock = ratio_table[(ratio_table.attention == "bsa") & (ratio_table["mode"] == mode)]
        targets |= {
            f"{mode}: max time ratio bsa/sdpa": B.target(float(stock.time_ratio.max()), 1.3),
            f"{mode}: max memory ratio bsa/sdpa ({mem_key})": B.target(float(stock.memory_ratio.max()), 1.3),
            f"{mode}: bsa stays on a fused SDPA kernel (1 = yes)": B.target(float(stock.fused_kernel.all()), 1.0, ">="),
        }
    notes = [
        f"dims {DIM}, {HEADS} heads (DeiT-tiny); gaussian BSA; grids: {LAYOUTS}; fp32 on {dev}; interleaved, "
        f"median of {cfg['reps']} repetitions.",
        "bsa = BilateralAttention as shipped (bias (1, H, N, N), broadcast over the batch).",
    ]
    if dev.type == "cuda":
        notes.append("train mode: the memory-efficient kernel materialises the bias gradient per batch element "
                     "(B x H x N x N) before reducing it over the batch; attack mode needs no bias gradient.")  # fmt: skip
    else:
        notes.append("On CPU, torch's flash kernel takes no mask that needs a gradient: in train mode (learnable "
                     "sigma) SDPA falls back to the math path, which materialises the N x N attention.")  # fmt: skip
    if dev.type != "cuda":
        notes.append("peak memory: n/a on CPU (torch has no CPU allocator statistics); memory ratios use the bytes "
                     "saved for backward instead.")  # fmt: skip
    result = {
        "benchmark": NAME,
        "title": "B3 attention cost: BSA vs SDPA attention",
        "question": "Forward+backward time and memory of BSA over timm Attention, and whether SDPA stays fused.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "device": str(dev), "dim": DIM, "heads": HEADS},
        "machine": B.machine(),
        "targets": targets,
        "notes": notes,
    }
    tables = {"measurements": table, "ratios over sdpa": ratio_table}
    return B.finish(NAME, result, tables, out)


if __name__ == "__main__":
    B.cli(run)
