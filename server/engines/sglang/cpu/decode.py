"""A decode step of a Llama-architecture model (the embedded SmolLM2 is one) without SGLang's
per-layer scaffolding.

SGLang 0.5.23 runs each decoder layer through its stage boundaries (residual streams, fused
norm-and-quantize read-outs, dual-GEMM and activation-quantization checks, module hooks): on a
GPU that Python is hidden behind the kernels' launch queue, on a CPU it runs in line with them
(the bench's decode scenario measures a token's time).

Here a decode step calls the same pieces in the same order, and nothing else: each layer's RMSNorm
(the residual added inside it, as SGLang's boundaries do), its linear layers through `linear.matmul`
(the forms SGLang's own path reaches through the hooked `UnquantizedLinearMethod`), rotary embedding
and SiLU-and-multiply, each op through its own `forward` (SGLang's choice of implementation for the
machine), and attention through the layer's `RadixAttention` (so the KV cache is written and read as
before). The arithmetic is SGLang's own, operation for operation: the same greedy answer came out of
both paths with the same logprobs to the last bit (the paths alternated in one server), and
tests/api/test_sglang_server.py checks each decoded token's logprob against SGLang's own prefill of
the same tokens. A forward this does not cover (prefill and mixed batches, pipeline or tensor
parallelism, captured hidden states, a quantized or LoRA linear layer, a GPU) goes to SGLang's own
`LlamaModel.forward`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from server.engines.sglang.cpu import linear

MODEL_FORWARD = "sglang.srt.models.llama.LlamaModel.forward"
LEAN = "_b3os_lean_decode"  # on the model: whether its layers fit, decided once


def lean_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement for `LlamaModel.forward`."""

    def forward(
        self: Any,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: Any,
        input_embeds: torch.Tensor | None = None,
        pp_proxy_tensors: Any = None,
    ) -> Any:
        if (
            input_embeds is None
            and pp_proxy_tensors is None
            and forward_batch.forward_mode.is_decode()
            and input_ids.device.type == "cpu"
            and not self.layers_to_capture
            and fits(self)
        ):
            return decode(self, input_ids, positions, forward_batch)
        return original(self, input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)

    return forward


def fits(model: Any) -> bool:
    """Whether every layer of `model` is a plain Llama decoder layer this path computes as
    SGLang would, on one rank."""
    known: bool | None = model.__dict__.get(LEAN)
    if known is None:
        known = model.__dict__[LEAN] = _fits(model)
    return known


def _fits(model: Any) -> bool:
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
    from sglang.srt.models.llama import LlamaDecoderLayer

    if not (model.pp_group.is_first_rank and model.pp_group.is_last_rank):
        return False
    layers = list(model.layers)[model.start_layer : model.end_layer]
    for layer in layers:
        if type(layer) is not LlamaDecoderLayer:
            return False
        attn, mlp = layer.self_attn, layer.mlp
        products = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        for product in products:
            if type(product.quant_method) is not UnquantizedLinearMethod:
                return False
            if getattr(product, "tp_size", 1) != 1 or hasattr(product, "set_lora"):
                return False
            if linear.int4(product) is None and linear.bf16_copy(product) is None:
                return False
    return bool(layers)


def _product(layer: Any, x: torch.Tensor) -> torch.Tensor:
    out = linear.matmul(layer, x, None if layer.skip_bias_add else layer.bias)
    if out is None:
        out, _ = layer(x)
    return out


def decode(
    model: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any
) -> torch.Tensor:
    """The final norm's output for one decode step: [requests, hidden]."""
    hidden = model.embed_tokens(input_ids)
    residual: torch.Tensor | None = None
    for layer in list(model.layers)[model.start_layer : model.end_layer]:
        attn, mlp = layer.self_attn, layer.mlp
        if residual is None:
            residual = hidden
            x = layer.input_layernorm.forward(hidden)
        else:
            x, residual = layer.input_layernorm.forward(hidden, residual)
        qkv = _product(attn.qkv_proj, x)
        q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
        q, k = attn.rotary_emb.forward(positions, q, k)
        hidden = _product(attn.o_proj, attn.attn(q, k, v, forward_batch))
        x, residual = layer.post_attention_layernorm.forward(hidden, residual)
        hidden = _product(mlp.down_proj, mlp.act_fn.forward(_product(mlp.gate_up_proj, x)))
    normed, _ = model.norm.forward(hidden, residual)
    return normed
