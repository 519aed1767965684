"""Attention for SGLang's plain-torch backend, the one CPUs without AMX run on.

SGLang 0.5.23's version gathers each request's keys and values from the cache in every layer
(a copy of the whole context, per layer), pads a prefill's new queries to the whole sequence
and attends from every position: a chunk of a long prompt, or a prompt whose prefix the radix
cache holds, costs attention over all of it, squared. Here, per forward (`ForwardPlan`), each
request's keys are found once: a request whose cache slots run in order (the allocator hands
them out sorted) is read in place, with no copy. New tokens attend to the cached prefix and to
each other separately, in the fused flash kernel without a mask, the query heads that share a
key head packed together (so keys are never repeated per head), and the two halves are joined
by their log-sum-exp. A decode step of several requests with short contexts gathers their keys
once, padded and masked, into one batched product; with longer ones, whose padded gather and
masked product cost more than a kernel call each, attends to each request's keys as above.
Where the node compiled its kernels (`native.py`), a decode step is one call of its paged
decode-attention kernel a layer instead, which follows each request's slots itself (`Paged`).
Results are SGLang's own (unit tests compare); the times are the bench's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.functional import scaled_dot_product_attention

from server.engines.sglang.cpu import native

# SGLang's attention registry name of its plain-torch backend, which it runs on a CPU without
# AMX whatever the arguments say: this path's backend is registered under it (`create_backend`).
BACKEND_NAME = "torch_native"
PLAN = "_b3os_forward_plan"  # where a forward's plan lives on the backend
KERNELS = "_b3os_kernels"  # on the backend: the compiled kernels it decodes with, or None
# A decode step reads a request's keys in place where they lie in runs of at least RUN_TOKENS
# consecutive slots (a long prompt, its prefix cached), one kernel call a run, at most MAX_RUNS of
# them, and gathers the rest (the tokens of streams that decode side by side take every other
# slot): a whole gather copies the context in every layer, while a short context scattered in
# many short runs is gathered faster than attended run by run (each run is a kernel call).
MAX_RUNS = 16
RUN_TOKENS = 256
# A decode step of several requests gathers their keys into one masked product while the longest
# context is at most this long, else attends to each request's keys in turn (the padded gather and
# masked product cost more than a kernel call a request past about this length; the bench's
# decode rows at 4 and 16 streams show it).
GATHER_TOKENS = 128

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


@dataclass(frozen=True, slots=True)
class Keys:
    """Where one request's keys and values lie in the cache: `length` slots from `first` when
    they run in order, else the slots themselves; and where a few long runs of consecutive slots
    hold most of them, those runs (first slot, count) and the slots outside them (`rest`)."""

    length: int
    first: int = 0
    slots: torch.Tensor | None = None  # int64
    runs: tuple[tuple[int, int], ...] = ()
    rest: torch.Tensor | None = None  # int64; None when the runs hold every slot

    def read(self, cache: torch.Tensor) -> torch.Tensor:
        """[length, kv_heads, dim], a view of the cache where the slots run in order."""
        if self.slots is None:
            return cache[self.first : self.first + self.length]
        return cache.index_select(0, self.slots)


def keys_of(row: torch.Tensor) -> Keys:
    """`row`: a request's cache slots, in order of position."""
    length = row.numel()
    if length == 0:
        return Keys(0)
    first = int(row[0])
    starts = [0, *(torch.nonzero(row.diff() != 1).flatten() + 1).tolist()]
    if len(starts) == 1:
        return Keys(length, first)
    ends = [*starts[1:], length]
    long = [(a, b) for a, b in zip(starts, ends, strict=True) if b - a >= RUN_TOKENS]
    if not long or len(long) > MAX_RUNS:
        return Keys(length, first, row.to(torch.int64))
    runs = tuple((int(row[a]), b - a) for a, b in long)
    rest = None
    if sum(b - a for a, b in long) < length:
        outside = torch.ones(length, dtype=torch.bool)
        for a, b in long:
            outside[a:b] = False
        rest = row[outside].to(torch.int64)
    return Keys(length, first, row.to(torch.int64), runs, rest)


@dataclass(frozen=True, slots=True)
class ForwardPlan:
    """Each request's keys, found once for all the layers of one forward."""

    seq_lens: torch.Tensor  # the forward's own tensor: a layer given another falls back
    keys: tuple[Keys, ...]
    gather: Gather | None = None  # a decode step of several requests with short contexts
    paged: Paged | None = None  # a decode step read by the compiled kernel (keys not found)


@dataclass(frozen=True, slots=True)
class Paged:
    """A decode step's reads for the compiled kernel, which follows the slots itself."""

    kernels: native.Kernels
    req_to_token: torch.Tensor  # [pool rows, tokens] int32
    rows: torch.Tensor  # [requests] int64: each request's row
    lengths: torch.Tensor  # [requests] int64

    def plan(self) -> ForwardPlan:
        """The same reads found for torch's kernels."""
        return forward_plan(self.req_to_token, self.rows, self.lengths, decode=True)


@dataclass(frozen=True, slots=True)
class Gather:
    """A decode step's keys gathered in one go: `longest` slots per request (those past a
    request's length masked out)."""

    slots: torch.Tensor  # [requests * longest] int64
    longest: int
    mask: torch.Tensor | None  # [requests, 1, 1, longest] bool; None when all are as long


def forward_plan(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: torch.Tensor | None = None,
    decode: bool = False,
) -> ForwardPlan:
    lengths = (seq_lens if seq_lens_cpu is None else seq_lens_cpu).tolist()
    rows = req_to_token[req_pool_indices]
    keys = tuple(keys_of(rows[index, :length]) for index, length in enumerate(lengths))
    gather = None
    if decode and len(lengths) > 1 and (longest := max(lengths)) <= GATHER_TOKENS:
        mask = None
        if min(lengths) != longest:
            positions = torch.arange(longest, device=seq_lens.device)
            mask = (positions[None, :] < seq_lens[:, None]).view(len(lengths), 1, 1, longest)
        gather = Gather(rows[:, :longest].reshape(-1).to(torch.int64), longest, mask)
    return ForwardPlan(seq_lens, keys, gather)


def create_backend(runner: Any) -> Any:
    """SGLang's attention-registry factory for BACKEND_NAME: its plain-torch backend, with the
    forward's key reads planned (`planned_metadata`) and its prefill and decode attention read
    as planned (`planned_extend`, `planned_decode`); decode steps through the compiled kernel
    where the node compiled one (`native.loaded`) and the cache is of a dtype it reads."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend as base

    planned = type(
        "PlannedTorchNativeAttnBackend",
        (base,),
        {
            "__doc__": create_backend.__doc__,
            "init_forward_metadata": planned_metadata(base.init_forward_metadata),
            "_run_sdpa_forward_extend": planned_extend(base._run_sdpa_forward_extend),
            "_run_sdpa_forward_decode": planned_decode(base._run_sdpa_forward_decode),
        },
    )
    backend = planned(runner)
    pool = backend.token_to_kv_pool
    kernels = native.loaded()
    readable = getattr(pool, "store_dtype", None) in (torch.bfloat16, torch.float32)
    setattr(backend, KERNELS, kernels if readable and pool.dtype == pool.store_dtype else None)
    return backend


def planned_metadata(original: Callable[..., None]) -> Callable[..., None]:
    """`init_forward_metadata` that also plans the forward's key reads."""

    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        original(self, forward_batch)
        mode = forward_batch.forward_mode
        plan = None
        kernels: native.Kernels | None = getattr(self, KERNELS, None)
        if forward_batch.encoder_lens is None and mode.is_decode() and kernels is not None:
            rows = forward_batch.req_pool_indices.to(torch.int64).contiguous()
            lengths = forward_batch.seq_lens.to(torch.int64).contiguous()
            req_to_token = self.req_to_token_pool.req_to_token
            paged = Paged(kernels, req_to_token, rows, lengths)
            plan = ForwardPlan(forward_batch.seq_lens, (), paged=paged)
        elif forward_batch.encoder_lens is None and (mode.is_decode() or mode.is_extend()):
            plan = forward_plan(
                self.req_to_token_pool.req_to_token,
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens_cpu,
                decode=mode.is_decode(),
            )
        setattr(self, PLAN, plan)

    return init_forward_metadata


def _heads_first(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[tokens, heads, dim] -> [1, heads, tokens, dim] in `dtype`."""
    return x.to(dtype).movedim(0, 1).unsqueeze(0)


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix: int,
    scaling: float | None,
) -> torch.Tensor:
    """query [new, heads, dim], the new tokens at positions prefix...; key and value
    [prefix + new, kv_heads, dim]. Returns [new, heads, dim]: causal attention."""
    new, heads, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    if new == 1 and key.dtype == query.dtype:  # one token sees every key: no mask, no causal half
        # Heads that share a key head, side by side: [1, kv_heads, group, dim].
        packed = query.reshape(1, kv_heads, group, dim)
        out = _flash(packed, key.transpose(0, 1)[None], value.transpose(0, 1)[None], scale=scaling)
        return out[0].reshape(1, heads, dim)
    q = query.movedim(0, 1)  # [heads, new, dim]
    # Heads that share a key head, packed along the tokens: [1, kv_heads, group * new, dim].
    packed = q.reshape(kv_heads, group * new, dim).unsqueeze(0)
    k, v = _heads_first(key, query.dtype), _heads_first(value, query.dtype)
    if new == 1:
        out = _flash(packed, k, v, scale=scaling)[0]
        return out.reshape(heads, 1, dim).movedim(1, 0)
    recent_k = k[:, :, prefix:].repeat_interleave(group, dim=1)
    recent_v = v[:, :, prefix:].repeat_interleave(group, dim=1)
    out, lse = _flash(q.unsqueeze(0), recent_k, recent_v, is_causal=True, scale=scaling)[:2]
    if prefix:
        early, early_lse = _flash(packed, k[:, :, :prefix], v[:, :, :prefix], scale=scaling)[:2]
        early = early.reshape(1, heads, new, dim)
        early_lse = early_lse.reshape(1, heads, new)
        total = torch.logaddexp(lse, early_lse)
        out = out * (lse - total).exp().unsqueeze(-1) + early * (early_lse - total).exp().unsqueeze(
            -1
        )
    return out.squeeze(0).movedim(1, 0)


def _usable(plan: ForwardPlan | None, seq_lens: torch.Tensor, **kwargs: Any) -> bool:
    windowed = kwargs["sliding_window_size"] is not None and kwargs["sliding_window_size"] > -1
    odd = kwargs["encoder_lens"] is not None or kwargs["is_cross_attn"] or windowed
    return plan is not None and plan.seq_lens is seq_lens and not odd


def planned_extend(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`_run_sdpa_forward_extend` read as planned; what it does not handle (encoder-decoder
    models, sliding windows, a forward it has no plan for) goes to the original."""

    def run_sdpa_forward_extend(
        self: Any,
        query: torch.Tensor,
        output: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        extend_prefix_lens: torch.Tensor,
        extend_seq_lens: torch.Tensor,
        encoder_lens: torch.Tensor | None = None,
        scaling: float | None = None,
        enable_gqa: bool = False,
        causal: bool = False,
        is_cross_attn: bool = False,
        sliding_window_size: int | None = None,
    ) -> torch.Tensor:
        plan: ForwardPlan | None = getattr(self, PLAN, None)
        fits = _usable(
            plan, seq_lens, encoder_lens=encoder_lens, is_cross_attn=is_cross_attn,
            sliding_window_size=sliding_window_size,
        )  # fmt: skip
        if not fits or not causal or plan is None:
            return original(
                self, query, output, k_cache, v_cache, req_to_token, req_pool_indices,
                seq_lens, extend_prefix_lens, extend_seq_lens, encoder_lens, scaling=scaling,
                enable_gqa=enable_gqa, causal=causal, is_cross_attn=is_cross_attn,
                sliding_window_size=sliding_window_size,
            )  # fmt: skip
        start = 0
        for keys, new in zip(plan.keys, extend_seq_lens.tolist(), strict=True):
            if new:
                key, value = keys.read(k_cache), keys.read(v_cache)
                block = query[start : start + new]
                output[start : start + new] = attend(block, key, value, keys.length - new, scaling)
            start += new
        return output

    return run_sdpa_forward_extend


def planned_decode(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`_run_sdpa_forward_decode` read as planned; what it does not handle goes to the
    original."""

    def run_sdpa_forward_decode(
        self: Any,
        query: torch.Tensor,
        output: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        encoder_lens: torch.Tensor | None = None,
        scaling: float | None = None,
        enable_gqa: bool = False,
        causal: bool = False,
        is_cross_attn: bool = False,
        sliding_window_size: int | None = None,
    ) -> torch.Tensor:
        plan: ForwardPlan | None = getattr(self, PLAN, None)
        fits = _usable(
            plan, seq_lens, encoder_lens=encoder_lens, is_cross_attn=is_cross_attn,
            sliding_window_size=sliding_window_size,
        )  # fmt: skip
        if not fits or plan is None:
            return original(
                self, query, output, k_cache, v_cache, req_to_token, req_pool_indices,
                seq_lens, encoder_lens, scaling=scaling, enable_gqa=enable_gqa, causal=causal,
                is_cross_attn=is_cross_attn, sliding_window_size=sliding_window_size,
            )  # fmt: skip
        output.copy_(planned_step(plan, query, k_cache, v_cache, scaling))
        return output

    return run_sdpa_forward_decode


def decode_attention(
    backend: Any,
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor | None:
    """A decode step's attention for a self-attention layer without a sliding window, its new
    keys already in the cache: query [requests, heads, dim] -> [requests, heads, dim]; None
    where the backend has no plan for this forward."""
    plan: ForwardPlan | None = getattr(backend, PLAN, None)
    if plan is None or plan.seq_lens is not seq_lens:
        return None
    return planned_step(plan, query, k_cache, v_cache, scaling)


def planned_step(
    plan: ForwardPlan,
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """One new token per request, its keys read as `plan` found them."""
    if plan.paged is not None:
        paged = plan.paged
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        out = paged.kernels.decode_attention(
            query, k_cache, v_cache, paged.req_to_token, paged.rows, paged.lengths, scale
        )
        return (
            out if out is not None else planned_step(paged.plan(), query, k_cache, v_cache, scaling)
        )
    if plan.gather is not None:
        gqa = query.shape[1] != k_cache.shape[1]
        return gathered_decode(query, k_cache, v_cache, plan.gather, scaling, gqa)
    outs = []
    for index, keys in enumerate(plan.keys):
        one = query[index : index + 1]
        if keys.runs:
            outs.append(attend_runs(one, k_cache, v_cache, keys.runs, scaling, keys.rest))
        else:
            outs.append(attend(one, keys.read(k_cache), keys.read(v_cache), 0, scaling))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def attend_runs(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    runs: tuple[tuple[int, int], ...],
    scaling: float | None,
    rest: torch.Tensor | None = None,
) -> torch.Tensor:
    """query [1, heads, dim], one new token whose keys lie in `runs` of consecutive cache slots
    and in the slots `rest`: each run attended in place, the rest gathered, the parts joined by
    their log-sum-exp. Returns [1, heads, dim]."""
    _, heads, dim = query.shape
    kv_heads = k_cache.shape[1]
    packed = query.movedim(0, 1).reshape(kv_heads, heads // kv_heads, dim).unsqueeze(0)
    reads = [
        (k_cache[first : first + count], v_cache[first : first + count]) for first, count in runs
    ]
    if rest is not None:
        reads.append((k_cache.index_select(0, rest), v_cache.index_select(0, rest)))
    parts, lses = [], []
    for key, value in reads:
        k, v = _heads_first(key, query.dtype), _heads_first(value, query.dtype)
        out, lse = _flash(packed, k, v, scale=scaling)[:2]
        parts.append(out)
        lses.append(lse)
    lse_all = torch.stack(lses)  # [runs, 1, kv_heads, group]
    weights = (lse_all - torch.logsumexp(lse_all, dim=0)).exp().unsqueeze(-1)
    out = (torch.stack(parts) * weights).sum(dim=0)  # [1, kv_heads, group, dim], in fp32
    return out.reshape(heads, 1, dim).movedim(1, 0).to(query.dtype)


def gathered_decode(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gather: Gather,
    scaling: float | None,
    enable_gqa: bool,
) -> torch.Tensor:
    """query [requests, heads, dim] -> [requests, heads, dim]: one new token per request."""
    requests = query.shape[0]
    shape = (requests, gather.longest, *k_cache.shape[1:])
    key = k_cache.index_select(0, gather.slots).view(shape).transpose(1, 2)
    value = v_cache.index_select(0, gather.slots).view(shape).transpose(1, 2)
    if key.dtype != query.dtype:
        key, value = key.to(query.dtype), value.to(query.dtype)
    out = scaled_dot_product_attention(
        query.unsqueeze(2), key, value, attn_mask=gather.mask, scale=scaling, enable_gqa=enable_gqa
    )
    return out.squeeze(2)
