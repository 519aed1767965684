"""A faster prefill ("extend") for SGLang's plain-torch attention, the backend CPUs without AMX
run on. SGLang 0.5.23's version pads each request's new queries to the whole sequence and
attends from every position, so a prompt whose prefix the radix cache already holds still costs
attention over all of it, squared. When the new tokens are few next to the cached prefix, this
one attends from them only, through a causal mask offset by the prefix: the same result (a unit
test compares the two), at the cost of the new tokens. When they are many, the padded square
with the fused causal kernel (which skips the masked half) is cheaper, and is kept. Measured on
2k tokens: 34 ms per layer padded; with a mask, 0.8 ms for 20 new tokens, 58 ms for 2,025.
Installed by `plugin.py`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.functional import scaled_dot_product_attention

# Attend from the new tokens only when they are under a third of the sequence.
FEW_NEW_TOKENS = 3
TARGET = (
    "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend."
    "_run_sdpa_forward_extend"
)


def new_tokens_only(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The replacement for `_run_sdpa_forward_extend`; what it does not handle (encoder-decoder
    models, sliding windows) goes to the original."""

    def run_sdpa_forward_extend(
        self: Any,
        query: torch.Tensor,
        output: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        extend_prefix_lens: torch.Tensor,
        extend_seq_lens: torch.Tensor,
        encoder_lens: torch.Tensor | None = None,
        scaling: float | None = None,
        enable_gqa: bool = False,
        causal: bool = False,
        is_cross_attn: bool = False,
        sliding_window_size: int | None = None,
    ) -> torch.Tensor:
        windowed = sliding_window_size is not None and sliding_window_size > -1
        if encoder_lens is not None or is_cross_attn or windowed:
            return original(
                self, query, output, k_cache, v_cache, req_to_token, req_pool_indices,
                seq_lens, extend_prefix_lens, extend_seq_lens, encoder_lens, scaling=scaling,
                enable_gqa=enable_gqa, causal=causal, is_cross_attn=is_cross_attn,
                sliding_window_size=sliding_window_size,
            )  # fmt: skip
        heads_first = query.movedim(0, query.dim() - 2)  # [heads, tokens, dim]
        start = 0
        for index in range(seq_lens.shape[0]):
            new, prefix = int(extend_seq_lens[index]), int(extend_prefix_lens[index])
            length = int(seq_lens[index])
            tokens = req_to_token[req_pool_indices[index], :length]
            key = k_cache[tokens].movedim(0, query.dim() - 2)
            value = v_cache[tokens].movedim(0, query.dim() - 2)
            q = heads_first[:, start : start + new, :]
            if key.dtype != q.dtype:
                key, value = key.to(q.dtype), value.to(q.dtype)
            mask = None
            if causal and prefix and new * FEW_NEW_TOKENS < length:
                # New token j sits at position prefix + j: it sees every key up to there.
                mask = torch.ones(new, length, dtype=torch.bool, device=q.device).tril(prefix)
            elif prefix:
                # Many new tokens: the padded square and the fused causal kernel, as SGLang does.
                padded = q.new_empty((q.shape[0], length, q.shape[2]))
                padded[:, prefix:, :] = q
                q = padded
            out = scaled_dot_product_attention(
                q.contiguous().unsqueeze(0),  # SDPA's fused CPU kernel wants it contiguous
                key.unsqueeze(0),
                value.unsqueeze(0),
                attn_mask=mask,
                is_causal=causal and mask is None,
                scale=scaling,
                enable_gqa=enable_gqa,
            )
            out = out.squeeze(0).movedim(query.dim() - 2, 0)
            output[start : start + new] = out[-new:] if new else out[:0]
            start += new
        return output

    return run_sdpa_forward_extend
