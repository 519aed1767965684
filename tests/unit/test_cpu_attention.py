"""The faster plain-torch prefill gives the attention SGLang's own does, prefix cached or not."""

from __future__ import annotations

import pytest
import torch

from server.engines.sglang.cpu_attention import new_tokens_only
from server.torch_compat import ensure_torchvision_loadable


@pytest.fixture(scope="module")
def sglang_extend():  # type: ignore[no-untyped-def]
    ensure_torchvision_loadable()
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend._run_sdpa_forward_extend


@pytest.mark.parametrize("prefixes", [(0, 0), (5, 0), (7, 12), (0, 9), (40, 2), (2, 40)])
@pytest.mark.parametrize("gqa", [False, True])
def test_same_output_as_sglangs_extend(sglang_extend, prefixes: tuple[int, int], gqa: bool) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    heads, kv_heads, dim = 6, 2 if gqa else 6, 16
    news = (4, 3)
    lengths = [p + n for p, n in zip(prefixes, news, strict=True)]
    pool = 128
    k_cache = torch.randn(pool, kv_heads, dim)
    v_cache = torch.randn(pool, kv_heads, dim)
    req_to_token = torch.zeros(2, 64, dtype=torch.long)
    slots = torch.randperm(pool)
    req_to_token[0, : lengths[0]] = slots[: lengths[0]]
    req_to_token[1, : lengths[1]] = slots[lengths[0] : lengths[0] + lengths[1]]
    query = torch.randn(sum(news), heads, dim)
    args = (
        k_cache, v_cache, req_to_token, torch.tensor([0, 1]), torch.tensor(lengths),
        torch.tensor(prefixes), torch.tensor(news),
    )  # fmt: skip
    kwargs = {"scaling": dim**-0.5, "enable_gqa": gqa, "causal": True}
    expected = sglang_extend(None, query, torch.zeros_like(query), *args, **kwargs)
    faster = new_tokens_only(sglang_extend)(None, query, torch.zeros_like(query), *args, **kwargs)
    torch.testing.assert_close(faster, expected, rtol=1e-5, atol=1e-5)
