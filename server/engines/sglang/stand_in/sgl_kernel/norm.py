"""The RMSNorms of SGLang's CPU build that Qwen3.5 reaches, in torch.

`sglang.srt.models.qwen3_5` binds the two per-head q/k norms at import and calls them in every
full-attention layer; the weight is Gemma's, applied as (1 + w). `fused_rmsnorm_gated_cpu` is the
gated norm of its GDN layers, which SGLang calls only on AMX machines (elsewhere it runs
`fla.layernorm_gated`'s own path). All compute in fp32 and round once to the input's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rms_normalized(rows: torch.Tensor, eps: float) -> torch.Tensor:
    """rows (..., d) in fp32, scaled to unit root-mean-square over the last dim."""
    rows = rows.float()
    return rows * torch.rsqrt(rows.square().mean(dim=-1, keepdim=True) + eps)


def _gemma_heads(x: torch.Tensor, weight: torch.Tensor, eps: float, head_dim: int) -> torch.Tensor:
    """Gemma RMSNorm of each head_dim-wide head of x (tokens, heads * head_dim), as fp32 rows of
    (tokens * heads, head_dim)."""
    return _rms_normalized(x.reshape(-1, head_dim), eps) * (1.0 + weight.float())


def _check_2d(name: str, *tensors: torch.Tensor) -> None:
    if any(t.dim() != 2 for t in tensors):
        raise ValueError(f"{name}: q and k must be 2D (tokens, heads * head_dim)")


@torch.library.custom_op(
    "sgl_kernel::fused_qk_gemma_rmsnorm_cpu",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim) "
    "-> (Tensor, Tensor)",
)
def fused_qk_gemma_rmsnorm_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head Gemma RMSNorm of q (tokens, heads * head_dim) and k (tokens, kv_heads * head_dim);
    q and k may be views with a row stride (slices of the fused qkv projection). Returns new
    contiguous tensors of q's and k's shapes."""
    _check_2d("fused_qk_gemma_rmsnorm_cpu", q, k)
    q_out = _gemma_heads(q, q_weight, eps, head_dim).to(q.dtype).reshape(q.shape)
    k_out = _gemma_heads(k, k_weight, eps, head_dim).to(k.dtype).reshape(k.shape)
    return q_out, k_out


@torch.library.custom_op(
    "sgl_kernel::fused_qk_gemma_rmsnorm_with_gate_cpu",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor q_gate, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim, "
    "int num_head) -> (Tensor, Tensor, Tensor)",
)
def fused_qk_gemma_rmsnorm_with_gate_cpu(
    q_gate: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    head_dim: int,
    num_head: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q_gate (tokens, num_head * 2 * head_dim) holds, per head, q then its output gate. Returns
    (q normed, k normed, gate copied), each contiguous: (tokens * num_head, head_dim),
    (tokens * kv_heads, head_dim), (tokens * num_head, head_dim)."""
    _check_2d("fused_qk_gemma_rmsnorm_with_gate_cpu", q_gate, k)
    if q_gate.shape[1] != num_head * head_dim * 2:
        raise ValueError("fused_qk_gemma_rmsnorm_with_gate_cpu: q_gate is not 2 * heads wide")
    per_head = q_gate.reshape(q_gate.shape[0], num_head, 2, head_dim)
    q_out = _gemma_heads(per_head[:, :, 0], q_weight, eps, head_dim).to(q_gate.dtype)
    k_out = _gemma_heads(k, k_weight, eps, head_dim).to(k.dtype)
    gate_out = q_gate.new_empty((*per_head.shape[:2], head_dim)).copy_(per_head[:, :, 1])
    gate_out = gate_out.view(-1, head_dim)
    return q_out, k_out, gate_out


@torch.library.custom_op(
    "sgl_kernel::fused_rmsnorm_gated_cpu",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor input, Tensor weight, Tensor gate, float eps) -> Tensor",
)
def fused_rmsnorm_gated_cpu(
    input: torch.Tensor, weight: torch.Tensor, gate: torch.Tensor, eps: float
) -> torch.Tensor:
    """Qwen3-Next/Qwen3.5's gated norm, norm before gate: rmsnorm(input) * weight * silu(gate).
    input, gate: (rows, hidden); weight: (hidden,) applied as is (not Gemma's 1 + w)."""
    if input.dim() != 2 or gate.shape != input.shape:
        raise ValueError("fused_rmsnorm_gated_cpu: input and gate must be 2D of one shape")
    normed = _rms_normalized(input, eps) * weight.float()
    return (normed * F.silu(gate.float())).to(input.dtype)
