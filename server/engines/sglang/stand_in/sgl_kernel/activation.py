"""The output gate of gated attention in SGLang's CPU build, in torch: Qwen3.5's full-attention
layers multiply their attention output by sigmoid(gate) through
`torch.ops.sgl_kernel.fused_sigmoid_mul_cpu`, bound at import of `sglang.srt.models.qwen3_5`."""

from __future__ import annotations

import math

import torch


@torch.library.custom_op(
    "sgl_kernel::fused_sigmoid_mul_cpu",
    mutates_args=("input",),
    device_types="cpu",
    schema="(Tensor(a!) input, Tensor gate) -> ()",
)
def fused_sigmoid_mul_cpu(input: torch.Tensor, gate: torch.Tensor) -> None:
    """input *= sigmoid(gate), in place. input: (tokens, heads * head_dim), contiguous; gate:
    (tokens, heads * head_dim) or (tokens, heads, head_dim), which may be a strided view (the gate
    half of an interleaved q/gate projection). In fp32, rounded once to input's dtype."""
    if input.dim() != 2 or gate.dim() not in (2, 3):
        raise ValueError("fused_sigmoid_mul_cpu: input must be 2D and gate 2D or 3D")
    if gate.shape[0] != input.shape[0] or math.prod(gate.shape[1:]) != input.shape[1]:
        raise ValueError(
            f"fused_sigmoid_mul_cpu: gate {tuple(gate.shape)} does not match input "
            f"{tuple(input.shape)}"
        )
    gated = input.float() * torch.sigmoid(gate.float()).reshape(input.shape)
    input.copy_(gated)
