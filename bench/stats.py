"""Percentiles and the summary of a set of samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.client import Sample


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile, q in 0..100; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return float(ordered[int(min(rank, len(ordered))) - 1])


def spread(name: str, values: Sequence[float], unit: str = "ms") -> dict[str, float | None]:
    return {f"{name} p{q} {unit}": percentile(values, q) for q in (50, 90, 99)}


def latency(samples: list[Sample]) -> dict[str, Any]:
    """TTFT, inter-token latency, end to end and per-stream tokens/s, at p50/p90/p99."""
    rates = [s.tokens_per_s for s in samples if s.tokens_per_s]
    return {
        **spread("TTFT", [s.ttft_ms for s in samples]),
        **spread("ITL", [gap for s in samples for gap in s.gaps_ms]),
        **spread("e2e", [s.e2e_ms for s in samples]),
        "tok/s/stream p50": percentile(rates, 50),
    }
