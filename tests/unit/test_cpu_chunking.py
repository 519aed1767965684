"""Prefill chunks are sized by the time they take: the same FLOPs wherever they fall in a prompt,
fewer while others wait on the CPU, and the rate they are sized by follows the forwards timed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from server.engines.sglang.cpu.chunking import (
    ALONE_MIN_CHUNK,
    ALONE_S,
    MIN_CHUNK,
    STREAMING_S,
    WAITING_S,
    ChunkClock,
    ChunkCost,
    gemm_rate,
    model_cost,
)
from server.torch_compat import ensure_torchvision_loadable

# SmolLM2-135M: 2 x 106M linear weights; 30 layers of 9 heads of 64, QK and PV.
SMOLLM2 = ChunkCost(linear=2 * 106_168_320, attention=30 * 2 * 9 * 128)
GFLOPS = 1e9


class Batch:
    def __init__(self, *rows: tuple[int, int]) -> None:
        self.extend_lens = [new for new, _ in rows]
        self.prefix_lens = [prefix for _, prefix in rows]


def scheduler(running: int = 0, waiting: int = 0) -> Any:
    batch = SimpleNamespace(reqs=[object()] * running)
    return SimpleNamespace(
        running_batch=batch, waiting_queue=[object()] * waiting, chunked_prefill_size=4096
    )


@pytest.mark.parametrize("history", [0, 100, 2_000, 7_000])
@pytest.mark.parametrize("budget_tokens", [32, 150, 1_000])
def test_tokens_within_inverts_flops(history: int, budget_tokens: int) -> None:
    flops = SMOLLM2.flops(budget_tokens, 0)
    tokens = SMOLLM2.tokens_within(flops, history)
    assert SMOLLM2.flops(tokens, history) <= flops < SMOLLM2.flops(tokens + 1, history)


def test_later_chunks_of_a_prompt_are_smaller() -> None:
    clock = ChunkClock(scheduler(), SMOLLM2, 80 * GFLOPS)
    sizes = [clock.tokens(ALONE_S, history) for history in (0, 1_000, 4_000, 7_000)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] < sizes[0] / 2  # attention dominates late in a long prompt
    for history, size in zip((0, 1_000, 4_000, 7_000), sizes, strict=True):
        assert SMOLLM2.flops(size, history) <= 80 * GFLOPS * ALONE_S


def test_chunks_shrink_while_others_wait_on_the_cpu() -> None:
    alone = ChunkClock(scheduler(), SMOLLM2, 80 * GFLOPS).predict(2_000)
    beside_a_stream = ChunkClock(scheduler(running=1), SMOLLM2, 80 * GFLOPS).predict(2_000)
    before_a_first_token = ChunkClock(scheduler(waiting=1), SMOLLM2, 80 * GFLOPS).predict(2_000)
    assert before_a_first_token < beside_a_stream < alone
    assert SMOLLM2.flops(beside_a_stream - 1, 2_000) <= 80 * GFLOPS * STREAMING_S
    assert SMOLLM2.flops(before_a_first_token, 2_000) <= 80 * GFLOPS * WAITING_S


def test_each_running_stream_gets_its_token_of_the_budget() -> None:
    """SGLang's mixed chunk takes one token of the budget per running stream: 59 streams and a
    late chunk of a long prompt must still leave the chunk a positive length."""
    owner = scheduler(running=59)
    clock = ChunkClock(owner, SMOLLM2, 20 * GFLOPS)
    assert clock.predict(7_000) >= 59 + MIN_CHUNK
    assert owner.chunked_prefill_size >= 59 + MIN_CHUNK


def test_a_decode_step_resizes_the_next_prompts_first_chunk() -> None:
    owner = scheduler()
    clock = ChunkClock(owner, SMOLLM2, 80 * GFLOPS)
    alone = owner.chunked_prefill_size
    clock.decoding(30)
    assert owner.chunked_prefill_size == alone + 30


def test_streams_riding_in_the_last_chunk_count_as_company() -> None:
    """Mixed with a chunk, the running streams leave the scheduler's running batch."""
    clock = ChunkClock(scheduler(), SMOLLM2, 80 * GFLOPS)
    alone = clock.predict(2_000)
    clock.observe(Batch((200, 1_800), (1, 40)), SMOLLM2.flops(200, 1_800) / (80 * GFLOPS))
    assert clock.predict(2_000) - 1 < alone
    clock.observe(Batch((200, 2_000)), SMOLLM2.flops(200, 2_000) / (80 * GFLOPS))
    assert clock.predict(2_000) == alone


def test_a_prompts_first_chunk_is_the_streaming_budget() -> None:
    owner = scheduler()
    clock = ChunkClock(owner, SMOLLM2, 80 * GFLOPS)
    assert owner.chunked_prefill_size == clock.tokens(STREAMING_S, 0)


def test_the_rate_follows_the_forwards_timed() -> None:
    owner = scheduler()
    clock = ChunkClock(owner, SMOLLM2, 80 * GFLOPS)
    before = owner.chunked_prefill_size
    for _ in range(20):  # the machine turns out to run at 20 GFLOP/s
        clock.observe(Batch((256, 0)), SMOLLM2.flops(256, 0) / (20 * GFLOPS))
    assert clock.rate == pytest.approx(20 * GFLOPS, rel=0.01)
    assert owner.chunked_prefill_size < before / 3


def test_small_forwards_are_not_timed() -> None:
    clock = ChunkClock(scheduler(), SMOLLM2, 80 * GFLOPS)
    clock.observe(Batch((1, 500), (10, 0)), 0.1)  # a decode row and a short prompt: overhead
    assert clock.rate == 80 * GFLOPS


def test_a_chunk_is_never_below_the_floor() -> None:
    clock = ChunkClock(scheduler(running=1), SMOLLM2, 1 * GFLOPS)
    assert clock.predict(100_000) == MIN_CHUNK + 1


def test_a_prompt_alone_keeps_chunks_its_attention_runs_well_at() -> None:
    """Deep into a long prompt, a second buys a few dozen tokens: alone, the chunk keeps the
    floor's size; beside a stream or a waiting request, the time budget rules."""
    alone = ChunkClock(scheduler(), SMOLLM2, 180 * GFLOPS)
    assert SMOLLM2.tokens_within(180 * GFLOPS * ALONE_S, 30_000) < ALONE_MIN_CHUNK
    assert alone.predict(30_000) == ALONE_MIN_CHUNK
    assert alone.predict(0) > ALONE_MIN_CHUNK  # early in a prompt the budget is larger anyway
    beside_a_stream = ChunkClock(scheduler(running=1), SMOLLM2, 180 * GFLOPS).predict(30_000)
    before_a_first_token = ChunkClock(scheduler(waiting=1), SMOLLM2, 180 * GFLOPS)
    assert beside_a_stream - 1 < ALONE_MIN_CHUNK
    assert before_a_first_token.predict(30_000) < ALONE_MIN_CHUNK


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_starting_rate_is_measured_in_the_models_own_dtype(dtype: torch.dtype) -> None:
    """fp32 on a CPU without native bf16, bf16 on one with it (AVX-512 BF16, AMX): the rate is
    measured on the model's largest layer in its own dtype (a bf16 model once failed to start
    here, its weight multiplied by fp32 rows)."""
    ensure_torchvision_loadable()
    from sglang.srt.layers.linear import ReplicatedLinear

    model = torch.nn.Sequential(
        ReplicatedLinear(64, 128, bias=False, params_dtype=dtype),
        ReplicatedLinear(128, 256, bias=False, params_dtype=dtype),
    )
    assert model_cost(model).linear == 2 * (64 * 128 + 128 * 256)
    assert 0 < gemm_rate(model) < float("inf")
