"""The bench's own arithmetic: percentiles, Server-Timing parsing, tables."""

from __future__ import annotations

from bench.client import Sample, server_timing
from bench.report import Row, markdown
from bench.stats import latency, percentile


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (
        50.0,
        90.0,
        99.0,
    )
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_server_timing_header() -> None:
    assert server_timing("template;dur=0.412, ttft;dur=118.2") == {"template": 0.412, "ttft": 118.2}


def test_tokens_per_second_count_the_gaps_after_the_first_token() -> None:
    sample = Sample(ttft_ms=100.0, e2e_ms=1100.0, output_tokens=11, events=11)
    assert sample.tokens_per_s == 10.0
    assert Sample(100.0, 100.0, 1, 1).tokens_per_s is None
    assert latency([sample])["TTFT p50 ms"] == 100.0


def test_markdown_table_per_scenario() -> None:
    text = markdown(
        [Row("s", "a", {"x": 1.234}), Row("s", "b", {"x": None, "y": 12.0})], {"s": "note"}
    )
    assert text.splitlines() == [
        "### s", "", "note", "", "| case | x | y |", "|---|---|---|",
        "| a | 1.23 | - |", "| b | - | 12.0 |",
    ]  # fmt: skip
