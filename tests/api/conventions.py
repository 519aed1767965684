"""What every response of the contract carries, checked the same way everywhere."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

REQUEST_ID = re.compile(r"^req_[0-9a-hjkmnp-tv-z]{26}$")
TIMING_ENTRY = re.compile(r"^[a-z_]+;dur=\d+(\.\d+)?$")

# A greedy request whose answer is long and predictable in shape: the model continues counting.
COUNTING = [
    {"role": "user", "content": "Count from 1 to 500, separated by commas."},
    {"role": "assistant", "content": "1, 2, 3, 4, 5"},
]


def server_timing(response: httpx.Response) -> dict[str, float]:
    entries = [e.strip() for e in response.headers["server-timing"].split(",")]
    assert all(TIMING_ENTRY.match(e) for e in entries), entries
    return {name: float(dur.removeprefix("dur=")) for name, dur in (e.split(";") for e in entries)}


def assert_ids(response: httpx.Response) -> str:
    request_id = response.headers["x-request-id"]
    assert REQUEST_ID.match(request_id)
    assert response.headers["request-id"] == request_id
    return request_id


def assert_b3os(extension: dict[str, Any], *, streamed: bool) -> None:
    assert extension["route"] == "local"
    assert extension["node"] == "test-node"
    timing = extension["timing"]
    phase = "ttft_ms" if streamed else "model_ms"
    assert set(timing) == {phase, "total_ms"}
    assert 0 < timing[phase] <= timing["total_ms"]


def metric(exposition: str, name: str, **labels: str) -> float:
    """A sample's value in a Prometheus text exposition (a /metrics body): 0 where its family is
    declared but holds no such sample yet (a labelled counter before its first count); an error
    where no family declares it."""
    families = list(text_string_to_metric_families(exposition))
    for family in families:
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    assert any(name.startswith(family.name) for family in families), f"no metric {name}"
    return 0.0


def wait_for(condition: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Polls until `condition()` is truthy (and returns it), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
