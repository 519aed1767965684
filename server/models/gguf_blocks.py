"""A GGUF's own quantized blocks, kept beside the converted bf16 weights so that a decode step
multiplies the checkpoint's values themselves, in fewer bytes than bf16, rather than values
re-derived from rounded ones: the linear layers' 4-bit blocks (Q4_0 and Q4_1: 32 values a block,
each a 4-bit integer times the block's scale plus its minimum) and the token embedding's 8-bit
blocks (Q8_0: each value a signed byte times the block's scale), which a tied LM head reads.
Written once at conversion (`write`), by the weight's name in the converted folder; read where
SGLang has loaded the model (`read`). Llama-architecture names (the embedded model's)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the node's settings read FILE without loading torch
    import numpy as np
    import torch

# A safetensors file not named *.safetensors: SGLang's loader reads every such file of the folder
# into the model, and would warn of each of these tensors as a parameter it lacks.
FILE = "gguf_blocks.st"
BLOCK = 32  # values per block, along a row
# GGUF's names of the weights kept in 8-bit blocks, and the checkpoint's.
EIGHT_BIT = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}
# GGUF's names of a Llama layer's linear weights, and the checkpoint's.
LLAMA_LINEAR = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


@dataclass(frozen=True, slots=True)
class Groups:
    """A weight [rows, columns] as 4-bit groups: value * scale + low, BLOCK values a group."""

    values: torch.Tensor  # uint8 [rows, columns], 0..15
    scales: torch.Tensor  # float32 [rows, columns // BLOCK]
    lows: torch.Tensor  # float32 [rows, columns // BLOCK]

    def dequantized(self) -> torch.Tensor:
        rows, columns = self.values.shape
        grouped = self.values.view(rows, columns // BLOCK, BLOCK).float()
        return (grouped * self.scales[..., None] + self.lows[..., None]).view(rows, columns)

    def rows(self, order: torch.Tensor) -> Groups:
        """These groups with their rows in `order`."""
        return Groups(self.values[order], self.scales[order], self.lows[order])

    @staticmethod
    def stacked(parts: list[Groups]) -> Groups:
        """Parts stacked along the rows, as SGLang fuses q, k, v (and gate, up) into one layer."""
        import torch

        return Groups(
            torch.cat([part.values for part in parts]),
            torch.cat([part.scales for part in parts]),
            torch.cat([part.lows for part in parts]),
        )


@dataclass(frozen=True, slots=True)
class EightBit:
    """A weight [rows, columns] as 8-bit blocks: value * scale, BLOCK values a block."""

    values: torch.Tensor  # int8 [rows, columns]
    scales: torch.Tensor  # float32 [rows, columns // BLOCK]

    def __post_init__(self) -> None:  # contiguous too: the CPU kernels read them in place
        import torch

        rows, blocks = self.scales.shape
        if not (
            self.values.dtype == torch.int8
            and self.values.shape == (rows, blocks * BLOCK)
            and self.scales.dtype == torch.float32
            and self.values.is_contiguous()
            and self.scales.is_contiguous()
        ):
            raise ValueError("8-bit blocks: int8 values [rows, columns], fp32 scales, contiguous")

    def dequantized(self) -> torch.Tensor:
        rows, columns = self.values.shape
        grouped = self.values.view(rows, columns // BLOCK, BLOCK).float()
        return (grouped * self.scales[..., None]).view(rows, columns)


@dataclass(frozen=True, slots=True)
class Blocks:
    """What `write` kept, by weight name."""

    four_bit: dict[str, Groups]
    eight_bit: dict[str, EightBit]


def eight_bit_blocks(blocks: np.ndarray) -> EightBit:
    """A GGUF Q8_0 tensor's raw blocks ([rows, blocks * 34] uint8): each block its f16 scale,
    then 32 signed bytes."""
    import numpy as np
    import torch

    rows = blocks.shape[0]
    per_row = blocks.reshape(rows, -1, 2 + BLOCK)
    scales = per_row[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    values = per_row[..., 2:].copy().view(np.int8).reshape(rows, -1)
    return EightBit(torch.from_numpy(values), torch.from_numpy(scales))


def from_blocks(blocks: np.ndarray, kind: str) -> Groups:
    """A GGUF tensor's raw blocks ([rows, blocks * bytes] uint8) of `kind` Q4_0 or Q4_1: each
    block its f16 scale (Q4_1: then its f16 minimum; Q4_0: the minimum is -8 scales), then 16
    bytes whose low nibbles are the block's first 16 values and high nibbles its last 16."""
    import numpy as np
    import torch

    header = {"Q4_0": 2, "Q4_1": 4}[kind]
    rows = blocks.shape[0]
    per_row = blocks.reshape(rows, -1, header + BLOCK // 2)
    scales = torch.from_numpy(per_row[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32))
    if kind == "Q4_1":
        lows = torch.from_numpy(
            per_row[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        )
    else:
        lows = -8 * scales
    packed = torch.from_numpy(per_row[..., header:].copy())
    values = torch.cat([packed & 0x0F, packed >> 4], dim=-1).reshape(rows, -1)
    return Groups(values, scales, lows)


def unpermuted_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order that undoes llama.cpp's conversion of a Llama q or k weight, which
    interleaves the two rotary halves of each head (as transformers' GGUF loader undoes it)."""
    import torch

    return torch.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(1, 2).reshape(-1)


def write(gguf: Path, folder: Path, heads: int, kv_heads: int) -> int:
    """The GGUF's Q4_0/Q4_1 Llama linear weights (the nibbles two to a byte) and its Q8_0 token
    embedding and output weights into `folder`/FILE, by their names there; how many there
    were."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for tensor in GGUFReader(gguf).tensors:
        kind = tensor.tensor_type.name
        if kind == "Q8_0" and tensor.name in EIGHT_BIT:
            eight = eight_bit_blocks(np.asarray(tensor.data))
            tensors[f"{EIGHT_BIT[tensor.name]}.bytes"] = eight.values
            tensors[f"{EIGHT_BIT[tensor.name]}.scales"] = eight.scales.to(torch.float16)
            continue
        found = _LAYER.fullmatch(tensor.name)
        if kind not in ("Q4_0", "Q4_1") or found is None or found[2] not in LLAMA_LINEAR:
            continue
        groups = from_blocks(np.asarray(tensor.data), kind)
        if found[2] in ("attn_q", "attn_k"):
            groups = groups.rows(
                unpermuted_rows(groups.values.shape[0], heads if found[2] == "attn_q" else kv_heads)
            )
        name = f"model.layers.{found[1]}.{LLAMA_LINEAR[found[2]]}.weight"
        tensors[f"{name}.values"] = groups.values[:, 0::2] | (groups.values[:, 1::2] << 4)
        tensors[f"{name}.scales"] = groups.scales.to(torch.float16)  # the blocks' own f16
        tensors[f"{name}.lows"] = groups.lows.to(torch.float16)
    if tensors:
        save_file(tensors, str(folder / FILE))
    return sum(1 for key in tensors if key.endswith((".values", ".bytes")))


def read(folder: Path) -> Blocks:
    """The blocks `write` kept in `folder`, by weight name; none where it kept none."""
    found = Blocks({}, {})
    path = folder / FILE
    if not path.is_file():
        return found
    import torch
    from safetensors.torch import load_file

    stored = load_file(str(path))
    for key, packed in stored.items():
        if key.endswith(".values"):
            name = key.removesuffix(".values")
            values = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(packed.shape[0], -1)
            scales, lows = stored[f"{name}.scales"].float(), stored[f"{name}.lows"].float()
            found.four_bit[name] = Groups(values, scales, lows)
        elif key.endswith(".bytes"):
            name = key.removesuffix(".bytes")
            found.eight_bit[name] = EightBit(packed, stored[f"{name}.scales"].float())
    return found
