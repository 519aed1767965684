"""The product of rows with a weight in GGUF blocks as the compiled kernel computes it
(`cpu/kernels/block_products.c`), in torch, its reference: each row put in 16-bit integers per
block of 32 (scale: the block's largest magnitude over 32767, values rounded half to even), each
block's integer dot product scaled by both scales, plus, for blocks with a low, the low times the
sum of the row's own values."""

from __future__ import annotations

import torch


def block_product(
    x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, lows: torch.Tensor | None
) -> torch.Tensor:
    """x [rows, columns] (bf16 or fp32); values [outputs, columns] integers (the blocks' q);
    scales and lows [outputs, columns // 32]. Returns [rows, outputs] in float64."""
    rows, columns = x.shape
    blocks = x.float().view(rows, columns // 32, 32)
    top = blocks.abs().amax(dim=-1, keepdim=True)
    inverse = torch.where(top > 0, 32767.0 / top, torch.zeros_like(top))
    quantized = torch.round(blocks * inverse)  # [rows, blocks, 32]
    x_scale = (top / 32767.0).squeeze(-1)  # [rows, blocks]
    q = values.double().view(values.shape[0], columns // 32, 32)  # [outputs, blocks, 32]
    dots = torch.einsum("rbi,obi->rob", quantized.double(), q)  # [rows, outputs, blocks]
    out = (dots * scales.double()[None] * x_scale.double()[:, None]).sum(-1)
    if lows is not None:
        sums = blocks.double().sum(-1)  # [rows, blocks]
        out = out + sums @ lows.double().t()
    return out
