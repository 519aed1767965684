"""The gated RMSNorm of Gated DeltaNet layers (Qwen3.5, Qwen3-Next) in plain torch.

SGLang 0.5.23 runs `fla.layernorm_gated.RMSNorm` through its own CPU kernel only on AMX machines;
elsewhere it reaches a Triton kernel, which has no CPU backend. This is that kernel's arithmetic:
in fp32, y = rmsnorm(x) * w, gated by act(z) after the norm (or x gated before it), per group
when `group_size` is set, cast back to x's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

FORWARD = "sglang.kernels.ops.attention.fla.layernorm_gated.RMSNorm.forward"
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swish": F.silu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}


def gated_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor | None,
    eps: float,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    activation: str = "swish",
) -> torch.Tensor:
    gate = ACTIVATIONS[activation]
    shape = x.shape
    values = x.float()
    gates = None if z is None else gate(z.float().reshape(shape))
    if gates is not None and not norm_before_gate:
        values = values * gates
    width = group_size or shape[-1]
    grouped = values.reshape(*shape[:-1], shape[-1] // width, width)
    normed = grouped * torch.rsqrt(grouped.square().mean(dim=-1, keepdim=True) + eps)
    out = normed.reshape(shape) * weight.float()
    if gates is not None and norm_before_gate:
        out = out * gates
    return out.to(x.dtype)


def plain_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement for `RMSNorm.forward` (the original is Triton's)."""
    del original

    def forward(self: Any, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        if self.bias is not None:
            raise NotImplementedError("a gated RMSNorm with a bias has no CPU path here")
        return gated_rms_norm(
            x, self.weight, z, self.eps, self.group_size, self.norm_before_gate, self.activation
        )

    return forward
