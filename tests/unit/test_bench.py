"""The bench's own arithmetic: percentiles, Server-Timing parsing, usage, tables; its recorded
sessions."""

from __future__ import annotations

from typing import Any

import pytest

from bench import client, machine, sessions
from bench.client import Sample, server_timing
from bench.machine import Machine
from bench.report import Row, markdown
from bench.stats import latency, percentile
from server.config import Settings
from server.models.source import ModelSource


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


@pytest.mark.parametrize(
    ("event", "prompt", "cached"),
    [
        # Messages: Anthropic counts the cached tokens apart from input_tokens.
        ({"type": "message_delta", "usage": {"input_tokens": 3, "cache_read_input_tokens": 90,
          "cache_creation_input_tokens": 0, "output_tokens": 2}}, 93, 90),
        ({"choices": [], "usage": {"prompt_tokens": 93, "completion_tokens": 2,
          "prompt_tokens_details": {"cached_tokens": 90}}}, 93, 90),
        ({"type": "response.completed", "response": {"usage": {"input_tokens": 93,
          "input_tokens_details": {"cached_tokens": 90}, "output_tokens": 2}}}, 93, 90),
        ({"choices": [], "usage": {"prompt_tokens": 93, "completion_tokens": 2}}, 93, None),
    ],
)  # fmt: skip
def test_the_prompt_and_its_cached_share_are_read_from_each_apis_usage(
    event: dict[str, Any], prompt: int, cached: int | None
) -> None:
    assert client._prompt_tokens(event) == prompt
    assert client._cached_tokens(event) == cached


def test_every_recorded_session_loads_with_its_requests_in_turn_order() -> None:
    for agent in sessions.AGENTS:
        session = sessions.load(agent)
        assert session.agent == agent and session.requests, agent
        turns = [request.turn for request in session.requests]
        assert turns == sorted(turns) and set(turns) == {1, 2, 3}, (agent, turns)
        assert {request.protocol for request in session.requests} <= {
            "messages",
            "chat",
            "responses",
        }


@pytest.mark.parametrize("native_bf16", [True, False], ids=["bf16", "fp32"])
def test_the_gemm_rate_is_measured_in_the_dtype_the_node_computes_in(
    monkeypatch: pytest.MonkeyPatch, native_bf16: bool
) -> None:
    """A share of an fp32 rate read above 1 on a CPU that computes the model in bf16."""
    from server.engines.sglang import args, cpu_compat

    monkeypatch.setattr(cpu_compat, "cpu_computes_bf16", lambda: native_bf16)
    built = args.server_args(Settings(device="cpu"), ModelSource("/models/m", "m"))
    node_dtype = built.get("dtype")
    measured = machine.measure()
    assert measured.gemm_dtype == ("bf16" if node_dtype is None else "fp32")
    assert measured.rates().startswith(f"{measured.gemm_dtype} GEMM ")


def test_a_record_made_before_the_dtype_was_chosen_reads_as_fp32() -> None:
    fields: dict[str, Any] = {"cpu": "x", "num_cores": 2, "vector": ["avx2"], "memory_gib": 24.0,
                              "gpu": None, "gemm_gflops": 395.0, "memory_gb_s": 32.3}  # fmt: skip
    assert Machine(**fields).rates() == "fp32 GEMM 395 GFLOP/s, memory bandwidth 32.3 GB/s"
