"""Stand-in for SGLang's `sgl_kernel` on CPUs without AMX, where no CPU build of it exists on PyPI.

In CPU mode SGLang 0.5.23 imports a few CPU kernels at module load. Without AMX its layers take
their plain-torch paths, and of these names only `assign_req_to_token_pool_cpu` is ever called; it
is implemented here in torch. The others exist so the imports succeed and fail loudly if reached.
This module must not define `torch.ops.sgl_kernel.convert_weight_packed`: SGLang reads that op as
"the AMX backend is available".
"""

from __future__ import annotations

from collections.abc import Callable

import torch


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
