"""What this machine is and can do, measured in the run that reports against it: its CPU, cores,
memory and GPU, its GEMM rate (torch, all cores, the shape of a small model's MLP over a prefill
block, in the dtype the node computes a model in on this CPU: bf16 where the CPU multiplies it
natively, else fp32) and the bandwidth of reading and writing memory. Speeds stated as fractions
of these compare across machines."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

GEMM_SHAPE = (2048, 576, 1536)  # rows x inner x outer: SmolLM2's MLP over 2,048 tokens
COPY_BYTES = 256 * 2**20
# The vector instructions the node's CPU path chooses by: native bf16 (AVX-512 BF16 or AMX) or not.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


@dataclass(frozen=True, slots=True)
class Machine:
    cpu: str
    num_cores: int  # the logical CPUs this process may run on
    vector: tuple[str, ...]  # of VECTOR_FLAGS, those the CPU has
    memory_gib: float | None
    gpu: str | None
    gemm_gflops: float
    memory_gb_s: float
    gemm_dtype: str = "fp32"  # of the measured GEMM (records made before it was chosen: fp32)

    def describe(self) -> str:
        """One line: the CPU, its cores and vector instructions, the memory, the GPU if any."""
        vector = f" ({', '.join(self.vector)})" if self.vector else ""
        memory = f", {self.memory_gib:.0f} GiB memory" if self.memory_gib is not None else ""
        gpu = f", GPU {self.gpu}" if self.gpu else ", no GPU"
        return f"{self.cpu}, {self.num_cores} cores{vector}{memory}{gpu}"

    def rates(self) -> str:
        return (
            f"{self.gemm_dtype} GEMM {self.gemm_gflops:.0f} GFLOP/s, "
            f"memory bandwidth {self.memory_gb_s:.1f} GB/s"
        )


def measure() -> Machine:
    dtype = gemm_dtype()
    gemm, memory = _rates(dtype)
    cpu, flags = _cpuinfo()
    return Machine(
        cpu=cpu,
        num_cores=_num_cores(),
        vector=tuple(flag for flag in VECTOR_FLAGS if flag in flags),
        memory_gib=_memory_gib(),
        gpu=_gpu(),
        gemm_gflops=gemm,
        memory_gb_s=memory,
        gemm_dtype=dtype,
    )


def gemm_dtype() -> str:
    """The dtype the node computes a model in on this CPU (`server.engines.sglang.args`)."""
    from server.engines.sglang.cpu_compat import cpu_computes_bf16

    return "bf16" if cpu_computes_bf16() else "fp32"


def _rates(dtype: str) -> tuple[float, float]:
    import torch

    rows, inner, outer = GEMM_SHAPE
    kind = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a, b = torch.randn(rows, inner, dtype=kind), torch.randn(outer, inner, dtype=kind)
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
    return gemm, 2 * COPY_BYTES / best / 1e9  # read once, written once


def _num_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # Linux: what a container or taskset leaves this process
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cpuinfo() -> tuple[str, set[str]]:
    """The CPU's model name and flags as Linux reports them; elsewhere what platform knows."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), set()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    return name, set(fields.get("flags", "").split())


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    return None


def _gpu() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
