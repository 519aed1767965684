"""`sgl_kernel.mamba` of SGLang's CPU build: the Python entry points its GDN backend imports
(`sglang.srt.layers.attention.linear.gdn_backend`, `.linear.kernels.gdn_triton`) over the ops of
`conv` and `gated_delta`, with the signatures SGLang 0.5.23 calls them with."""

from __future__ import annotations

import torch

from . import conv, gated_delta  # noqa: F401  (they register the ops called here)

PAD_SLOT_ID = -1  # SGLang's slot index of a padding request


def _silu(activation: str | None) -> bool:
    return activation in ("silu", "swish")


def causal_conv1d_fn_cpu(
    mixed_qkv_transposed: torch.Tensor,
    conv_weights: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_states: torch.Tensor,
    has_initial_state: torch.Tensor,
    cache_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens_cpu: list[int] | None,
) -> torch.Tensor:
    """The prefill convolution of sequences packed back to back: mixed_qkv_transposed (dim,
    tokens); returns (dim, tokens) and leaves each sequence's last inputs in its conv state slot
    (see `conv.causal_conv1d_fwd_cpu`). seq_lens_cpu is not needed: query_start_loc has them."""
    del seq_lens_cpu
    return torch.ops.sgl_kernel.causal_conv1d_fwd_cpu(
        mixed_qkv_transposed,
        conv_weights,
        bias,
        conv_states,
        query_start_loc,
        cache_indices,
        has_initial_state,
        _silu(activation),
        PAD_SLOT_ID,
        False,  # weights are never VNNI-packed without AMX
    )


def causal_conv1d_update_cpu(
    mixed_qkv: torch.Tensor,
    conv_states: torch.Tensor,
    conv_weights: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_state_indices: torch.Tensor | None,
    intermediate_conv_window: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    retrieve_next_token: torch.Tensor | None = None,
    retrieve_next_sibling: torch.Tensor | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
) -> torch.Tensor:
    """The decode convolution, one token per request: mixed_qkv (batch, dim) -> (batch, dim),
    each request's conv state shifted by its token in place. The other arguments are those of
    speculative decoding's target verify, which this stand-in does not serve."""
    del intermediate_state_indices, retrieve_next_token, retrieve_next_sibling
    del retrieve_parent_token
    if intermediate_conv_window is not None:
        raise NotImplementedError(
            "causal_conv1d_update_cpu: speculative target verify is not served by the "
            "sgl_kernel stand-in"
        )
    return torch.ops.sgl_kernel.causal_conv1d_update_cpu(
        mixed_qkv,
        conv_states,
        conv_weights,
        bias,
        _silu(activation),
        None,
        conv_state_indices,
        PAD_SLOT_ID,
        False,
    )


def chunk_gated_delta_rule_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, None]:
    """The GDN prefill (see `gated_delta.chunk_gated_delta_rule_cpu`): returns (out (1, tokens,
    value_heads, V), initial_state, the state pool updated in place, None). The third value, the
    per-chunk states some GPU kernels return for prefix caching, is None as in SGLang's CPU
    build."""
    out, final_state = torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu(
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        True,  # output_final_state
        cu_seqlens,
        head_first,
        use_qk_l2norm_in_kernel,
        initial_state_indices,
    )
    return out, final_state, None
