"""How the node starts SGLang on a CPU, and what its scheduler's queue bound answers."""

from __future__ import annotations

import pytest

from server.canonical import Sampling
from server.config import Settings
from server.engines.base import EngineRequest
from server.engines.sglang import args, cpu_compat
from server.engines.sglang.outputs import QUEUE_BOUND_MESSAGE, finish_of
from server.errors import BackendUnavailable
from server.models.source import ModelSource

SOURCE = ModelSource("/models/m", "m")
REQUEST = EngineRequest("req_1", [1, 2, 3], Sampling(max_tokens=4))


@pytest.mark.parametrize("native_bf16", [False, True])
def test_a_cpu_computes_in_fp32_unless_it_has_native_bf16(
    monkeypatch: pytest.MonkeyPatch, native_bf16: bool
) -> None:
    monkeypatch.setattr(cpu_compat, "cpu_computes_bf16", lambda: native_bf16)
    built = args.server_args(Settings(device="cpu"), SOURCE)
    if native_bf16:
        assert "dtype" not in built and built["max_total_tokens"] == 65536
    else:
        # an fp32 cache of half the tokens: the same bytes
        assert built["dtype"] == "float32" and built["max_total_tokens"] == 32768
    # a long prompt yields to the others on every CPU
    assert built["enable_mixed_chunk"] is True
    assert built["schedule_policy"] == "shortest-prefill-first"


def test_a_gpu_keeps_sglangs_own_choices() -> None:
    built = args.server_args(Settings(device="cuda"), SOURCE)
    assert not {"dtype", "max_total_tokens", "enable_mixed_chunk", "schedule_policy"} & set(built)


def test_the_queue_bound_is_the_schedulers() -> None:
    assert args.runtime_env(Settings(max_queue_wait=30)) == {"SGLANG_REQ_WAITING_TIMEOUT": "30"}
    assert args.runtime_env(Settings(max_queue_wait=0)) == {}


def test_a_request_dropped_at_the_queue_bound_is_told_so_without_retry_after() -> None:
    reason = {"type": "abort", "status_code": 503, "message": QUEUE_BOUND_MESSAGE}
    meta = {"finish_reason": reason, "prompt_tokens": 3, "completion_tokens": 0}
    with pytest.raises(BackendUnavailable) as raised:
        finish_of(meta, REQUEST)
    assert raised.value.retry_after is None
    assert "without being started" in raised.value.message


def test_another_abort_is_retried_shortly() -> None:
    reason = {"type": "abort", "status_code": 500, "message": "scheduler reset"}
    meta = {"finish_reason": reason, "prompt_tokens": 3, "completion_tokens": 0}
    with pytest.raises(BackendUnavailable) as raised:
        finish_of(meta, REQUEST)
    assert raised.value.retry_after == 1
