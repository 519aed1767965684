"""Stand-in for SGLang's `sgl_kernel` wherever no CPU build of it is installed (PyPI has none).

In CPU mode SGLang 0.5.23 imports a few CPU kernels at module load. Without AMX its layers take
their plain-torch paths, and of these names only `assign_req_to_token_pool_cpu` is ever called; it
is implemented here in torch, as is the op seeded sampling calls,
`torch.ops.sgl_kernel.murmur_hash32_cpu`. The others exist so the imports succeed and fail
loudly if reached.

Qwen3.5 (`Qwen3_5ForConditionalGeneration`) calls SGLang's CPU kernels even without AMX; those
are implemented here in torch, with the schemas of SGLang's CPU build, and registered as
`torch.ops.sgl_kernel.*` when this package is imported (SGLang binds them at import):
- `activation`: `fused_sigmoid_mul_cpu`, the output gate of its gated attention;
- `norm`: `fused_qk_gemma_rmsnorm_cpu`, `fused_qk_gemma_rmsnorm_with_gate_cpu` (its per-head q/k
  norms) and `fused_rmsnorm_gated_cpu` (the GDN layers' gated norm, called by SGLang on AMX only);
- `gated_delta`: its Gated DeltaNet layers' `fused_qkvzba_split_reshape_cat_contiguous_cpu`,
  `fused_gdn_gating_cpu`, `fused_sigmoid_gating_delta_rule_update_cpu` (decode) and
  `chunk_gated_delta_rule_cpu` (prefill);
- `conv`: `causal_conv1d_fwd_cpu` and `causal_conv1d_update_cpu`, their short convolution;
- `mamba`: `sgl_kernel.mamba`, the Python entry points SGLang's GDN backend imports over them.

This module must not define `torch.ops.sgl_kernel.convert_weight_packed`: SGLang reads that op as
"the AMX backend is available".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import activation, conv, gated_delta, mamba, norm  # noqa: F401  (register their ops)


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For request i, write the next (end - start) cache locations into its row of the
    request-to-token map, columns start..end."""
    del pool_len
    position = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[position : position + count]
        position += count


_M32 = 0xFFFFFFFF


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """One MurmurHash3 (32-bit) block: values held in int64, products kept to their low 32 bits."""
    k = _rotl((k * 0xCC9E2D51) & _M32, 15)
    h = _rotl(h ^ ((k * 0x1B873593) & _M32), 13)
    return (h * 5 + 0xE6546B64) & _M32


def _fmix(h: torch.Tensor) -> torch.Tensor:
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & _M32
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def murmur_hash32_cpu(
    seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor
) -> torch.Tensor:
    """SGLang's seeded-sampling hash (its Triton kernel, in torch): out[i, j] is MurmurHash3 of
    the 16 bytes seed[i] (low, then high word), positions[i], col_indices[j]; uint32, (n, m)."""
    seed = seed.view(torch.int64) if seed.dtype == torch.uint64 else seed.to(torch.int64)
    h = _mix(torch.zeros_like(seed), seed & _M32)
    h = _mix(h, (seed >> 32) & _M32)
    h = _mix(h, positions.to(torch.int64) & _M32)
    h = _mix(h.view(-1, 1), (col_indices.to(torch.int64) & _M32).view(1, -1))
    return _fmix(h ^ 16).to(torch.uint32)


# Registered once per process, as SGLang's CPU build registers its ops: `torch.ops.sgl_kernel.*`.
_murmur_op = torch.library.custom_op(
    "sgl_kernel::murmur_hash32_cpu", mutates_args=(), device_types="cpu"
)(murmur_hash32_cpu)


@_murmur_op.register_fake
def _murmur_hash32_shape(
    seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor
) -> torch.Tensor:
    del positions
    return seed.new_empty((seed.shape[0], col_indices.shape[0]), dtype=torch.uint32)


def _missing(name: str) -> Callable[..., None]:
    def kernel(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not available on this CPU (b3os-infer's stand-in for CPUs "
            "without AMX implements only what plain-torch serving calls)"
        )

    kernel.__name__ = name
    return kernel


copy_all_layer_kv_cache_cpu = _missing("copy_all_layer_kv_cache_cpu")
build_tree_kernel_efficient_cpu = _missing("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _missing("verify_tree_greedy_cpu")
assign_draft_cache_locs_contiguous_cpu = _missing("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _missing("assign_extend_cache_locs_cpu")
fill_accept_out_cache_loc_cpu = _missing("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _missing("fill_bonus_tokens_cpu")
rotate_input_ids_cpu = _missing("rotate_input_ids_cpu")
rmsnorm = _missing("rmsnorm")
