"""Matrix products for a model computed in fp32 on a CPU without native bf16 (AVX2, AVX-512
without BF16), where a bf16 GEMM converts every element and runs several times slower than fp32;
and decode steps of a model computed in bf16 (a CPU with AVX-512 BF16).

Each linear layer, and the LM head, keeps its weight in more forms, made before the first
request. For a few rows (decode steps), which read the whole weight to use it a few times: the
checkpoint's own 4-bit groups where its values are such groups (a GGUF Q4_0/Q4_1 model, the
embedded one: an eighth of the fp32 bytes, in torch's int4 kernel), else a bf16 copy (half the
bytes), in oneDNN's blocked layout where the CPU multiplies bf16 natively (the plain copy's
one-row product does not keep up with the memory there). For more rows, the fp32 weight packed
in oneDNN's blocked layout, which runs faster than the plain fp32 GEMM at every size. The
figures behind each choice are the bench's (its decode rows, beside llama.cpp's).

A model computed in bf16 keeps its products but for a few rows: those run on the checkpoint's own
4-bit groups, else on its weight in oneDNN's blocked layout (the same values, summed in another
order).

The checkpoints served are bf16 or coarser, so the bf16 copy holds the checkpoint's own values,
and the 4-bit form is taken only where it gives them back to within bf16's rounding (checked per
layer: every value within 2^-7 of its group's largest); on those paths only the activations are
rounded to bf16. The node never reloads weights in place, so the copies stay the weight's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from server.engines.sglang.cpu_compat import cpu_computes_bf16

LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
LINEAR = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
LINEAR_INTO = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply_into"
LM_HEAD = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"
BF16 = "_b3os_bf16_weight"  # the bf16 copy, on the layer that holds the weight
BF16_PACKED = "_b3os_bf16_packed_weight"  # the bf16 copy in oneDNN's layout; None: not native
PACKED = "_b3os_packed_weight"  # oneDNN's packed fp32 weight, likewise
INT4 = "_b3os_int4_weight"  # (packed 4-bit groups, their scales and zeros), or None: no fit
GROUP = 32  # values per 4-bit group along a row (GGUF's Q4 block)
INT4_MAX_ROWS = 8  # where the 4-bit kernel stops beating the packed fp32 GEMM (measured)
INT4_TOLERANCE = 2**-7  # of a group's largest magnitude: bf16's rounding of the checkpoint
SAMPLE_ROWS = 16  # checked first, alone
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


def int4(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The weight as torch's packed 4-bit groups, where its values are such groups."""
    if INT4 in layer.__dict__:
        found: tuple[torch.Tensor, torch.Tensor] | None = layer.__dict__[INT4]
        return found
    weight = _float_weight(layer)
    if weight is None:
        return None
    layer.__dict__[INT4] = form = _four_bit_groups(weight.detach())
    return form


def _four_bit_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    rows, columns = weight.shape
    if columns % GROUP or rows % 16:
        return None
    groups = weight.view(rows, columns // GROUP, GROUP)
    # A weight of other values shows it in its first rows: the embedded model's LM head (28M
    # values, 8-bit groups) is refused there, in 1/90 (bf16) to 1/600 (fp32) of the time the
    # whole weight took, measured on the same machine.
    sample = groups[:SAMPLE_ROWS].float()
    if _quantized(sample) is None or (found := _quantized(groups.float())) is None:
        return None
    q, scale, low = found
    try:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            q.to(torch.int32).view(rows, columns), 1
        )
    except RuntimeError:  # a shape or a build the kernel does not take
        return None
    # torch's groups are (q - 8) * scale + zero
    zeros = low + 8 * scale
    scales_zeros = torch.stack([scale.squeeze(-1).t(), zeros.squeeze(-1).t()], dim=-1)
    return packed, scales_zeros.contiguous().to(torch.bfloat16)


def _quantized(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Each group's 4-bit values, scale and minimum, where they give its values back."""
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = (high - low) / 15
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.round((groups - low) / scale).clamp_(0, 15)
    error = (q * scale + low - groups).abs()
    if bool((error > INT4_TOLERANCE * torch.maximum(low.abs(), high.abs())).any()):
        return None
    return q, scale, low


def matmul(
    layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """x times the layer's weight (transposed), plus bias, in x's dtype; None where no form
    applies."""
    if x.dtype not in COMPUTED or x.dim() == 0:
        return None
    rows = x.numel() // x.shape[-1]
    if rows <= INT4_MAX_ROWS and (groups := int4(layer)) is not None:
        packed_groups, scales_zeros = groups
        flat = x.reshape(rows, x.shape[-1]).to(torch.bfloat16)
        product = torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, packed_groups, GROUP, scales_zeros
        )
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


def _blocked_product(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """rows [n, in] times a weight in oneDNN's blocked layout, in their dtype."""
    return torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")


def prepare(model: torch.nn.Module) -> None:
    """The forms of every linear layer's weight and of the LM head, made before the first
    request rather than during it (the first forward would otherwise take seconds). A linear
    layer's fp32 weight is then released, its tensor holding the bf16 copy: every product goes
    through the other forms. (The LM head's stays: tied to the embedding, it is looked up.)"""
    from sglang.srt.layers.linear import LinearBase

    head = getattr(model, "lm_head", None)
    for module in model.modules():
        if isinstance(module, LinearBase) or module is head:
            copy, _ = bf16_copy(module), packed(module)
            if int4(module) is None:  # its one row runs on the bf16 copy
                bf16_packed(module)
            if isinstance(module, LinearBase) and copy is not None:
                module.weight.data = copy


def prepared_after_loading(result: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    """An AFTER hook on `ModelRunner.load_model`."""
    del args, kwargs
    prepare(runner.model)
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
        out = matmul(lm_head, hidden_states, embedding_bias) if plain else None
        return (
            original(self, hidden_states, lm_head, embedding_bias, **kwargs) if out is None else out
        )

    return compute_lm_head
