"""Prefill chunks sized in time, so that one long prompt never holds the CPU for long: while it
prefills, the streams already running decode in each chunk's forward, and a short request that
arrives is prefilled beside the next chunk (SGLang's mixed chunks and shortest-prefill-first,
set in `args.py`).

A chunk's cost grows with the context it attends over: a token at position h costs the model's
linear layers (fixed) plus attention over h keys, so deep into a long prompt the same number of
new tokens costs several times what it costs at its start (`python -m bench prefill`). So
each chunk gets as many tokens as the machine prefills in a time budget at its position, the
budget set by who else waits on the CPU: a request waiting for its first token (`WAITING_S`: it
is prefilled in the next forward, beside the chunk), streams decoding (`STREAMING_S`: each of
their tokens waits for a whole forward), or no one (`ALONE_S`: larger chunks use the GEMMs
better, and a request that arrives waits for one of them at most; and never fewer than
`ALONE_MIN_CHUNK` tokens, which deep into a long prompt take seconds, as there a second's worth
is a few dozen tokens, whose attention over the whole history runs at a fraction of the rate a
larger block gets, and the rate measured on them would shrink the next chunks further).
The rate is the model's own FLOPs per second, measured at start on its largest layer and then on
every prefill forward the scheduler runs, so the budgets hold on any machine and under any
load."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from server.engines.sglang.cpu import linear

log = logging.getLogger(__name__)

SIZER = "sglang.srt.managers.scheduler.Scheduler.maybe_init_dynamic_chunk_sizer"
RUN_BATCH = "sglang.srt.managers.scheduler.Scheduler.run_batch"
WAITING_S = 0.4  # a request's first token: the chunk in progress, then this one
STREAMING_S = 0.6  # a running stream's gap: this plus the scheduler's own work
ALONE_S = 1.0
# Masked attention (SDPA with a mask) runs at a fraction of the GEMM rate on CPUs, so its FLOPs
# weigh more.
ATTENTION_WEIGHT = 1.6
MIN_CHUNK = 16  # below this a forward's fixed costs dominate
ALONE_MIN_CHUNK = 256  # a prompt prefilling alone: see the module's docstring
MAX_CHUNK = 8192
CALIBRATION_ROWS = 256
# The weight of each new forward's measured rate: high, because consecutive chunks of a prompt
# sit close together, and the rate of the last one is the best guess for the next (attention's
# share, and its efficiency, change along a prompt).
SMOOTHING = 0.5
# Until forwards are timed: the GEMM rate, of which a whole forward (attention, norms, the
# layers' Python, the other processes' turns on the cores) gets about half (measured: 50-60%).
FIRST_GUESS = 0.5
# Forwards of fewer new tokens are not timed: their fixed costs (the scheduler's, the layers'
# Python) would read as a slow machine. Chunks are timed at every size they take, so that the
# rate includes those costs where they matter.
MIN_TIMED_TOKENS = MIN_CHUNK


@dataclass(frozen=True, slots=True)
class ChunkCost:
    """FLOPs of prefilling: `linear` per token, `attention` per token per key it attends to."""

    linear: float
    attention: float

    def flops(self, tokens: int, history: int) -> float:
        # The chunk's token j attends to history + j + 1 keys.
        keys = tokens * history + tokens * (tokens + 1) / 2
        return tokens * self.linear + keys * self.attention

    def tokens_within(self, flops: float, history: int) -> int:
        """The most tokens whose prefill after `history` tokens costs at most `flops`."""
        a = self.attention / 2
        b = self.linear + self.attention * (history + 0.5)
        if a == 0:
            return int(flops // b)
        return int((-b + math.sqrt(b * b + 4 * a * flops)) / (2 * a))


class ChunkClock:
    """The scheduler's chunk sizer (SGLang's `dynamic_chunk_sizer` interface: `predict`), and
    the rate it sizes by, kept up to date from the forwards it times."""

    def __init__(self, scheduler: Any, cost: ChunkCost, rate: float) -> None:
        self._scheduler = scheduler
        self.cost = cost
        self.rate = rate  # FLOP/s
        self._stream_rows = 0  # running streams' next tokens in the last prefill forward
        self._resize_first_chunks()

    def predict(self, history_len: int) -> int:
        """The token budget of the next forward, for the chunk of a prompt whose first
        `history_len` tokens are computed. Mixed with a chunk, each running stream takes one
        token of it (SGLang's PrefillAdder), so they come on top: a budget below them would
        leave the chunk a negative length."""
        seconds, floor = self._budget()
        return self.tokens(seconds, history_len, floor) + self._streams()

    def tokens(self, seconds: float, history: int, floor: int = MIN_CHUNK) -> int:
        within = self.cost.tokens_within(self.rate * seconds, history)
        return max(floor, min(MAX_CHUNK, within))

    def observe(self, batch: Any, seconds: float) -> None:
        """A prefill (or mixed) forward took `seconds`."""
        rows = list(zip(batch.extend_lens or (), batch.prefix_lens or (), strict=False))
        # Mixed with a chunk, each running stream is a row of one new token. (The scheduler's
        # own running batch is empty while they ride in the chunk's forward.)
        self._stream_rows = sum(new == 1 for new, _ in rows)
        if sum(new for new, _ in rows) < MIN_TIMED_TOKENS or seconds <= 0:
            return
        flops = sum(self.cost.flops(new, prefix) for new, prefix in rows)
        self.rate += SMOOTHING * (flops / seconds - self.rate)
        self._resize_first_chunks()

    def decoding(self, streams: int) -> None:
        """A decode step of `streams` requests is about to run."""
        self._stream_rows = streams
        self._resize_first_chunks()

    def _resize_first_chunks(self) -> None:
        # A prompt's first chunk is SGLang's static size: the streaming budget at its start.
        self._scheduler.chunked_prefill_size = self.tokens(STREAMING_S, 0) + self._streams()

    def _streams(self) -> int:
        running = self._scheduler.running_batch
        return max(self._stream_rows, 0 if running is None else len(running.reqs))

    def _budget(self) -> tuple[float, int]:
        """The next chunk's time budget and its fewest tokens."""
        if self._scheduler.waiting_queue:
            return WAITING_S, MIN_CHUNK
        return (STREAMING_S, MIN_CHUNK) if self._streams() else (ALONE_S, ALONE_MIN_CHUNK)


def model_cost(model: torch.nn.Module) -> ChunkCost:
    """From the model itself: every linear layer's weights, every attention layer's heads."""
    from sglang.srt.layers.linear import LinearBase
    from sglang.srt.layers.radix_attention import RadixAttention

    linear = attention = 0.0
    for module in model.modules():
        if isinstance(module, LinearBase):
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.Tensor):
                linear += 2 * weight.numel()
        elif isinstance(module, RadixAttention):
            attention += 2 * module.tp_q_head_num * (module.qk_head_dim + module.v_head_dim)
    return ChunkCost(linear, attention * ATTENTION_WEIGHT)


def gemm_rate(model: torch.nn.Module) -> float:
    """FLOP/s of the model's largest linear layer over a prefill-sized block of rows, in the
    weight's own dtype (fp32 here, bf16 on a CPU that computes bf16), as forwards compute it
    (`linear.matmul`): the best of a few runs, as the other processes starting beside it take
    turns on the cores."""
    from sglang.srt.layers.linear import LinearBase

    layers = [module for module in model.modules() if isinstance(module, LinearBase)]
    layer = max(layers, key=lambda module: module.weight.numel())
    rows = torch.randn(CALIBRATION_ROWS, layer.weight.shape[1], dtype=layer.weight.dtype)
    fastest = math.inf
    for _ in range(5):
        started = time.perf_counter()
        if linear.matmul(layer, rows, None) is None:
            F.linear(rows, layer.weight)
        fastest = min(fastest, time.perf_counter() - started)
    return 2 * CALIBRATION_ROWS * layer.weight.numel() / fastest


def clocked_chunks(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """The replacement for the scheduler's `maybe_init_dynamic_chunk_sizer` on a CPU: SGLang's
    own sizer (pipeline parallelism only) where it has one, else chunks sized in time."""

    def maybe_init_dynamic_chunk_sizer(self: Any) -> None:
        original(self)
        if self.dynamic_chunk_sizer is not None or self.chunked_prefill_size is None:
            return
        model = self.tp_worker.model_runner.model
        cost = model_cost(model)
        if cost.linear == 0:
            return  # not a model of linear layers this knows
        clock = ChunkClock(self, cost, FIRST_GUESS * gemm_rate(model))
        self.dynamic_chunk_sizer = clock
        log.info(
            "prefill chunks sized in time: %d tokens at the start of a prompt (%.0f GFLOP/s)",
            self.chunked_prefill_size,
            clock.rate / 1e9,
        )

    return maybe_init_dynamic_chunk_sizer


def timed_forwards(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement for the scheduler's `run_batch`: prefill forwards are timed for the
    chunk clock (on a CPU the forward runs within the call), decode steps counted."""

    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        clock = getattr(self, "dynamic_chunk_sizer", None)
        if not isinstance(clock, ChunkClock):
            return original(self, batch, *args, **kwargs)
        if not batch.forward_mode.is_extend():
            clock.decoding(batch.batch_size())
            return original(self, batch, *args, **kwargs)
        started = time.perf_counter()
        result = original(self, batch, *args, **kwargs)
        clock.observe(batch, time.perf_counter() - started)
        return result

    return run_batch
