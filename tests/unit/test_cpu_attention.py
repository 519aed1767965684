"""The plain-torch attention of `cpu/attention.py` gives the attention SGLang's own does: prefill
with a prefix cached or not, a mixed batch's decode rows, and decode of one request or several
of different lengths; keys read in place or gathered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from server.engines.sglang.cpu.attention import (
    PLAN,
    decode_attention,
    forward_plan,
    keys_of,
    planned_decode,
    planned_extend,
)
from server.torch_compat import ensure_torchvision_loadable

POOL = 256


@pytest.fixture(scope="module")
def backend() -> Any:
    ensure_torchvision_loadable()
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend


def cache(
    lengths: list[int], kv_heads: int, dim: int, dtype: torch.dtype, in_order: bool
) -> tuple[Any, ...]:
    """A KV cache holding each request's tokens, in consecutive slots or scattered, and
    SGLang's slot table."""
    k_cache = torch.randn(POOL, kv_heads, dim).to(dtype)
    v_cache = torch.randn(POOL, kv_heads, dim).to(dtype)
    req_to_token = torch.zeros(len(lengths), POOL, dtype=torch.int32)
    slots = torch.arange(1, POOL) if in_order else torch.randperm(POOL - 1) + 1
    start = 0
    for index, length in enumerate(lengths):
        req_to_token[index, :length] = slots[start : start + length]
        start += length
    return k_cache, v_cache, req_to_token, torch.arange(len(lengths))


def planned(req_to_token: Any, pool_indices: Any, seq_lens: Any, decode: bool) -> Any:
    return SimpleNamespace(
        **{PLAN: forward_plan(req_to_token, pool_indices, seq_lens, None, decode)}
    )


@pytest.mark.parametrize(
    ("prefixes", "news"),
    [((0, 0), (4, 3)), ((5, 0), (4, 3)), ((7, 12), (4, 3)), ((40, 2), (4, 3)),
     ((2, 40), (4, 3)), ((30, 9), (1, 6)), ((0, 50), (20, 1))],
)  # fmt: skip
@pytest.mark.parametrize("heads", [(6, 2), (6, 6)])
@pytest.mark.parametrize("in_order", [True, False])
def test_prefill_is_sglangs_prefill(
    backend: Any,
    prefixes: tuple[int, int],
    news: tuple[int, int],
    heads: tuple[int, int],
    in_order: bool,
) -> None:
    torch.manual_seed(0)
    dim = 16
    lengths = [p + n for p, n in zip(prefixes, news, strict=True)]
    k_cache, v_cache, req_to_token, pool = cache(lengths, heads[1], dim, torch.bfloat16, in_order)
    query = torch.randn(sum(news), heads[0], dim)
    seq_lens = torch.tensor(lengths)
    args = (
        k_cache,
        v_cache,
        req_to_token,
        pool,
        seq_lens,
        torch.tensor(prefixes),
        torch.tensor(news),
    )
    kwargs = {"scaling": dim**-0.5, "enable_gqa": heads[0] != heads[1], "causal": True}
    sglang = backend._run_sdpa_forward_extend
    expected = sglang(None, query, torch.zeros_like(query), *args, **kwargs)
    owner = planned(req_to_token, pool, seq_lens, decode=False)
    ours = planned_extend(sglang)(owner, query, torch.zeros_like(query), *args, **kwargs)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


# Several requests: gathered into one product while short, attended one by one when longer.
@pytest.mark.parametrize("lengths", [[9], [70], [1, 30, 17], [12, 12], [140, 100], [200, 3]])
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("in_order", [True, False])
def test_decode_is_sglangs_decode(
    backend: Any, lengths: list[int], cache_dtype: torch.dtype, in_order: bool
) -> None:
    torch.manual_seed(1)
    heads, kv_heads, dim = 6, 2, 16
    k_cache, v_cache, req_to_token, pool = cache(lengths, kv_heads, dim, cache_dtype, in_order)
    query = torch.randn(len(lengths), heads, dim)
    assert_decode_is_sglangs(backend, query, k_cache, v_cache, req_to_token, pool, lengths)


def assert_decode_is_sglangs(
    backend: Any, query: Any, k_cache: Any, v_cache: Any, req_to_token: Any, pool: Any,
    lengths: list[int],
) -> None:  # fmt: skip
    seq_lens = torch.tensor(lengths)
    args = (k_cache, v_cache, req_to_token, pool, seq_lens)
    kwargs = {"scaling": query.shape[-1] ** -0.5, "enable_gqa": True}
    sglang = backend._run_sdpa_forward_decode
    expected = sglang(None, query, torch.zeros_like(query), *args, **kwargs)
    owner = planned(req_to_token, pool, seq_lens, decode=True)
    ours = planned_decode(sglang)(owner, query, torch.zeros_like(query), *args, **kwargs)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


def test_keys_in_order_are_read_in_place() -> None:
    k_cache = torch.randn(POOL, 2, 4)
    in_order = keys_of(torch.arange(10, 20, dtype=torch.int32))
    assert in_order.slots is None
    assert in_order.read(k_cache).data_ptr() == k_cache[10].data_ptr()
    scattered = keys_of(torch.tensor([10, 11, 13], dtype=torch.int32))
    assert scattered.slots is not None
    assert torch.equal(scattered.read(k_cache), k_cache[[10, 11, 13]])
    assert scattered.runs == ()  # runs too short to be worth a kernel call each: gathered
    long_runs = keys_of(torch.cat([torch.arange(600, 900), torch.arange(10, 300)]).int())
    assert long_runs.slots is not None and long_runs.runs == ((600, 300), (10, 290))
    assert long_runs.rest is None
    # A cached prefix, then tokens decoded beside three other streams (every fourth slot).
    interleaved = keys_of(torch.cat([torch.arange(600, 1000), torch.arange(2000, 2100, 4)]).int())
    assert interleaved.runs == ((600, 400),)
    assert interleaved.rest is not None and interleaved.rest.tolist() == list(range(2000, 2100, 4))


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
def test_a_decode_over_runs_of_slots_is_sglangs_decode(
    backend: Any, cache_dtype: torch.dtype
) -> None:
    """One request whose keys lie in three runs of consecutive slots (a cached prefix, then its
    own tokens, interleaved with another stream's): read run by run, in place."""
    torch.manual_seed(2)
    heads, kv_heads, dim = 6, 2, 16
    slots = [*range(1000, 1400), *range(10, 300), *range(2000, 2300)]
    k_cache = torch.randn(2400, kv_heads, dim).to(cache_dtype)
    v_cache = torch.randn(2400, kv_heads, dim).to(cache_dtype)
    req_to_token = torch.zeros(1, 1024, dtype=torch.int32)
    req_to_token[0, : len(slots)] = torch.tensor(slots)
    assert keys_of(req_to_token[0, : len(slots)]).runs == ((1000, 400), (10, 290), (2000, 300))
    query = torch.randn(1, heads, dim)
    pool = torch.arange(1)
    assert_decode_is_sglangs(backend, query, k_cache, v_cache, req_to_token, pool, [len(slots)])


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
def test_a_decode_over_a_run_and_scattered_slots_is_sglangs_decode(
    backend: Any, cache_dtype: torch.dtype
) -> None:
    """A cached prefix in one run, then the request's own tokens in every fourth slot (decoded
    beside three other streams): the run read in place, the rest gathered."""
    torch.manual_seed(5)
    heads, kv_heads, dim = 6, 2, 16
    slots = [*range(1000, 1500), *range(10, 90, 4), 3, 7]
    k_cache = torch.randn(2400, kv_heads, dim).to(cache_dtype)
    v_cache = torch.randn(2400, kv_heads, dim).to(cache_dtype)
    req_to_token = torch.zeros(1, 1024, dtype=torch.int32)
    req_to_token[0, : len(slots)] = torch.tensor(slots)
    assert keys_of(req_to_token[0, : len(slots)]).runs == ((1000, 500),)
    query = torch.randn(1, heads, dim)
    pool = torch.arange(1)
    assert_decode_is_sglangs(backend, query, k_cache, v_cache, req_to_token, pool, [len(slots)])


def test_a_layer_given_another_forward_is_left_to_sglang(backend: Any) -> None:
    lengths = [5, 8]
    k_cache, v_cache, req_to_token, pool = cache(lengths, 2, 16, torch.float32, True)
    seq_lens = torch.tensor(lengths)
    calls = []

    def original(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(args)
        return torch.zeros(1)

    stale = planned(req_to_token, pool, seq_lens.clone(), decode=True)
    query = torch.randn(2, 6, 16)
    planned_decode(original)(
        stale, query, torch.zeros_like(query), k_cache, v_cache, req_to_token, pool,
        seq_lens, scaling=0.25, enable_gqa=True,
    )  # fmt: skip
    assert len(calls) == 1


@pytest.mark.parametrize(
    "slots",
    [[list(range(40, 120))], [[5, 9, 30, 31, 32, 70]],
     [[*range(1000, 1400), *range(10, 300), *range(2000, 2300)]], [[3, 4, 5], list(range(60, 90))],
     [list(range(1000, 1300)), [*range(10, 200), 7, 8]],
     [[*range(1000, 1300), *range(1500, 1560, 2)], [*range(1000, 1300), *range(1501, 1561, 2)]]],
    ids=["in-order", "scattered", "runs", "two-short-requests", "two-long-requests",
         "two-decoding-beside-each-other"],
)  # fmt: skip
def test_the_lean_decode_steps_attention_is_sglangs_in_the_querys_dtype(
    backend: Any, slots: list[list[int]]
) -> None:
    """`decode_attention`, which server/engines/sglang/cpu/decode.py calls with no output buffer
    to cast into: SGLang's decode, in the bf16 of the query and cache, however the keys lie."""
    torch.manual_seed(3)
    heads, kv_heads, dim = 6, 2, 16
    k_cache = torch.randn(2400, kv_heads, dim).to(torch.bfloat16)
    v_cache = torch.randn(2400, kv_heads, dim).to(torch.bfloat16)
    req_to_token = torch.zeros(len(slots), 1024, dtype=torch.int32)
    for index, row in enumerate(slots):
        req_to_token[index, : len(row)] = torch.tensor(row)
    pool, seq_lens = torch.arange(len(slots)), torch.tensor([len(row) for row in slots])
    query = torch.randn(len(slots), heads, dim).to(torch.bfloat16)
    owner = planned(req_to_token, pool, seq_lens, decode=True)
    ours = decode_attention(owner, query, k_cache, v_cache, seq_lens, dim**-0.5)
    expected = backend._run_sdpa_forward_decode(
        None, query, torch.zeros_like(query), k_cache, v_cache, req_to_token, pool, seq_lens,
        scaling=dim**-0.5, enable_gqa=True,
    )  # fmt: skip
    assert ours is not None and ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours, expected, rtol=2e-2, atol=2e-2)
    other_forward = torch.tensor([len(row) for row in slots])  # not the plan's own tensor
    assert decode_attention(owner, query, k_cache, v_cache, other_forward, dim**-0.5) is None
