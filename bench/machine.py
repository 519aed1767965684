"""What this machine can do, measured in the run that reports against it: its fp32 GEMM rate
(torch, all cores, the shape of a small model's MLP over a prefill block) and the bandwidth of
reading and writing memory. Speeds stated as fractions of these compare across machines."""

from __future__ import annotations

import time
from dataclasses import dataclass

GEMM_SHAPE = (2048, 576, 1536)  # rows x inner x outer: SmolLM2's MLP over 2,048 tokens
COPY_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Machine:
    gemm_gflops: float
    memory_gb_s: float


def measure() -> Machine:
    import torch

    rows, inner, outer = GEMM_SHAPE
    a, b = torch.randn(rows, inner), torch.randn(outer, inner)
    best = float("inf")
    for _ in range(10):
        started = time.perf_counter()
        torch.nn.functional.linear(a, b)
        best = min(best, time.perf_counter() - started)
    gemm = 2 * rows * inner * outer / best / 1e9
    source = torch.empty(COPY_BYTES // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return Machine(gemm, 2 * COPY_BYTES / best / 1e9)  # read once, written once
