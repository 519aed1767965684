"""The Gated DeltaNet (GDN) linear attention of SGLang's CPU build, in torch: what Qwen3.5's linear
attention layers call between their input projection and their gated norm.

Per value head, a GDN layer keeps a K x V state S (fp32) and, for each token, with its query q,
key k (both L2-normalized, q scaled by K**-0.5), value v, decay g = -exp(A_log) * softplus(a +
dt_bias) and write strength beta = sigmoid(b):

    S <- exp(g) * S;    S <- S + k (beta * (v - S^T k))^T;    out = S^T q

The states of all requests live in a pool, indexed by slot: (slots, value_heads, K, V), k-major as
in SGLang's CPU kernels (its GPU kernels keep S transposed; Qwen3.5 has K == V, so the pool SGLang
allocates, (slots, value_heads, V, K), is the same shape). Queries and keys have fewer heads than
values: value head h reads key head h // (value_heads // key_heads).

Prefill (`chunk_gated_delta_rule_cpu`) and decode (`fused_sigmoid_gating_delta_rule_update_cpu`)
both update the pool in place and agree token for token; both compute in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_SIZE = 64  # tokens per step of the chunked prefill, as in SGLang's CPU kernel


@torch.library.custom_op(
    "sgl_kernel::fused_qkvzba_split_reshape_cat_contiguous_cpu",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor mixed_qkvz, Tensor mixed_ba, int num_heads_qk, int num_heads_v, int head_qk, "
    "int head_v) -> (Tensor, Tensor, Tensor, Tensor)",
)
def fused_qkvzba_split_reshape_cat_contiguous_cpu(
    mixed_qkvz: torch.Tensor,
    mixed_ba: torch.Tensor,
    num_heads_qk: int,
    num_heads_v: int,
    head_qk: int,
    head_v: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Splits Qwen3.5's input projections, laid out [q | k | v | z] and [b | a] (all heads of one
    kind together), into new contiguous mixed_qkv (tokens, 2 * num_heads_qk * head_qk +
    num_heads_v * head_v), z (tokens, num_heads_v, head_v), b and a (tokens, num_heads_v)."""
    tokens = mixed_qkvz.shape[0]
    key_width, value_width = num_heads_qk * head_qk, num_heads_v * head_v
    if mixed_qkvz.shape != (tokens, 2 * key_width + 2 * value_width):
        raise ValueError("fused_qkvzba_split_reshape_cat_contiguous_cpu: mixed_qkvz width")
    if mixed_ba.shape != (tokens, 2 * num_heads_v):
        raise ValueError("fused_qkvzba_split_reshape_cat_contiguous_cpu: mixed_ba width")
    mixed_qkv = mixed_qkvz[:, : 2 * key_width + value_width].clone(
        memory_format=torch.contiguous_format
    )
    z = mixed_qkvz[:, 2 * key_width + value_width :].clone(memory_format=torch.contiguous_format)
    z = z.view(tokens, num_heads_v, head_v)
    b = mixed_ba[:, :num_heads_v].clone(memory_format=torch.contiguous_format)
    a = mixed_ba[:, num_heads_v:].clone(memory_format=torch.contiguous_format)
    return mixed_qkv, z, b, a


def _decay(
    A_log: torch.Tensor,
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """g = -exp(A_log) * softplus(a + dt_bias), in fp32, the log of each token's state decay."""
    softplus = F.softplus(a.float() + dt_bias.float(), softplus_beta, softplus_threshold)
    return -torch.exp(A_log.float()) * softplus


@torch.library.custom_op(
    "sgl_kernel::fused_gdn_gating_cpu",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)",
)
def fused_gdn_gating_cpu(
    A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefill gates of tokens (tokens, value_heads) a and b: (g, beta), each
    (1, tokens, value_heads); g = -exp(A_log) * softplus(a + dt_bias) in fp32, beta = sigmoid(b)
    in b's dtype."""
    if a.dim() != 2 or b.shape != a.shape:
        raise ValueError("fused_gdn_gating_cpu: a and b must be (tokens, value_heads)")
    g = _decay(A_log, a, dt_bias).unsqueeze(0)
    beta = torch.sigmoid(b.float()).to(b.dtype).unsqueeze(0)
    return g, beta


def _l2_normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (FLA's l2norm), in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.square().sum(dim=-1, keepdim=True) + eps)


def _queries_and_keys(
    q: torch.Tensor, k: torch.Tensor, value_heads: int, l2norm: bool, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 queries (scaled by K**-0.5) and keys, L2-normalized if asked, with their heads (dim -2)
    repeated to one per value head."""
    if l2norm:
        q, k = _l2_normalized(q, eps), _l2_normalized(k, eps)
    q, k = q.float() * q.shape[-1] ** -0.5, k.float()
    group = value_heads // q.shape[-2]
    if group != 1:
        q, k = q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)
    return q, k


def _check_pool(name: str, pool: torch.Tensor, value_heads: int, k_dim: int, v_dim: int) -> None:
    if pool.dtype != torch.float32 or pool.shape[1:] != (value_heads, k_dim, v_dim):
        raise ValueError(
            f"{name}: the state pool must be fp32 (slots, {value_heads}, {k_dim}, {v_dim}), "
            f"got {pool.dtype} {tuple(pool.shape)}"
        )


@torch.library.custom_op(
    "sgl_kernel::fused_sigmoid_gating_delta_rule_update_cpu",
    mutates_args=("initial_state_source",),
    device_types="cpu",
    schema="(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, "
    "Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor cu_seqlens, "
    "bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0) "
    "-> Tensor",
)
def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """Decode: one token for each of `batch` requests. q, k: (steps, batch, key_heads, K) and v:
    (steps, batch, value_heads, V), steps being 1 as SGLang calls it (its dim 0); a, b: (batch,
    value_heads), the gates. Request i's state is initial_state_source[initial_state_indices[i]]
    (pool: fp32 (slots, value_heads, K, V)), updated in place; a negative slot (padding) is
    neither read nor written and gets a zero output. cu_seqlens (one token per request) is not
    read. L2 norms use eps 1e-5, as the CPU kernel does. Returns (batch, steps, value_heads, V)
    in q's dtype."""
    del cu_seqlens
    steps, batch, _, k_dim = q.shape
    value_heads, v_dim = v.shape[-2:]
    _check_pool(
        "fused_sigmoid_gating_delta_rule_update_cpu",
        initial_state_source,
        value_heads,
        k_dim,
        v_dim,
    )
    queries, keys = _queries_and_keys(q, k, value_heads, use_qk_l2norm_in_kernel, 1e-5)
    values = v.float()
    decay = torch.exp(_decay(A_log, a, dt_bias, softplus_beta, softplus_threshold))[..., None, None]
    beta = torch.sigmoid(b.float()).unsqueeze(-1)  # (batch, value_heads, 1)
    slots = initial_state_indices.long()
    live = slots >= 0
    state = initial_state_source[slots.where(live, 0)]  # a copy: (batch, value_heads, K, V)
    matrices = state.view(-1, k_dim, v_dim)  # the same memory, one K x V matrix per head
    out = values.new_zeros(batch, steps, value_heads, v_dim)
    for step in range(steps):
        key, query = keys[step], queries[step]  # (batch, value_heads, K)
        state.mul_(decay)
        remembered = torch.einsum("bhkv,bhk->bhv", state, key)
        delta = beta * (values[step] - remembered)
        matrices.baddbmm_(key.reshape(-1, k_dim, 1), delta.reshape(-1, 1, v_dim))  # += k delta^T
        out[:, step] = torch.einsum("bhkv,bhk->bhv", state, query)
    initial_state_source[slots[live]] = state[live]
    out[~live] = 0
    return out.to(q.dtype)


def _chunked_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence of one sequence, CHUNK_SIZE tokens per step (the WY form of the gated delta
    rule, as in FLA): query, key (heads, L, K), value (heads, L, V), g, beta (heads, L), state
    (heads, K, V), all fp32. Returns (out (heads, L, V), final state)."""
    heads, length, _ = query.shape
    out = value.new_empty(heads, length, value.shape[-1])
    for start in range(0, length, CHUNK_SIZE):
        chunk = slice(start, min(start + CHUNK_SIZE, length))
        q, k, v, b = query[:, chunk], key[:, chunk], value[:, chunk], beta[:, chunk]
        # decay from the chunk's start to each token, and between tokens j <= i (0 above)
        cumulative = g[:, chunk].cumsum(dim=-1)
        n = cumulative.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        between = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(
            ~causal, -torch.inf
        )
        between = between.exp()
        # Each token's write delta_i = beta_i (v_i - S_{i-1}^T k_i) depends on the earlier writes
        # of the chunk: (I + A) delta = beta v - beta exp(G) k S, A strictly lower triangular.
        system = (b.unsqueeze(-1) * (k @ k.transpose(-1, -2)) * between).tril(-1)
        rhs = torch.cat([b.unsqueeze(-1) * v, (b * cumulative.exp()).unsqueeze(-1) * k], dim=-1)
        solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        writes, reads = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
        delta = writes - reads @ state  # (heads, n, V)
        out[:, chunk] = (q * cumulative.exp().unsqueeze(-1)) @ state + (
            (q @ k.transpose(-1, -2)) * between
        ) @ delta
        last = cumulative[:, -1:]
        state = (
            state * last.exp().unsqueeze(-1)
            + (k * (last - cumulative).exp().unsqueeze(-1)).transpose(-1, -2) @ delta
        )
    return out, state


def chunk_gated_delta_rule_cpu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    output_final_state: bool,
    cu_seqlens: torch.Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill of sequences packed back to back: query, key (1, tokens, key_heads, K), value (1,
    tokens, value_heads, V), g (log decay, fp32) and beta (1, tokens, value_heads); sequence i is
    tokens cu_seqlens[i]:cu_seqlens[i + 1] and continues the state
    initial_state[initial_state_indices[i]] (pool: fp32 (slots, value_heads, K, V)), which it
    updates in place; a negative slot (padding) is neither read nor written and gets a zero
    output. Returns (out (1, tokens, value_heads, V) in query's dtype, the pool itself), as the CPU
    kernel does whatever output_final_state says."""
    del output_final_state
    if head_first:
        raise ValueError("chunk_gated_delta_rule_cpu: head_first layouts are not supported")
    if query.shape[0] != 1:
        raise ValueError("chunk_gated_delta_rule_cpu: expects sequences packed in a batch of 1")
    value_heads, v_dim = value.shape[-2:]
    _check_pool("chunk_gated_delta_rule_cpu", initial_state, value_heads, query.shape[-1], v_dim)
    queries, keys = _queries_and_keys(query[0], key[0], value_heads, use_qk_l2norm_in_kernel, eps)
    # heads first: (value_heads, tokens, ...)
    queries, keys, values = (x.transpose(0, 1) for x in (queries, keys, value[0].float()))
    decays, betas = g[0].float().transpose(0, 1), beta[0].float().transpose(0, 1)
    out = values.new_zeros(values.shape)
    bounds = cu_seqlens.tolist()
    for slot, begin, end in zip(
        initial_state_indices.tolist(), bounds[:-1], bounds[1:], strict=True
    ):
        if slot < 0 or end == begin:
            continue
        tokens = slice(begin, end)
        out[:, tokens], initial_state[slot] = _chunked_delta_rule(
            queries[:, tokens],
            keys[:, tokens],
            values[:, tokens],
            decays[:, tokens],
            betas[:, tokens],
            initial_state[slot],
        )
    out = out.transpose(0, 1).unsqueeze(0)
    return out.to(query.dtype, memory_format=torch.contiguous_format), initial_state


# Registered through a library fragment rather than torch.library.custom_op, which forbids what
# the CPU kernel does: return its (mutated) state pool as the second output. The schema is
# SGLang's, with the pool's aliasing spelled out.
_LIBRARY = torch.library.Library("sgl_kernel", "FRAGMENT")
_LIBRARY.define(
    "chunk_gated_delta_rule_cpu(Tensor query, Tensor key, Tensor value, Tensor g, Tensor beta, "
    "Tensor(a!) initial_state, bool output_final_state, Tensor cu_seqlens, bool head_first, "
    "bool use_qk_l2norm_in_kernel, Tensor initial_state_indices, float eps=1e-6) "
    "-> (Tensor, Tensor(a!))"
)
_LIBRARY.impl("chunk_gated_delta_rule_cpu", chunk_gated_delta_rule_cpu, "CPU")
