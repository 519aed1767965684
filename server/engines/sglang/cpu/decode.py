"""A decode step of a Llama-architecture model (the embedded SmolLM2 is one) without SGLang's
per-layer scaffolding.

SGLang 0.5.23 runs each decoder layer through its stage boundaries (residual streams, fused
norm-and-quantize read-outs, dual-GEMM and activation-quantization checks, module hooks), and
each op through its dispatch (`BaseFusedOp.forward`, the attention backend's `forward`, the KV
pool's checked write): on a GPU that Python hides behind the kernels' launch queue, on a CPU it
runs in line with them and costs more than the arithmetic of a small model's step.

Here a decode step computes the same layers with the same weights and kernels, and nothing else:
what does not change between steps (each layer's weights in the forms `linear` made, norm weights,
head counts) is gathered once per model (`Plan`); the rotary angles of the step's positions are
looked up once for all layers; each layer is then its RMSNorms (torch's fused LayerNorm kernel, see
`Norm`; the residual added before it), its products (torch's int4 kernel called directly where the
layer has 4-bit groups), the rotation of queries and keys together, the new keys and values copied
into their cache slots, attention through `attention.decode_attention` (the backend's own plan of
the step's key reads), and SiLU-and-multiply. It differs from SGLang's own path in rounding only
(the residual sum is rounded to the model's dtype before the norm, as it is stored, where SGLang
norms the fp32 sum): tests/api/test_sglang_server.py checks each decoded token's logprob against
SGLang's own prefill of the same tokens. A forward this does not cover (prefill and mixed
batches, pipeline or tensor parallelism, captured hidden states, a quantized or LoRA linear layer,
another norm, rotary or attention backend, a GPU) goes to SGLang's own `LlamaModel.forward`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from server.engines.sglang.cpu import attention, linear, native

log = logging.getLogger(__name__)

MODEL_FORWARD = "sglang.srt.models.llama.LlamaModel.forward"
PLAN = "_b3os_lean_decode"  # on the model: its Plan, or None where its layers do not fit


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
            and (plan := plan_of(self)) is not None
        ):
            return plan.decode(input_ids, positions, forward_batch)
        return original(self, input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)

    return forward


@dataclass(frozen=True, slots=True)
class Product:
    """One linear layer's product for a decode step's rows."""

    module: torch.nn.Module
    groups: linear.FourBit | None  # the 4-bit form, where it has one
    bias: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if (
            self.groups is not None
            and x.dtype == torch.bfloat16
            and x.shape[0] <= linear.int4_rows(self.groups)
        ):
            out = linear.int4_product(x, self.groups)
            return out if self.bias is None else out.add_(self.bias)
        found = linear.matmul(self.module, x, self.bias)
        if found is None:
            found, _ = self.module(x)
        return found


@dataclass(frozen=True, slots=True)
class Norm:
    """An RMSNorm computed as torch's fused LayerNorm of each row beside its negation: their mean
    is 0, so their variance is the row's mean square. (torch's rms_norm is several ops on a CPU,
    each dispatched.)"""

    weight: torch.Tensor
    doubled: torch.Tensor  # the weight, twice over
    eps: float

    @staticmethod
    def of(weight: torch.Tensor, eps: float) -> Norm:
        return Norm(weight.contiguous(), torch.cat((weight, weight)), eps)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        both = torch.cat((x, -x), dim=-1)
        out = F.layer_norm(both, self.doubled.shape, self.doubled, None, self.eps)[:, : x.shape[-1]]
        return out if x.shape[0] == 1 else out.contiguous()  # the int4 kernel takes whole rows


@dataclass(frozen=True, slots=True)
class Layer:
    """What a decoder layer's step reads, gathered once."""

    input_norm: Norm
    post_norm: Norm
    qkv: Product
    o: Product
    gate_up: Product
    down: Product
    heads: int
    kv_heads: int
    head_dim: int
    attention: Any  # the layer's RadixAttention: its id, scaling, and the fallback call


@dataclass(frozen=True, slots=True)
class Plan:
    """A Llama model's decode step, for a model every layer of which fits."""

    model: Any
    layers: tuple[Layer, ...]
    norm: Norm
    cos_sin: torch.Tensor  # the rotary cache: [positions, head_dim] (cos halves, sin halves)
    kernels: native.Kernels | None  # the node's compiled kernels, where it has them

    def decode(
        self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any
    ) -> torch.Tensor:
        """The final norm's output for one decode step: [requests, hidden]."""
        hidden = self.model.embed_tokens(input_ids)
        from sglang.srt.model_executor.forward_context import get_attn_backend

        backend = get_attn_backend()
        store = _direct_store(backend, hidden.dtype)
        if (
            self.kernels is not None
            and store is not None
            and self.cos_sin.dtype == hidden.dtype
            and hidden.is_contiguous()
            and int(positions.max()) < self.cos_sin.shape[0]  # the kernel reads the angles there
        ):
            return self._compiled(self.kernels, hidden, positions, forward_batch, backend, store)
        rows = hidden.shape[0]
        cos, sin = _angles(self.cos_sin, positions, hidden.dtype)
        loc = forward_batch.out_cache_loc.to(torch.int64)
        residual = hidden
        x = self.layers[0].input_norm(hidden)
        for index, layer in enumerate(self.layers):
            if index:
                residual = hidden + residual
                x = layer.input_norm(residual)
            qkv = layer.qkv(x)
            q_size = layer.heads * layer.head_dim
            kv_size = layer.kv_heads * layer.head_dim
            qk = qkv[:, : q_size + kv_size].view(rows, layer.heads + layer.kv_heads, -1)
            qk = rotated(qk, cos, sin)
            q, k = qk[:, : layer.heads], qk[:, layer.heads :]
            v = qkv[:, q_size + kv_size :].view(rows, layer.kv_heads, -1)
            if store is None:  # SGLang's own write and read, through the layer
                out = layer.attention(q.reshape(rows, q_size), k, v, forward_batch)
            else:
                k_cache, v_cache = _caches(layer, store)
                k_cache.index_copy_(0, loc, k)
                v_cache.index_copy_(0, loc, v)
                out = _attend(layer, q, k_cache, v_cache, backend, forward_batch)
            hidden = layer.o(out.reshape(rows, q_size))
            residual = hidden + residual
            x = layer.post_norm(residual)
            gate_up = layer.gate_up(x)
            half = gate_up.shape[-1] // 2
            hidden = layer.down(F.silu(gate_up[:, :half]) * gate_up[:, half:])
        residual = hidden + residual
        return self.norm(residual)

    def _compiled(
        self,
        kernels: native.Kernels,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: Any,
        backend: Any,
        store: Any,
    ) -> torch.Tensor:
        """`decode` with each layer's elementwise steps in the compiled kernels: the residual
        sum and norm, the rotation with the new keys and values stored, SiLU-and-multiply."""
        rows = hidden.shape[0]
        loc = forward_batch.out_cache_loc.to(torch.int64).contiguous()
        positions = positions.to(torch.int64).contiguous()
        residual = hidden  # summed into in place from here on
        first = self.layers[0].input_norm
        x = kernels.add_rms_norm(residual, None, first.weight, first.eps)
        for index, layer in enumerate(self.layers):
            if index:
                norm = layer.input_norm
                x = kernels.add_rms_norm(residual, hidden, norm.weight, norm.eps)
            qkv = layer.qkv(x)
            k_cache, v_cache = _caches(layer, store)
            q = kernels.rotate_store(
                qkv, layer.heads, layer.kv_heads, self.cos_sin, positions, k_cache, v_cache, loc
            )
            out = _attend(layer, q, k_cache, v_cache, backend, forward_batch)
            hidden = layer.o(out.reshape(rows, -1))
            x = kernels.add_rms_norm(residual, hidden, layer.post_norm.weight, layer.post_norm.eps)
            hidden = layer.down(kernels.silu_mul(layer.gate_up(x)))
        return kernels.add_rms_norm(residual, hidden, self.norm.weight, self.norm.eps)


def _caches(layer: Layer, store: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's key and value buffers in the pool: [slots, kv_heads, head_dim] each."""
    layer_id = layer.attention.layer_id
    return store.get_key_buffer(layer_id), store.get_value_buffer(layer_id)


def _attend(
    layer: Layer,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    backend: Any,
    forward_batch: Any,
) -> torch.Tensor:
    """The layer's attention read, its new keys and values already in their slots."""
    scaling = layer.attention.scaling
    out = attention.decode_attention(backend, q, k_cache, v_cache, forward_batch.seq_lens, scaling)
    if out is None:  # no plan for this forward: the backend's own read
        out = q.new_empty(q.shape)
        backend._run_sdpa_forward_decode(
            q, out, k_cache, v_cache, backend.req_to_token_pool.req_to_token,
            forward_batch.req_pool_indices, forward_batch.seq_lens, forward_batch.encoder_lens,
            scaling=scaling, enable_gqa=layer.heads != layer.kv_heads, causal=False,
        )  # fmt: skip
    return out


def rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [rows, heads, head_dim] rotated by `_angles`' cos and signed sin: the halves swapped."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


def _angles(
    cos_sin: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [rows, 1, head_dim] such that x * cos + halves_swapped(x) * sin is
    SGLang's neox rotation of x, rounding for rounding."""
    cos, sin = cos_sin.index_select(0, positions.flatten()).to(dtype).chunk(2, dim=-1)
    return torch.cat((cos, cos), -1).unsqueeze(1), torch.cat((-sin, sin), -1).unsqueeze(1)


def _direct_store(backend: Any, dtype: torch.dtype) -> Any:
    """The KV pool where a step's keys and values can be copied straight into its buffers
    and read by the plain-torch backend (SGLang's token-major pool, unquantized, in the model's
    dtype), else None."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pool: Any = getattr(backend, "token_to_kv_pool", None)
    plain = (
        isinstance(backend, TorchNativeAttnBackend)
        and type(pool) is MHATokenToKVPool
        and pool.kv_cache_layout == "nhd"
        and not pool.is_quantized_kv_cache
        and pool.store_dtype == pool.dtype == dtype
        and pool.layer_transfer_counter is None
    )
    return pool if plain else None


def plan_of(model: Any) -> Plan | None:
    """`model`'s plan, made at its first decode step; None where a layer does not fit."""
    if PLAN not in model.__dict__:
        found = _plan(model)
        if isinstance(found, Plan):
            log.info("decode steps: %d Llama layers computed directly", len(found.layers))
            model.__dict__[PLAN] = found
        else:
            log.warning("decode steps: SGLang's own forward, slower on a CPU (%s)", found)
            model.__dict__[PLAN] = None
    plan: Plan | None = model.__dict__[PLAN]
    return plan


def _plan(model: Any) -> Plan | str:
    """The model's plan, or why it has none."""
    from sglang.srt.layers.activation import SiluAndMul
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.layers.rotary_embedding import RotaryEmbedding
    from sglang.srt.models.llama import LlamaDecoderLayer

    def plain_norm(norm: Any) -> bool:
        return (
            type(norm) is RMSNorm
            and norm.variance_size_override is None
            and norm.override_orig_dtype is None
            and not norm.fp32_residual
            and not norm.cast_x_before_out_mul
        )

    def product(module: Any) -> Product | None:
        if type(module.quant_method) is not UnquantizedLinearMethod:
            return None
        if getattr(module, "tp_size", 1) != 1 or hasattr(module, "set_lora"):
            return None
        groups = linear.int4(module)
        if (
            groups is None
            and linear.bf16_copy(module) is None
            and linear.bf16_packed(module) is None
        ):
            return None
        return Product(module, groups, None if module.skip_bias_add else module.bias)

    if not (model.pp_group.is_first_rank and model.pp_group.is_last_rank):
        return "pipeline parallel"
    if not plain_norm(model.norm):
        return f"final norm {type(model.norm).__name__}"
    layers: list[Layer] = []
    rotary = None
    for decoder in list(model.layers)[model.start_layer : model.end_layer]:
        if type(decoder) is not LlamaDecoderLayer:
            return f"layer {type(decoder).__name__}"
        attn, mlp = decoder.self_attn, decoder.mlp
        radix = attn.attn
        rotation = attn.rotary_emb
        if rotary is None:
            rotary = rotation
        fits = (
            plain_norm(decoder.input_layernorm)
            and plain_norm(decoder.post_attention_layernorm)
            and type(mlp.act_fn) is SiluAndMul
            and type(radix) is RadixAttention
            and not radix.is_cross_attention
            and radix.sliding_window_size in (None, -1)
            and not radix.logit_cap
            and radix.qk_head_dim == radix.v_head_dim == attn.head_dim
            and rotation is rotary
            and _plain_rotary(rotation, RotaryEmbedding, attn.head_dim)
        )
        products = [
            product(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        ]
        if not fits:
            return f"layer {len(layers)}: its norm, activation, attention or rotary"
        if any(p is None for p in products):
            return f"layer {len(layers)}: a quantized, LoRA or sharded linear layer"
        qkv, o, gate_up, down = (p for p in products if p is not None)
        layers.append(
            Layer(
                Norm.of(
                    decoder.input_layernorm.weight.data, decoder.input_layernorm.variance_epsilon
                ),
                Norm.of(
                    decoder.post_attention_layernorm.weight.data,
                    decoder.post_attention_layernorm.variance_epsilon,
                ),
                qkv,
                o,
                gate_up,
                down,
                attn.num_heads,
                attn.num_kv_heads,
                attn.head_dim,
                radix,
            )
        )
    if rotary is None:
        return "no layers"
    norm = Norm.of(model.norm.weight.data, model.norm.variance_epsilon)
    return Plan(model, tuple(layers), norm, rotary.cos_sin_cache.contiguous(), native.loaded())


def _plain_rotary(rotary: Any, base: Any, head_dim: int) -> bool:
    """SGLang's plain neox rotation over whole heads, its angles in `cos_sin_cache` (the
    subclasses that only scale the angles, Llama 3's among them, included)."""
    kind = type(rotary)
    return (
        isinstance(rotary, base)
        and kind.forward_native is base.forward_native
        and kind.forward_cpu is base.forward_cpu
        and rotary.is_neox_style
        and rotary.rotary_dim == head_dim
        and not hasattr(rotary, "sin_cos_cache")
    )
