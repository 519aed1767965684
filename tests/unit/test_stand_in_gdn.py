"""The sgl_kernel stand-in's kernels for Qwen3.5 on CPUs without AMX: its gated-attention gate and
q/k norms, and the Gated DeltaNet layers' projection split, gates, short convolution and delta
rule. Each is checked against a straightforward reference written here (the recurrences token by
token) and, for the convolution and the delta rule, against transformers' torch functions; a
prefill cut into chunks, then decoded token by token, must give what one pass over the whole
sequence gives, with several sequences of different lengths in each call, each in its own slot."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

STAND_IN = Path(__file__).resolve().parents[2] / "server/engines/sglang/stand_in"
ops = torch.ops.sgl_kernel


@pytest.fixture(scope="module")
def mamba() -> ModuleType:
    """The stand-in's `sgl_kernel.mamba`, imported as SGLang imports it; importing the stand-in
    registers its `torch.ops.sgl_kernel` ops."""
    sys.path.insert(0, str(STAND_IN))
    try:
        importlib.import_module("sgl_kernel")
        return importlib.import_module("sgl_kernel.mamba")
    finally:
        sys.path.remove(str(STAND_IN))


@pytest.fixture(scope="module")
def hf_qwen3_next() -> ModuleType:
    """transformers' Qwen3-Next modeling module, whose torch functions are the references of the
    GDN kernels in transformers."""
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    return importlib.import_module("transformers.models.qwen3_next.modeling_qwen3_next")


def close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float = 1e-4) -> None:
    torch.testing.assert_close(actual.double(), expected.double(), atol=tolerance, rtol=tolerance)


def gemma_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight.double())


def test_the_gate_multiplies_the_attention_output_in_place(mamba: ModuleType) -> None:
    tokens, heads, head_dim = 5, 3, 8
    q_gate = torch.randn(tokens, heads, 2 * head_dim, dtype=torch.bfloat16)
    gate = q_gate[..., head_dim:]  # a strided view, as Qwen3.5's native attention path passes
    for gate_view in (gate, gate.reshape(tokens, heads * head_dim)):
        x = torch.randn(tokens, heads * head_dim, dtype=torch.bfloat16)
        expected = x.double() * torch.sigmoid(gate_view.double()).reshape(x.shape)
        assert ops.fused_sigmoid_mul_cpu(x, gate_view) is None
        close(x, expected, 1e-2)


def test_q_and_k_are_gemma_normalized_per_head(mamba: ModuleType) -> None:
    tokens, heads, kv_heads, head_dim, eps = 4, 4, 2, 16, 1e-6
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q_weight, k_weight = torch.randn(head_dim), torch.randn(head_dim)
    q_out, k_out = ops.fused_qk_gemma_rmsnorm_cpu(q, k, q_weight, k_weight, eps, head_dim)
    assert q_out.shape == q.shape and k_out.shape == k.shape and q_out.is_contiguous()
    close(q_out.view(-1, head_dim), gemma_rms(q.reshape(-1, head_dim), q_weight, eps))
    close(k_out.view(-1, head_dim), gemma_rms(k.reshape(-1, head_dim), k_weight, eps))


def test_q_is_normalized_and_its_gate_split_off(mamba: ModuleType) -> None:
    tokens, heads, kv_heads, head_dim, eps = 3, 2, 1, 8, 1e-6
    q, gate = torch.randn(tokens, heads, head_dim), torch.randn(tokens, heads, head_dim)
    qkv = torch.cat([torch.cat([q, gate], dim=-1).flatten(1), torch.randn(tokens, 24)], dim=-1)
    q_gate, k = qkv[:, : 2 * heads * head_dim], qkv[:, 2 * heads * head_dim : -16]
    q_weight, k_weight = torch.randn(head_dim), torch.randn(head_dim)
    q_out, k_out, gate_out = ops.fused_qk_gemma_rmsnorm_with_gate_cpu(
        q_gate, k, q_weight, k_weight, eps, head_dim, heads
    )
    assert q_out.shape == gate_out.shape == (tokens * heads, head_dim)
    assert k_out.shape == (tokens * kv_heads, head_dim)
    close(q_out, gemma_rms(q.reshape(-1, head_dim), q_weight, eps))
    close(k_out, gemma_rms(k.reshape(-1, head_dim), k_weight, eps))
    assert torch.equal(gate_out, gate.reshape(-1, head_dim))


def test_the_gated_norm_normalizes_then_gates(mamba: ModuleType) -> None:
    x, z, weight = torch.randn(6, 32), torch.randn(6, 32), torch.randn(32)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight * F.silu(z)
    close(ops.fused_rmsnorm_gated_cpu(x, weight, z, 1e-6), expected)


def test_the_projections_split_into_qkv_z_b_a(mamba: ModuleType) -> None:
    tokens, k_heads, v_heads, head_k, head_v = 3, 2, 4, 8, 6
    widths = [k_heads * head_k, k_heads * head_k, v_heads * head_v, v_heads * head_v]
    qkvz = torch.randn(tokens, sum(widths), dtype=torch.bfloat16)
    ba = torch.randn(tokens, 2 * v_heads, dtype=torch.bfloat16)
    mixed_qkv, z, b, a = ops.fused_qkvzba_split_reshape_cat_contiguous_cpu(
        qkvz, ba, k_heads, v_heads, head_k, head_v
    )
    query, key, value, gate = qkvz.split(widths, dim=-1)
    assert torch.equal(mixed_qkv, torch.cat([query, key, value], dim=-1))
    assert torch.equal(z, gate.reshape(tokens, v_heads, head_v))
    assert torch.equal(b, ba[:, :v_heads]) and torch.equal(a, ba[:, v_heads:])
    assert all(t.is_contiguous() and t.dtype == torch.bfloat16 for t in (mixed_qkv, z, b, a))


def test_the_gates_are_the_decay_and_the_write_strength(mamba: ModuleType) -> None:
    tokens, heads = 5, 4
    A_log, dt_bias = torch.rand(heads), torch.randn(heads, dtype=torch.bfloat16)
    a = torch.randn(tokens, heads, dtype=torch.bfloat16) * 10  # past softplus' threshold too
    b = torch.randn(tokens, heads, dtype=torch.bfloat16)
    g, beta = ops.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, tokens, heads)
    assert g.dtype == torch.float32 and beta.dtype == torch.bfloat16
    close(g[0], -A_log.exp() * torch.log1p(torch.exp(a.float() + dt_bias.float())))
    close(beta[0], torch.sigmoid(b.float()), 1e-2)


# Short convolution


def conv_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, history: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token: x (tokens, dim) after history (dim, width - 1); (out, last width - 1)."""
    window, outputs = history.double(), []
    for token in x.double():
        full = torch.cat([window, token[:, None]], dim=1)
        outputs.append(F.silu((full * weight.double()).sum(-1) + bias.double()))
        window = full[:, 1:]
    return torch.stack(outputs), window


def split(x: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    return list(x.split(list(lengths)))


def starts(lengths: Sequence[int]) -> torch.Tensor:
    return torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)


def test_a_chunked_prefill_then_decode_convolves_as_one_pass(
    mamba: ModuleType, hf_qwen3_next: ModuleType
) -> None:
    dim, width = 8, 4
    slots = torch.tensor([4, 0, 2], dtype=torch.int32)  # three requests' slots in a pool of 6
    first, second, decode_steps = [4, 1, 2], [2, 1, 1], 2
    totals = [f + s + decode_steps for f, s in zip(first, second, strict=True)]
    weight, bias = torch.randn(dim, width), torch.randn(dim)
    pool = torch.randn(6, dim, width - 1)  # stale states: a first chunk must not read them
    untouched = pool[[1, 3, 5]].clone()
    streams = [torch.randn(total, dim) for total in totals]

    outputs: list[list[torch.Tensor]] = [[] for _ in streams]
    for chunk, continues in ((first, False), (second, True)):
        offsets = first if continues else [0, 0, 0]
        x = torch.cat([s[o : o + n] for s, o, n in zip(streams, offsets, chunk, strict=True)])
        out = mamba.causal_conv1d_fn_cpu(
            x.transpose(0, 1),  # as SGLang passes its (tokens, dim) activations
            weight,
            bias,
            activation="silu",
            conv_states=pool,
            has_initial_state=torch.tensor([continues] * 3),
            cache_indices=slots,
            query_start_loc=starts(chunk),
            seq_lens_cpu=list(chunk),
        ).transpose(0, 1)
        for i, part in enumerate(split(out, chunk)):
            outputs[i].append(part)
    for step in range(decode_steps):
        x = torch.stack([s[f + n + step] for s, f, n in zip(streams, first, second, strict=True)])
        out = mamba.causal_conv1d_update_cpu(x, pool, weight, bias, "silu", slots)
        for i in range(3):
            outputs[i].append(out[i : i + 1])

    for i, stream in enumerate(streams):
        expected, final = conv_reference(stream, weight, bias, torch.zeros(dim, width - 1))
        close(torch.cat(outputs[i]), expected)
        close(pool[slots[i]], final)
        hf_out = hf_qwen3_next.causal_conv1d_fn(
            stream.T[None].double(), weight.double(), bias.double(), activation="silu"
        )
        close(torch.cat(outputs[i]), hf_out[0].T)
    assert torch.equal(pool[[1, 3, 5]], untouched)


def test_the_decode_convolution_matches_transformers(
    mamba: ModuleType, hf_qwen3_next: ModuleType
) -> None:
    batch, dim, width = 3, 8, 4
    state, weight, bias = torch.randn(batch, dim, width - 1), torch.randn(dim, width), None
    x = torch.randn(batch, dim)
    hf_state = state.clone()
    expected = hf_qwen3_next.causal_conv1d_update(x[..., None], hf_state, weight, bias, "silu")
    out = mamba.causal_conv1d_update_cpu(x, state, weight, bias, "silu", None)
    close(out, expected[..., 0])
    close(state, hf_state)


# Gated delta rule


def delta_rule_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token, in fp64: q, k (tokens, key_heads, K), v (tokens, value_heads, V), g, beta
    (tokens, value_heads), state (value_heads, K, V); (out (tokens, value_heads, V), state)."""
    group = v.shape[1] // q.shape[1]
    state, outputs = state.double(), []
    for q_t, k_t, v_t, g_t, beta_t in zip(q, k, v, g, beta, strict=True):
        q_t, k_t = (x.double().repeat_interleave(group, 0) for x in (q_t, k_t))
        q_t = q_t / q_t.norm(dim=-1, keepdim=True) / q_t.shape[-1] ** 0.5
        k_t = k_t / k_t.norm(dim=-1, keepdim=True)
        state = state * g_t.double().exp()[:, None, None]
        error = v_t.double() - torch.einsum("hkv,hk->hv", state, k_t)
        state = state + torch.einsum("hk,hv->hkv", k_t, beta_t.double()[:, None] * error)
        outputs.append(torch.einsum("hkv,hk->hv", state, q_t))
    return torch.stack(outputs), state


class Stream:
    """One request's tokens: q, k, v and the raw gates a, b, as its layer projects them."""

    def __init__(self, tokens: int, key_heads: int, value_heads: int, dim: int) -> None:
        self.q = torch.randn(tokens, key_heads, dim)
        self.k = torch.randn(tokens, key_heads, dim)
        self.v = torch.randn(tokens, value_heads, dim)
        self.a = torch.randn(tokens, value_heads)
        self.b = torch.randn(tokens, value_heads)


def test_a_chunked_prefill_then_decode_runs_the_delta_rule_token_by_token(
    mamba: ModuleType,
) -> None:
    key_heads, value_heads, dim, decode_steps = 2, 4, 16, 3
    slots = torch.tensor([5, 1, 3], dtype=torch.int32)
    # the first request's chunks span more than one 64-token step of the chunked kernel
    first, second = [70, 3, 1], [5, 64, 2]
    totals = [f + s + decode_steps for f, s in zip(first, second, strict=True)]
    streams = [Stream(total, key_heads, value_heads, dim) for total in totals]
    A_log, dt_bias = torch.rand(value_heads), torch.randn(value_heads)
    pool = torch.randn(7, value_heads, dim, dim) * 0.1
    start_states = pool[slots.long()].clone()
    untouched = pool[[0, 2, 4, 6]].clone()

    outputs: list[list[torch.Tensor]] = [[] for _ in streams]
    for chunk, offsets in ((first, [0, 0, 0]), (second, first)):
        parts = [
            (s.q[o : o + n], s.k[o : o + n], s.v[o : o + n], s.a[o : o + n], s.b[o : o + n])
            for s, o, n in zip(streams, offsets, chunk, strict=True)
        ]
        q, k, v, a, b = (torch.cat(columns) for columns in zip(*parts, strict=True))
        g, beta = ops.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
        out, final_state, chunk_states = mamba.chunk_gated_delta_rule_cpu(
            q=q[None],
            k=k[None],
            v=v[None],
            g=g,
            beta=beta,
            initial_state=pool,
            cu_seqlens=starts(chunk),
            head_first=False,
            use_qk_l2norm_in_kernel=True,
            initial_state_indices=slots,
        )
        assert final_state is pool and chunk_states is None  # the pool, updated in place
        assert out.shape == (1, sum(chunk), value_heads, dim)
        for i, part in enumerate(split(out[0], chunk)):
            outputs[i].append(part)
    for step in range(decode_steps):
        at = [f + s + step for f, s in zip(first, second, strict=True)]
        q, k, v, a, b = (
            torch.stack([getattr(s, name)[t] for s, t in zip(streams, at, strict=True)])
            for name in ("q", "k", "v", "a", "b")
        )
        out = ops.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log=A_log,
            dt_bias=dt_bias,
            q=q[None],  # (1, batch, heads, dim): one token per request, as SGLang decodes
            k=k[None],
            v=v[None],
            a=a,
            b=b,
            initial_state_source=pool,
            initial_state_indices=slots,
            cu_seqlens=torch.arange(4, dtype=torch.int32),
            use_qk_l2norm_in_kernel=True,
            softplus_beta=1.0,
            softplus_threshold=20.0,
        )
        assert out.shape == (3, 1, value_heads, dim)
        for i in range(3):
            outputs[i].append(out[i])

    for i, s in enumerate(streams):
        g = -A_log.exp() * F.softplus(s.a + dt_bias)
        expected, final = delta_rule_reference(s.q, s.k, s.v, g, s.b.sigmoid(), start_states[i])
        close(torch.cat(outputs[i]), expected)
        close(pool[slots[i]], final)
    assert torch.equal(pool[[0, 2, 4, 6]], untouched)


def test_the_delta_rule_matches_transformers(mamba: ModuleType, hf_qwen3_next: ModuleType) -> None:
    tokens, key_heads, value_heads, dim = 80, 2, 4, 16
    s = Stream(tokens, key_heads, value_heads, dim)
    g = -torch.rand(tokens, value_heads)
    beta = torch.rand(tokens, value_heads)
    initial = torch.randn(1, value_heads, dim, dim) * 0.1
    group = value_heads // key_heads
    q, k = (x.repeat_interleave(group, dim=1)[None] for x in (s.q, s.k))
    for reference in (
        hf_qwen3_next.torch_chunk_gated_delta_rule,
        hf_qwen3_next.torch_recurrent_gated_delta_rule,
    ):
        expected, expected_state = reference(
            q, k, s.v[None], g[None], beta[None], initial_state=initial.clone(),
            output_final_state=True, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        pool = initial.clone()
        out, _, _ = mamba.chunk_gated_delta_rule_cpu(
            s.q[None], s.k[None], s.v[None], g[None], beta[None], pool,
            starts([tokens]), False, True, torch.tensor([0], dtype=torch.int32),
        )  # fmt: skip
        close(out, expected)
        close(pool, expected_state)


def test_padding_requests_neither_read_nor_write_a_state(mamba: ModuleType) -> None:
    value_heads, dim = 2, 8
    pool = torch.randn(3, value_heads, dim, dim)
    before = pool.clone()
    s = Stream(1, value_heads, value_heads, dim)
    slots = torch.tensor([1, -1], dtype=torch.int32)
    out = ops.fused_sigmoid_gating_delta_rule_update_cpu(
        torch.rand(value_heads), torch.randn(value_heads),
        s.q.expand(2, -1, -1)[None], s.k.expand(2, -1, -1)[None], s.v.expand(2, -1, -1)[None],
        s.a.expand(2, -1), s.b.expand(2, -1), pool, slots,
        torch.arange(3, dtype=torch.int32), True,
    )  # fmt: skip
    assert torch.equal(out[1], torch.zeros_like(out[1])) and out[0].abs().sum() > 0
    assert torch.equal(pool[[0, 2]], before[[0, 2]]) and not torch.equal(pool[1], before[1])


def test_bf16_activations_keep_their_dtype_and_fp32_states(mamba: ModuleType) -> None:
    value_heads, dim, tokens = 2, 16, 5
    s = Stream(tokens, value_heads, value_heads, dim)
    pool = torch.zeros(2, value_heads, dim, dim)
    g, beta = ops.fused_gdn_gating_cpu(
        torch.rand(value_heads), s.a.bfloat16(), s.b.bfloat16(), torch.randn(value_heads).bfloat16()
    )
    out, _, _ = mamba.chunk_gated_delta_rule_cpu(
        s.q[None].bfloat16(), s.k[None].bfloat16(), s.v[None].bfloat16(), g, beta, pool,
        starts([tokens]), False, True, torch.tensor([1], dtype=torch.int32),
    )  # fmt: skip
    assert out.dtype == torch.bfloat16 and pool.dtype == torch.float32
    assert pool[1].abs().sum() > 0 and torch.equal(pool[0], torch.zeros_like(pool[0]))


SCHEMAS = {
    "fused_sigmoid_mul_cpu": "(Tensor(a!) input, Tensor gate) -> ()",
    "fused_qk_gemma_rmsnorm_cpu": "(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, "
    "float eps, int head_dim) -> (Tensor, Tensor)",
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": "(Tensor mixed_qkvz, Tensor mixed_ba, "
    "int num_heads_qk, int num_heads_v, int head_qk, int head_v) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
    "fused_gdn_gating_cpu": "(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) "
    "-> (Tensor, Tensor)",
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_ops_have_sglang_s_schemas(mamba: ModuleType, name: str) -> None:
    schema = str(getattr(ops, name).default._schema)
    assert schema == f"sgl_kernel::{name}{SCHEMAS[name]}"
