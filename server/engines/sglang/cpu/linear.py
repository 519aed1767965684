"""Matrix products for a model computed in fp32 on a CPU without native bf16 (AVX2, AVX-512
without BF16), where a bf16 GEMM converts every element and runs several times slower than fp32;
and decode steps of a model computed in bf16 (a CPU with AVX-512 BF16).

Each linear layer, and the LM head, keeps its weight in more forms, made before the first
request. For a few rows (decode steps), which read the whole weight to use it a few times: the
checkpoint's own quantized blocks where its folder keeps them (the embedded model's, read from its
GGUF: see server/models/gguf_blocks.py): a linear layer's 4-bit groups (an eighth of the fp32
bytes) and the LM head's 8-bit blocks (a quarter), in the compiled kernels of cpu/native.py where
the node has them (up to 16 rows; torch's int4 kernel up to 8 rows for the 4-bit groups
otherwise). Else a bf16 copy (half the bytes), in oneDNN's blocked layout where the CPU
multiplies bf16 natively (the plain copy's one-row product does not keep up with the memory
there). For more rows, the fp32 weight packed in oneDNN's blocked layout, which runs faster than
the plain fp32 GEMM at every size. The figures behind each choice are the bench's (its decode
rows, beside llama.cpp's).

A model computed in bf16 keeps its products but for a few rows: those run on the checkpoint's own
blocks, else on its weight in oneDNN's blocked layout (the same values, summed in another order).

The checkpoints served are bf16 or coarser, so the bf16 copy holds the checkpoint's own values,
and the blocks are taken only where they give the layer's weight back to the last bf16 bit. The
compiled kernels multiply the blocks' own values exactly (the rows in 16-bit integers per block,
finer steps than bf16's); torch's int4 kernel rounds the scales and zeros to bf16; on every path
the activations are rounded to bf16. The node never reloads weights in place, so the copies stay
the weight's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from server.engines.sglang.cpu import native
from server.engines.sglang.cpu_compat import cpu_computes_bf16
from server.models import gguf_blocks
from server.models.gguf_blocks import EightBit, Groups

log = logging.getLogger(__name__)

LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
LINEAR = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
LINEAR_INTO = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply_into"
LM_HEAD = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"
BF16 = "_b3os_bf16_weight"  # the bf16 copy, on the layer that holds the weight
BF16_PACKED = "_b3os_bf16_packed_weight"  # the bf16 copy in oneDNN's layout; None: not native
PACKED = "_b3os_packed_weight"  # oneDNN's packed fp32 weight, likewise
INT4 = "_b3os_int4_weight"  # its FourBit form, or None: no fit
EIGHT_BIT = "_b3os_eight_bit_weight"  # on the LM head: (the kernels, its 8-bit blocks), or None
GROUP = gguf_blocks.BLOCK  # values per 4-bit group along a row (GGUF's Q4 block)
INT4_MAX_ROWS = 8  # where the 4-bit kernel stops beating the packed fp32 GEMM (measured)
COMPUTED = (torch.float32, torch.bfloat16)  # the dtypes a model computes in here


def _fp32_weight(layer: torch.nn.Module) -> torch.Tensor | None:
    weight = _float_weight(layer)
    return weight if weight is not None and weight.dtype == torch.float32 else None


def _float_weight(layer: torch.nn.Module) -> torch.Tensor | None:
    weight = getattr(layer, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dtype in COMPUTED and weight.dim() == 2:
        return weight
    return None


def bf16_copy(layer: torch.nn.Module) -> torch.Tensor | None:
    copy: torch.Tensor | None = layer.__dict__.get(BF16)
    if copy is None and (weight := _fp32_weight(layer)) is not None:
        copy = layer.__dict__[BF16] = weight.detach().to(torch.bfloat16)
    return copy


def bf16_packed(layer: torch.nn.Module) -> torch.Tensor | None:
    """The bf16 copy in oneDNN's blocked layout, where the CPU multiplies bf16 natively: its
    one-row product reads the weight at the memory's pace, where the plain copy's does not."""
    if BF16_PACKED in layer.__dict__:
        found: torch.Tensor | None = layer.__dict__[BF16_PACKED]
        return found
    weight = _float_weight(layer)
    copy = bf16_copy(layer) if weight is not None and weight.dtype == torch.float32 else weight
    form = None
    if copy is not None and cpu_computes_bf16():
        form = torch.ops.mkldnn._reorder_linear_weight(copy.detach(), None)
    layer.__dict__[BF16_PACKED] = form
    return form


def packed(layer: torch.nn.Module) -> torch.Tensor | None:
    copy: torch.Tensor | None = layer.__dict__.get(PACKED)
    if copy is None and (weight := _fp32_weight(layer)) is not None:
        copy = layer.__dict__[PACKED] = torch.ops.mkldnn._reorder_linear_weight(
            weight.detach(), None
        )
    return copy


@dataclass(frozen=True, slots=True)
class FourBit:
    """A layer's 4-bit groups for its few-row products: in torch's packed form, and where the
    node compiled its kernels, also in theirs, which one row runs on (`int4_product`)."""

    packed: torch.Tensor  # torch's packed 4-bit values
    scales_zeros: torch.Tensor  # [groups, outputs, 2] bf16; torch's values are (q - 8) * s + z
    pairs: tuple[native.Kernels, native.FourBitPairs] | None = None


def int4(layer: torch.nn.Module) -> FourBit | None:
    """The weight as 4-bit groups, where `take_groups` gave it some."""
    found: FourBit | None = layer.__dict__.get(INT4)
    return found


def take_groups(
    layer: torch.nn.Module, groups: Groups, kernels: native.Kernels | None = None
) -> bool:
    """Keeps `groups` (the checkpoint's own 4-bit blocks of the layer's weight) in torch's packed
    form, and in `kernels`' where given, for the layer's few-row products, where they give its
    weight back to the last bf16 bit and their shape suits the kernel; whether it did."""
    weight = _float_weight(layer)
    rows, columns = groups.values.shape
    form = None
    if (
        weight is not None
        and weight.shape == (rows, columns)
        and not columns % GROUP
        and not rows % 16
        and torch.equal(groups.dequantized().to(torch.bfloat16), weight.to(torch.bfloat16))
    ):
        try:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                groups.values.to(torch.int32), 1
            )
        except RuntimeError:  # a shape or a build the kernel does not take
            packed = None
        if packed is not None:
            # torch's groups are (q - 8) * scale + zero
            zeros = groups.lows + 8 * groups.scales
            scales_zeros = torch.stack([groups.scales.t(), zeros.t()], dim=-1)
            pairs = None if kernels is None else native.FourBitPairs.of(groups)
            form = FourBit(
                packed,
                scales_zeros.contiguous().to(torch.bfloat16),
                None if kernels is None or pairs is None else (kernels, pairs),
            )
    layer.__dict__[INT4] = form
    return form is not None


def matmul(
    layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """x times the layer's weight (transposed), plus bias, in x's dtype; None where no form
    applies."""
    if x.dtype not in COMPUTED or x.dim() == 0:
        return None
    rows = x.numel() // x.shape[-1]
    if (groups := int4(layer)) is not None and rows <= int4_rows(groups):
        product = int4_product(x.reshape(rows, x.shape[-1]).to(torch.bfloat16), groups)
        out = product.to(x.dtype).view(*x.shape[:-1], -1)
        return out if bias is None else out.add_(bias)
    if x.dtype != torch.float32:  # a bf16 model's own product, its few rows in oneDNN's layout
        if rows > INT4_MAX_ROWS or (blocked := bf16_packed(layer)) is None:
            return None
        out = _blocked_product(x.reshape(rows, -1), blocked).view(*x.shape[:-1], -1)
        return out if bias is None else out.add_(bias)
    if rows == 1 and (weight := bf16_copy(layer)) is not None:
        flat = x.to(torch.bfloat16)
        blocked = bf16_packed(layer)
        out = F.linear(flat, weight) if blocked is None else _blocked_product(flat, blocked)
        out = out.to(torch.float32)
        return out if bias is None else out.add_(bias)
    if rows > 1 and (weight := packed(layer)) is not None:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return None


def int4_rows(groups: FourBit) -> int:
    """The most rows `int4_product` takes for these groups."""
    return native.MAX_ROWS if groups.pairs is not None else INT4_MAX_ROWS


def int4_product(rows: torch.Tensor, groups: FourBit) -> torch.Tensor:
    """rows [n, in] (bf16, contiguous; n up to `int4_rows`) times a weight's 4-bit `groups`
    (`int4`), in bf16: in the compiled kernel where the layer has its form (a row's result the
    same whatever rows are beside it), else in torch's int4 kernel."""
    if groups.pairs is not None:
        kernels, pairs = groups.pairs
        if (out := kernels.four_bit_product(rows, pairs)) is not None:
            return out
    return torch.ops.aten._weight_int4pack_mm_for_cpu(
        rows, groups.packed, GROUP, groups.scales_zeros
    )


def _blocked_product(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """rows [n, in] times a weight in oneDNN's blocked layout, in their dtype."""
    return torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")


def prepare(
    model: torch.nn.Module, blocks: gguf_blocks.Blocks, kernels: native.Kernels | None = None
) -> None:
    """The forms of every linear layer's weight and of the LM head, made before the first
    request rather than during it (the first forward would otherwise take seconds), the 4-bit
    ones from the checkpoint's groups by weight name (see `checkpoint_parts`), the LM head's
    8-bit ones where `kernels` can multiply them. A linear layer's fp32 weight is then released,
    its tensor holding the bf16 copy: every product goes through the other forms. (The LM head's
    stays: tied to the embedding, it is looked up.)"""
    from sglang.srt.layers.linear import LinearBase

    head = getattr(model, "lm_head", None)
    groups = blocks.four_bit
    taken: set[str] = set()
    for name, module in model.named_modules():
        if module is head:
            eight_bit = blocks.eight_bit.get(f"{name}.weight")
            take_eight_bit(module, eight_bit, kernels)
        if isinstance(module, LinearBase) or module is head:
            names = [f"{part}.weight" for part in checkpoint_parts(name)]
            found = [groups[part] for part in names if part in groups]
            stacked = Groups.stacked(found) if len(found) == len(names) else None
            if stacked is not None and take_groups(module, stacked, kernels):
                taken.update(names)
            else:
                module.__dict__[INT4] = None
            copy, _ = bf16_copy(module), packed(module)
            if int4(module) is None:  # its one row runs on the bf16 copy
                bf16_packed(module)
            if isinstance(module, LinearBase) and copy is not None:
                module.weight.data = copy
    if left := sorted(groups.keys() - taken):
        log.warning(
            "%d of the checkpoint's 4-bit weights fit no layer or do not give its weight back "
            "(%s, ...): those layers decode on bf16",
            len(left),
            left[0],
        )


def take_eight_bit(
    head: torch.nn.Module, blocks: EightBit | None, kernels: native.Kernels | None
) -> bool:
    """Keeps `blocks` (the checkpoint's own 8-bit blocks of the LM head's weight) for the head's
    few-row products in `kernels`, where they give its weight back to the last bf16 bit; whether
    it did."""
    weight = _float_weight(head)
    fits = (
        kernels is not None
        and blocks is not None
        and weight is not None
        and weight.shape == blocks.values.shape
        and torch.equal(blocks.dequantized().to(torch.bfloat16), weight.to(torch.bfloat16))
    )
    head.__dict__[EIGHT_BIT] = (kernels, blocks) if fits else None
    return fits


def eight_bit_product(head: torch.nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """x [rows, hidden] times the head's 8-bit blocks (`take_eight_bit`), in x's dtype; None
    where it has none, or x has more rows or another form than the kernel takes."""
    form: tuple[native.Kernels, EightBit] | None = head.__dict__.get(EIGHT_BIT)
    if form is None or x.dim() != 2:
        return None
    kernels, blocks = form
    return kernels.eight_bit_product(x, blocks)


def checkpoint_parts(name: str) -> tuple[str, ...]:
    """The checkpoint's layers that SGLang stacks, in order, into its layer `name` (a Llama's q,
    k and v into `qkv_proj`, gate and up into `gate_up_proj`), or `name` itself."""
    prefix, _, last = name.rpartition(".")
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    return tuple(f"{prefix}.{part}" for part in fused[last]) if last in fused else (name,)


def prepared_after_loading(result: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    """An AFTER hook on `ModelRunner.load_model`: the model's forms, with the 4-bit blocks its
    folder keeps (the embedded model's, from its GGUF)."""
    del args, kwargs
    path = Path(runner.model_config.model_path)
    prepare(runner.model, gguf_blocks.read(path), native.loaded())
    return result


def faster_linear(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The replacement for `UnquantizedLinearMethod.apply`."""

    def apply(
        self: Any, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        out = matmul(layer, x, bias)
        return original(self, layer, x, bias) if out is None else out

    return apply


def faster_linear_into(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The replacement for `UnquantizedLinearMethod.apply_into` (a caller's output buffer)."""

    def apply_into(
        self: Any,
        layer: torch.nn.Module,
        x: torch.Tensor,
        output: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = matmul(layer, x, bias)
        return original(self, layer, x, output, bias) if out is None else output.copy_(out)

    return apply_into


def faster_lm_head(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The replacement for `LogitsProcessor._compute_lm_head`, for an unquantized head."""

    def compute_lm_head(
        self: Any,
        hidden_states: torch.Tensor,
        lm_head: torch.nn.Module,
        embedding_bias: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        method = type(getattr(lm_head, "quant_method", None)).__name__
        plain = method.startswith("Unquantized") and not hasattr(lm_head, "set_lora")
        out = None
        if plain and embedding_bias is None:
            out = eight_bit_product(lm_head, hidden_states)
        if plain and out is None:
            out = matmul(lm_head, hidden_states, embedding_bias)
        return (
            original(self, hidden_states, lm_head, embedding_bias, **kwargs) if out is None else out
        )

    return compute_lm_head
