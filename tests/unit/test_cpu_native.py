"""The C kernels of `cpu/native.py`, compiled here as the node compiles them: a decode step's
attention over SGLang's paged cache gives SGLang's own decode (bf16 and fp32 caches, grouped
heads, slots in order, scattered or interleaved, contexts of one chunk or many, the vector path
and the plain one); the 8-bit product gives the blocks' exact product; the library shares torch's
OpenMP runtime; and a machine without a compiler is told why."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from server.engines.sglang import cpu_compat
from server.engines.sglang.cpu import build, native
from server.engines.sglang.cpu.attention import PLAN, ForwardPlan, Paged, decode_attention
from server.models.gguf_blocks import EightBit, Groups
from server.torch_compat import ensure_torchvision_loadable
from tests.unit.block_reference import block_product


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> native.Kernels:
    return native.Kernels.load(build.build(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def sglang_decode() -> Any:
    ensure_torchvision_loadable()
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend._run_sdpa_forward_decode


def slot_table(slots: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SGLang's req_to_token (with a spare row first, so rows are not 0..n), the requests' rows
    and their lengths."""
    table = torch.zeros(len(slots) + 1, 4096, dtype=torch.int32)
    for index, row in enumerate(slots):
        table[index + 1, : len(row)] = torch.tensor(row, dtype=torch.int32)
    rows = torch.arange(1, len(slots) + 1)
    return table, rows, torch.tensor([len(row) for row in slots])


SLOTS = {
    "one-token": [[5]],
    "in-order": [list(range(10, 60))],
    "scattered": [torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:700].tolist()],
    "chunks-and-a-partial-block": [list(range(100, 100 + 3 * 256 + 17))],
    "requests-side-by-side": [
        [*range(1000, 1300), *range(1500, 1560, 2)],
        [*range(2000, 2010), *range(1501, 1561, 2)],
        [7],
    ],
}


@pytest.mark.parametrize("layout", list(SLOTS))
@pytest.mark.parametrize(
    ("dtype", "heads", "kv_heads", "dim"),
    [(torch.bfloat16, 9, 3, 64), (torch.bfloat16, 4, 4, 16), (torch.bfloat16, 8, 1, 128),
     (torch.float32, 9, 3, 64), (torch.float32, 6, 2, 16)],
    ids=["bf16-grouped-vector", "bf16-plain", "bf16-one-key-head", "fp32-grouped", "fp32-plain"],
)  # fmt: skip
def test_decode_attention_is_sglangs_decode(
    kernels: native.Kernels, sglang_decode: Any, layout: str, dtype: torch.dtype, heads: int,
    kv_heads: int, dim: int,
) -> None:  # fmt: skip
    torch.manual_seed(2)
    table, rows, lengths = slot_table(SLOTS[layout])
    k_cache = torch.randn(3200, kv_heads, dim).to(dtype)
    v_cache = torch.randn(3200, kv_heads, dim).to(dtype)
    # the lean step's query: a view of the rotated q and k, its rows further apart than its heads
    qk = torch.randn(len(rows), heads + kv_heads, dim).to(dtype)
    query = qk[:, :heads]
    scale = dim**-0.5
    ours = kernels.decode_attention(query, k_cache, v_cache, table, rows, lengths, scale)
    expected = sglang_decode(
        None, query, torch.zeros_like(query), k_cache, v_cache, table, rows, lengths,
        scaling=scale, enable_gqa=True,
    )  # fmt: skip
    assert ours is not None and ours.dtype == dtype
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(ours, expected, rtol=tolerance, atol=tolerance)


def test_what_the_kernel_does_not_take_is_refused(kernels: native.Kernels) -> None:
    table, rows, lengths = slot_table([[1, 2, 3]])
    cache = torch.randn(8, 2, 16)
    half, cache16 = torch.randn(1, 4, 16).half(), cache.half()
    assert kernels.decode_attention(half, cache16, cache16, table, rows, lengths, 1.0) is None
    mixed = torch.randn(1, 4, 16).bfloat16()
    assert kernels.decode_attention(mixed, cache, cache, table, rows, lengths, 1.0) is None
    too_many = torch.randn(1, 17 * 2, 16)  # 17 heads a key head: past the kernel's bound
    assert kernels.decode_attention(too_many, cache, cache, table, rows, lengths, 1.0) is None


def test_a_paged_plan_decodes_through_the_kernel_and_falls_back(
    kernels: native.Kernels, sglang_decode: Any
) -> None:
    """The backend's plan for a decode step read by the kernel (`Paged`); a query the kernel
    does not take (fp16) is read with torch's kernels, as planned for them."""
    torch.manual_seed(4)
    table, rows, lengths = slot_table(SLOTS["requests-side-by-side"])
    for dtype in (torch.bfloat16, torch.float16):
        k_cache, v_cache = torch.randn(3200, 2, 32).to(dtype), torch.randn(3200, 2, 32).to(dtype)
        query = torch.randn(len(rows), 6, 32).to(dtype)
        owner = SimpleNamespace(
            **{PLAN: ForwardPlan(lengths, (), paged=Paged(kernels, table, rows, lengths))}
        )
        ours = decode_attention(owner, query, k_cache, v_cache, lengths, 32**-0.5)
        expected = sglang_decode(
            None, query, torch.zeros_like(query), k_cache, v_cache, table, rows, lengths,
            scaling=32**-0.5, enable_gqa=True,
        )  # fmt: skip
        assert ours is not None and ours.dtype == dtype
        torch.testing.assert_close(ours, expected, rtol=2e-2, atol=2e-2)


def eight_bit(outputs: int, columns: int) -> EightBit:
    return EightBit(
        torch.randint(-127, 128, (outputs, columns), dtype=torch.int8),
        torch.rand(outputs, columns // 32) / 100,
    )


def four_bit(outputs: int, columns: int) -> Groups:
    return Groups(
        torch.randint(0, 16, (outputs, columns), dtype=torch.uint8),
        torch.rand(outputs, columns // 32) / 100,
        -torch.rand(outputs, columns // 32) / 10,
    )


@pytest.mark.parametrize("rows", [1, 3, 4, 9, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("columns", [64, 320, 576])  # 2, 10 and 18 blocks: whole eights and not
def test_block_products_are_the_blocks_products(
    kernels: native.Kernels, rows: int, dtype: torch.dtype, columns: int
) -> None:
    """Against the reference in fp64: within fp32 summation (and, for bf16, the output's one
    rounding); and so is the weight's exact product, within the rows' 16-bit steps."""
    torch.manual_seed(5)
    x = torch.randn(rows, columns).to(dtype)
    eight, four = eight_bit(70, columns), four_bit(70, columns)  # 70 outputs: not whole tiles
    pairs = native.FourBitPairs.of(four)
    assert pairs is not None
    cases = [
        (kernels.eight_bit_product(x, eight), block_product(x, eight.values, eight.scales, None),
         eight.dequantized()),
        (kernels.four_bit_product(x, pairs),
         block_product(x, four.values, four.scales, four.lows), four.dequantized()),
    ]  # fmt: skip
    tolerance = 8e-3 if dtype == torch.bfloat16 else 1e-5
    for ours, reference, weight in cases:
        assert ours is not None and ours.dtype == dtype and ours.shape == (rows, 70)
        scale = reference.abs().max()
        torch.testing.assert_close(ours.double() / scale, reference / scale, rtol=0, atol=tolerance)
        exact = x.double() @ weight.double().t()
        steps = 1e-4 if dtype == torch.float32 else tolerance  # the rows' 16-bit steps
        torch.testing.assert_close(ours.double() / scale, exact / scale, rtol=0, atol=steps)


def test_a_rows_product_is_the_same_whatever_rows_are_beside_it(kernels: native.Kernels) -> None:
    torch.manual_seed(7)
    x = torch.randn(16, 576).bfloat16()
    eight, pairs = eight_bit(96, 576), native.FourBitPairs.of(four_bit(96, 576))
    assert pairs is not None
    for product in (
        lambda rows: kernels.eight_bit_product(rows, eight),
        lambda rows: kernels.four_bit_product(rows, pairs),
    ):
        together = product(x)
        assert together is not None
        for index in (0, 5, 15):
            alone = product(x[index : index + 1])
            assert alone is not None and torch.equal(alone[0], together[index])


def test_block_products_refuse_what_they_do_not_take(kernels: native.Kernels) -> None:
    weight = EightBit(torch.zeros(8, 64, dtype=torch.int8), torch.ones(8, 2))
    assert kernels.eight_bit_product(torch.randn(17, 64), weight) is None  # past MAX_ROWS
    assert kernels.eight_bit_product(torch.randn(2, 32), weight) is None  # another width
    assert kernels.eight_bit_product(torch.randn(2, 64).half(), weight) is None
    assert native.FourBitPairs.of(four_bit(8, 96)) is None  # 3 blocks: not whole pairs
    # a weight's form is checked where it is made, not on every product
    with pytest.raises(ValueError, match="8-bit"):
        EightBit(torch.zeros(64, 8, dtype=torch.int8).t(), torch.ones(8, 2))  # not contiguous
    with pytest.raises(ValueError, match="8-bit"):
        EightBit(torch.zeros(8, 64, dtype=torch.int8), torch.ones(8, 2).double())
    pairs = native.FourBitPairs.of(four_bit(8, 64))
    assert pairs is not None
    with pytest.raises(ValueError, match="4-bit"):
        native.FourBitPairs(pairs.pairs[:, :16], pairs.scales, pairs.lows)


def test_the_library_runs_on_torchs_openmp_runtime(kernels: native.Kernels) -> None:
    """One libgomp in the process: the kernels' threads are torch's, not a second pool
    competing for the same cores."""
    del kernels
    loaded = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()}
    assert len([path for path in loaded if "libgomp" in path]) == 1, loaded


def test_loading_the_library_leaves_subnormal_floats_as_they_are(kernels: native.Kernels) -> None:
    """The kernels' fast math stays in their own loops: the process that loads them (SGLang's
    scheduler, with torch and Python) keeps IEEE subnormals rather than flushing them to zero."""
    del kernels
    smallest = 2.2250738585072014e-308  # the least normal double
    assert smallest / 4 != 0.0
    assert torch.tensor([1e-40], dtype=torch.float32).mul(1.0).item() != 0.0


def test_a_second_build_loads_the_first_ones_library(tmp_path: Path) -> None:
    first = build.build(tmp_path)
    made = first.stat().st_mtime_ns
    assert build.build(tmp_path) == first and first.stat().st_mtime_ns == made
    assert [path.name for path in (tmp_path / "kernels").iterdir()] == [first.name]


def test_a_cache_it_cannot_write_compiles_where_the_user_can(tmp_path: Path) -> None:
    """(A file where the cache folder should be: no user, root included, makes a folder in it.)"""
    cache = tmp_path / "cache"
    cache.write_text("")
    built = build.build(cache)
    assert built.is_file() and cache not in built.parents
    assert native.Kernels.load(built).library is not None


def test_without_a_compiler_the_node_says_why_and_attends_with_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv(build.KERNELS_ENV, "/stale/library.so")
    with pytest.raises(build.BuildError, match="no-such-cc"):
        build.build(tmp_path)
    cpu_compat.compile_kernels(tmp_path)
    assert build.KERNELS_ENV not in os.environ
    assert "CPU kernels not compiled" in caplog.text and "no-such-cc" in caplog.text
    assert native.loaded() is None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_layer_steps_are_the_torch_ops_they_stand_for(
    kernels: native.Kernels, dtype: torch.dtype
) -> None:
    """cpu/decode.py's elementwise steps, against its torch path: in bf16 each op rounds as
    torch's does (the rotation and the stores to the bit), in fp32 within its rounding."""
    import torch.nn.functional as F

    from server.engines.sglang.cpu.decode import Norm, _angles, rotated

    torch.manual_seed(9)
    exact = dtype == torch.bfloat16
    close = {"rtol": 1e-2, "atol": 1e-5} if exact else {"rtol": 1e-5, "atol": 1e-5}
    residual, hidden = torch.randn(3, 576).to(dtype) * 3, torch.randn(3, 576).to(dtype)
    weight = torch.randn(576).to(dtype)
    summed = residual.clone()
    out = kernels.add_rms_norm(summed, hidden, weight, 1e-5)
    assert torch.equal(summed, hidden + residual)  # in place, each sum rounded
    torch.testing.assert_close(out, Norm.of(weight, 1e-5)(hidden + residual), **close)
    alone = residual.clone()
    torch.testing.assert_close(
        kernels.add_rms_norm(alone, None, weight, 1e-5), Norm.of(weight, 1e-5)(residual), **close
    )
    assert torch.equal(alone, residual)

    heads, kv_heads, dim = 9, 3, 64
    angles = torch.randn(400, dim).to(dtype)
    positions, loc = torch.tensor([0, 7, 399]), torch.tensor([4, 9, 33])
    qkv = torch.randn(3, (heads + 2 * kv_heads) * dim).to(dtype)
    k_cache = torch.zeros(40, kv_heads, dim, dtype=dtype)
    v_cache = torch.zeros(40, kv_heads, dim, dtype=dtype)
    q = kernels.rotate_store(qkv, heads, kv_heads, angles, positions, k_cache, v_cache, loc)
    cos, sin = _angles(angles, positions, dtype)
    qk = rotated(qkv[:, : (heads + kv_heads) * dim].view(3, heads + kv_heads, dim), cos, sin)
    values = qkv[:, (heads + kv_heads) * dim :].view(3, kv_heads, dim)
    assert torch.equal(v_cache[loc], values)
    assert int(k_cache.count_nonzero()) == int(k_cache[loc].count_nonzero())  # no other slot
    if exact:
        assert torch.equal(q, qk[:, :heads]) and torch.equal(k_cache[loc], qk[:, heads:])
    torch.testing.assert_close(q, qk[:, :heads], **close)
    torch.testing.assert_close(k_cache[loc], qk[:, heads:], **close)

    gate_up = torch.randn(3, 3072).to(dtype) * 4
    expected = F.silu(gate_up[:, :1536]) * gate_up[:, 1536:]
    torch.testing.assert_close(kernels.silu_mul(gate_up), expected, **close)
