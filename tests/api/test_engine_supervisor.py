"""The in-process engine's supervisor, on the session's server with the real SGLang engine (the
restart costs what a server of its own would cost to start, and every later test checks that
the restarted runtime serves):
SGLang's scheduler SIGKILLed under load (as an input-reachable assertion or the OOM killer would
end it). The requests in flight end at once in their protocol's shape, never hang; the node says
it is not ready, restarts the runtime by itself, counts the restart and serves again."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import httpx
import psutil
import pytest

from tests.api.contract import MODEL
from tests.api.conventions import COUNTING, metric, wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess

LONG = {"model": MODEL, "max_tokens": 2000, "messages": COUNTING}  # only the kill ends these


@pytest.fixture
def node(server: ServerProcess) -> ServerProcess:
    return server


def scheduler(node: ServerProcess) -> psutil.Process:
    processes = psutil.Process(node.pid).children(recursive=True)  # forked by its forkserver
    [found] = [process for process in processes if "scheduler" in process.name()]
    return found


def test_a_dead_scheduler_ends_its_requests_and_the_engine_restarts(node: ServerProcess) -> None:
    results: dict[str, Any] = {}
    streaming = threading.Barrier(3)

    def stream(name: str, path: str) -> None:
        with httpx.Client(base_url=node.origin, timeout=120) as client:
            with client.stream("POST", path, json={**LONG, "stream": True}) as response:
                got = []
                for index, item in enumerate(events(response)):
                    if index == 0:
                        streaming.wait()
                    got.append(item)
            results[name] = (response.status_code, got)

    def answer(name: str, path: str) -> None:
        with httpx.Client(base_url=node.origin, timeout=120) as client:
            results[name] = client.post(path, json=LONG)

    threads = [
        threading.Thread(target=stream, args=("messages-stream", "/v1/infer/v1/messages")),
        threading.Thread(target=stream, args=("chat-stream", "/v1/infer/chat/completions")),
        threading.Thread(target=answer, args=("messages", "/v1/infer/v1/messages")),
        threading.Thread(target=answer, args=("chat", "/v1/infer/chat/completions")),
    ]
    for thread in threads:
        thread.start()
    streaming.wait()  # both streams are under way
    with httpx.Client(base_url=node.origin, timeout=30) as http:
        assert wait_for(lambda: http.get("/readyz").json()["running_requests"] == 4)
        os.kill(scheduler(node).pid, signal.SIGKILL)
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a request in flight hangs"
        assert http.get("/readyz").status_code == 503

        status, got = results["messages-stream"]
        assert status == 200
        name, data = got[-1]
        assert name == "error", got[-3:]
        assert data["error"]["type"] == "overloaded_error", data
        assert data["b3os"]["code"] == "infer_backend_unavailable", data
        status, got = results["chat-stream"]
        assert status == 200
        errors = [data["error"] for _, data in got if isinstance(data, dict) and "error" in data]
        assert [error["code"] for error in errors] == ["infer_backend_unavailable"], got[-3:]
        for name in ("messages", "chat"):
            response = results[name]
            assert response.status_code == 503, response.text
            assert int(response.headers["retry-after"]) > 0
        refused = http.post("/v1/infer/v1/messages", json={**LONG, "max_tokens": 4})
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) > 0

        wait_for(lambda: http.get("/readyz").status_code == 200, timeout=180)
        assert metric(http.get("/metrics").text, "b3os_infer_engine_restarts") == 1
        served = http.post("/v1/infer/v1/messages", json={**LONG, "max_tokens": 4})
        assert served.status_code == 200, served.text
        assert metric(http.get("/metrics").text, "b3os_infer_requests_in_flight") == 0
    assert "the model runtime restarted in" in node.log_text()
