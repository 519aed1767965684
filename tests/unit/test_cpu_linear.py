"""A few rows are multiplied by the checkpoint's own 4-bit groups where its folder keeps them (a
GGUF Q4 checkpoint's) and they give the weight back, in a model computed in fp32 or in bf16; in
fp32, one row by a bf16 copy of the weight otherwise, more rows by oneDNN's packed weight; the LM
head's few rows by its 8-bit blocks in the compiled kernel; each gives the layer's own product."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from server.engines.sglang.cpu import build, native
from server.engines.sglang.cpu.linear import (
    BF16,
    BF16_PACKED,
    EIGHT_BIT,
    INT4,
    PACKED,
    checkpoint_parts,
    faster_linear,
    faster_lm_head,
    take_eight_bit,
    take_groups,
)
from server.engines.sglang.cpu_compat import cpu_computes_bf16
from server.models.gguf_blocks import EightBit, Groups


class Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)


def original(self: Any, layer: torch.nn.Module, x: torch.Tensor, bias: Any = None) -> Any:
    return torch.nn.functional.linear(x, layer.weight, bias)


def bf16_checkpoint(rows: int, columns: int) -> Linear:
    """A checkpoint's bf16 values, held in fp32 as the node computes them."""
    return Linear(torch.randn(rows, columns).to(torch.bfloat16).to(torch.float32))


def four_bit_checkpoint(rows: int, columns: int) -> tuple[Linear, Groups]:
    """A GGUF Q4_1 checkpoint's groups (each group of 32: q * scale + min, q in 0..15, the scale
    and minimum f16), and the layer as the conversion leaves it: bf16, held in fp32."""
    values = torch.randint(0, 16, (rows, columns)).to(torch.uint8)
    scales = (torch.rand(rows, columns // 32) * 0.01 + 1e-3).half().float()
    lows = (torch.randn(rows, columns // 32) * 0.05).half().float()
    groups = Groups(values, scales, lows)
    return Linear(groups.dequantized().to(torch.bfloat16).to(torch.float32)), groups


def four_bit_product(layer: Linear, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x times the layer's 4-bit groups in torch's int4 kernel, in x's dtype, plus bias."""
    form = layer.__dict__[INT4]
    packed_groups, scales_zeros = form.packed, form.scales_zeros
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    product = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, packed_groups, 32, scales_zeros)
    return product.to(x.dtype).view(*x.shape[:-1], -1) + bias


@pytest.mark.parametrize("shape", [(1, 64), (4, 64), (2, 3, 64)])
def test_a_few_rows_read_a_four_bit_checkpoints_own_groups(shape: tuple[int, ...]) -> None:
    torch.manual_seed(2)
    (layer, groups), x, bias = four_bit_checkpoint(48, 64), torch.randn(shape), torch.randn(48)
    assert take_groups(layer, groups)
    out = faster_linear(original)(None, layer, x, bias)
    assert out.shape == (*shape[:-1], 48) and out.dtype == torch.float32
    assert torch.equal(out, four_bit_product(layer, x, bias))
    # within bf16 rounding of the activations, scales and zeros
    torch.testing.assert_close(out, original(None, layer, x, bias), rtol=2e-2, atol=5e-2)


def test_a_layer_without_groups_keeps_every_value() -> None:
    torch.manual_seed(3)
    layer = bf16_checkpoint(48, 64)
    faster_linear(original)(None, layer, torch.randn(1, 64))
    assert layer.__dict__.get(INT4) is None  # the bf16 copy served the row instead
    assert BF16 in layer.__dict__


def test_groups_that_do_not_give_the_weight_back_are_refused() -> None:
    """A folder whose weights are not its blocks' (one value off by a bf16 step): the layer keeps
    its own values."""
    torch.manual_seed(4)
    layer, groups = four_bit_checkpoint(48, 64)
    layer.weight.data[-1, -1] = layer.weight.data[-1, -1].bfloat16().float() * (1 + 2**-7)
    assert not take_groups(layer, groups)
    assert layer.__dict__[INT4] is None
    other, _ = four_bit_checkpoint(48, 64)
    assert not take_groups(Linear(other.weight[:32]), groups)  # another shape


def test_sglangs_stacked_layers_take_the_checkpoints_parts_in_order() -> None:
    assert checkpoint_parts("model.layers.3.self_attn.qkv_proj") == (
        "model.layers.3.self_attn.q_proj",
        "model.layers.3.self_attn.k_proj",
        "model.layers.3.self_attn.v_proj",
    )
    assert checkpoint_parts("model.layers.0.mlp.gate_up_proj") == (
        "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.up_proj",
    )
    assert checkpoint_parts("model.layers.0.mlp.down_proj") == ("model.layers.0.mlp.down_proj",)
    first, second = four_bit_checkpoint(16, 64)[1], four_bit_checkpoint(32, 64)[1]
    stacked = Groups.stacked([first, second])
    assert torch.equal(
        stacked.dequantized(), torch.cat([first.dequantized(), second.dequantized()])
    )


def test_one_row_reads_the_bf16_copy() -> None:
    """In oneDNN's layout where the CPU multiplies bf16 natively, as it is elsewhere."""
    torch.manual_seed(0)
    layer, x, bias = bf16_checkpoint(64, 32), torch.randn(1, 32), torch.randn(64)
    out = faster_linear(original)(None, layer, x, bias)
    assert out.dtype == torch.float32
    assert torch.equal(layer.__dict__[BF16], layer.weight.to(torch.bfloat16))  # lossless copy
    blocked = layer.__dict__[BF16_PACKED]
    assert (blocked is not None) == cpu_computes_bf16()
    row = x.to(torch.bfloat16)
    if blocked is None:
        expected = torch.nn.functional.linear(row, layer.__dict__[BF16])
    else:
        expected = torch.ops.mkldnn._linear_pointwise(row, blocked, None, "none", [], "")
    torch.testing.assert_close(out, expected.float() + bias)
    # within bf16 rounding of the activations (and, blocked, of the product)
    torch.testing.assert_close(out, original(None, layer, x, bias), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("shape", [(2, 32), (77, 32), (3, 5, 32)])
def test_more_rows_run_the_packed_weight(shape: tuple[int, ...]) -> None:
    torch.manual_seed(1)
    layer, x, bias = bf16_checkpoint(64, 32), torch.randn(shape), torch.randn(64)
    out = faster_linear(original)(None, layer, x, bias)
    assert PACKED in layer.__dict__
    torch.testing.assert_close(out, original(None, layer, x, bias), rtol=1e-5, atol=1e-5)


def test_a_bf16_model_keeps_its_own_products_but_for_a_few_rows() -> None:
    """A few rows run on the 4-bit groups where the weight is such groups, else on the weight in
    oneDNN's blocked layout where the CPU multiplies bf16 natively; more rows, the model's own."""
    torch.manual_seed(4)
    plain = Linear(torch.randn(64, 32, dtype=torch.bfloat16))
    checkpoint, groups = four_bit_checkpoint(48, 64)
    four_bit = Linear(checkpoint.weight.to(torch.bfloat16))
    assert take_groups(four_bit, groups)
    bias = torch.randn(48, dtype=torch.bfloat16)
    for rows in (1, 8, 9):
        x = torch.randn(rows, 32, dtype=torch.bfloat16)
        out, expected = faster_linear(original)(None, plain, x), original(None, plain, x)
        blocked = plain.__dict__.get(BF16_PACKED)
        if rows > 8 or blocked is None:
            assert torch.equal(out, expected)
        else:  # the same values summed in another order: within bf16's rounding of the product
            assert torch.equal(
                out, torch.ops.mkldnn._linear_pointwise(x, blocked, None, "none", [], "")
            )
            torch.testing.assert_close(out.float(), expected.float(), rtol=1e-2, atol=2e-2)
        x = torch.randn(rows, 64, dtype=torch.bfloat16)
        out = faster_linear(original)(None, four_bit, x, bias)
        expected = original(None, four_bit, x, bias)
        assert out.dtype == torch.bfloat16 and out.shape == expected.shape
        if rows > 8:
            assert torch.equal(out, expected)
        else:  # within bf16 rounding of the scales and zeros, and of the product itself
            assert torch.equal(out, four_bit_product(four_bit, x, bias))
            torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=5e-2)
    assert plain.__dict__.get(INT4) is None and four_bit.__dict__[INT4] is not None
    assert (plain.__dict__[BF16_PACKED] is not None) == cpu_computes_bf16()
    assert BF16_PACKED not in four_bit.__dict__  # its few rows read the 4-bit groups
    assert not {BF16, PACKED} & (plain.__dict__.keys() | four_bit.__dict__.keys())


class Head(Linear):
    quant_method = type("UnquantizedEmbeddingMethod", (), {})()


def test_the_lm_heads_few_rows_read_its_eight_bit_blocks(tmp_path: Path) -> None:
    """Taken only with the kernels and where the blocks give the head's weight back; up to the
    kernel's rows, the blocks' product; more rows, the head's own."""
    torch.manual_seed(6)
    kernels = native.Kernels.load(build.build(tmp_path))
    blocks = EightBit(torch.randint(-127, 128, (40, 64), dtype=torch.int8), torch.rand(40, 2) / 100)
    head = Head(blocks.dequantized().to(torch.bfloat16))
    assert not take_eight_bit(head, blocks, None)
    assert not take_eight_bit(Head(torch.randn(40, 64).bfloat16()), blocks, kernels)
    assert take_eight_bit(head, blocks, kernels) and head.__dict__[EIGHT_BIT] is not None

    def sglangs(self: Any, hidden: torch.Tensor, lm_head: Any, bias: Any = None) -> Any:
        return torch.matmul(hidden, lm_head.weight.t())

    for rows in (1, native.MAX_ROWS, native.MAX_ROWS + 1):
        hidden = torch.randn(rows, 64).bfloat16()
        out = faster_lm_head(sglangs)(None, hidden, head)
        assert out.dtype == torch.bfloat16 and out.shape == (rows, 40)
        if rows <= native.MAX_ROWS:  # the kernel's (its numerics: test_cpu_native.py)
            assert torch.equal(out, kernels.eight_bit_product(hidden, blocks))
        else:
            assert torch.equal(out, sglangs(None, hidden, head))
        # within bf16's rounding of the products, against the largest logit
        expected = sglangs(None, hidden, head).double()
        scale = expected.abs().max()
        torch.testing.assert_close(out.double() / scale, expected / scale, rtol=0, atol=8e-3)


def test_with_the_kernels_up_to_16_rows_read_the_four_bit_groups_there(tmp_path: Path) -> None:
    """Each row multiplied alone whatever rows are beside it; past 16 rows, the layer's own."""
    torch.manual_seed(8)
    kernels = native.Kernels.load(build.build(tmp_path))
    checkpoint, groups = four_bit_checkpoint(48, 64)
    layer = Linear(checkpoint.weight.to(torch.bfloat16))
    assert take_groups(layer, groups, kernels)
    pairs = native.FourBitPairs.of(groups)
    assert pairs is not None
    for rows in (1, 16, 17):
        x = torch.randn(rows, 64, dtype=torch.bfloat16)
        out = faster_linear(original)(None, layer, x)
        if rows <= 16:
            assert torch.equal(out, kernels.four_bit_product(x, pairs))
        else:
            assert torch.equal(out, original(None, layer, x))
