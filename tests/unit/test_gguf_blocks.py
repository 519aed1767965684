"""The GGUF's own blocks (4-bit linear weights, the 8-bit token embedding): read as gguf-py reads
them, the 4-bit rows put back in the checkpoint's order, and kept beside the embedded model's
converted weights, which they give back to the last bf16 bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from safetensors.torch import load_file

from server.config import default_cache_dir
from server.models import gguf_blocks
from server.models.embedded import ensure_converted
from server.models.gguf_blocks import eight_bit_blocks, from_blocks, unpermuted_rows


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_blocks_read_as_gguf_reads_them(kind: str) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((48, 128)).astype(np.float32) * 0.05
    blocks = quantize(weight, GGMLQuantizationType[kind])  # [rows, blocks * bytes] uint8
    groups = from_blocks(blocks, kind)
    assert groups.values.shape == (48, 128) and int(groups.values.max()) <= 15
    expected = torch.from_numpy(dequantize(blocks, GGMLQuantizationType[kind]))
    assert torch.equal(groups.dequantized(), expected)


def test_eight_bit_blocks_read_as_gguf_reads_them() -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((40, 96)).astype(np.float32)
    blocks = quantize(weight, GGMLQuantizationType.Q8_0)
    eight = eight_bit_blocks(blocks)
    assert eight.values.dtype == torch.int8 and eight.values.shape == (40, 96)
    assert eight.scales.shape == (40, 3)
    expected = torch.from_numpy(dequantize(blocks, GGMLQuantizationType.Q8_0))
    assert torch.equal(eight.dequantized(), expected)


def llama_cpp_permute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's conversion of a Llama q or k weight (convert_hf_to_gguf.py, `permute`)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


@pytest.mark.parametrize(("rows", "heads"), [(576, 9), (192, 3), (64, 1)])
def test_rows_are_put_back_in_the_checkpoints_order(rows: int, heads: int) -> None:
    weight = torch.randn(rows, 8)
    assert torch.equal(llama_cpp_permute(weight, heads)[unpermuted_rows(rows, heads)], weight)


def test_the_embedded_models_blocks_give_its_converted_weights_back() -> None:
    """Every 4-bit linear weight of the GGUF (7 a layer, 30 layers) and its 8-bit token
    embedding (the tied LM head), by name in the folder, equal to the converted bf16 weight to the
    last bit."""
    folder = ensure_converted(default_cache_dir())
    blocks = gguf_blocks.read(folder)
    weights = load_file(str(folder / "model.safetensors"))
    assert len(blocks.four_bit) == 7 * 30
    assert list(blocks.eight_bit) == ["model.embed_tokens.weight"]
    kept_weights = [*blocks.four_bit.items(), *blocks.eight_bit.items()]
    for name, kept in kept_weights:
        assert torch.equal(kept.dequantized().to(torch.bfloat16), weights[name]), name
