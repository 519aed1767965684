"""The model's tool-call syntax never comes back as text, wherever max_tokens cuts a call, on both
protocols, streamed and not: max_tokens swept over a call's first 30 tokens (a call to the tool
here is about 25; the requests of a protocol's sweeps run at once: the runtime batches them).
Under `any`/`required` and a named choice no text block appears at all, and a named choice is
that one call, however long the answer may run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.api.contract import CHAT_WEATHER_TOOL, WEATHER_TOOL
from tests.api.sse import events

SWEEP = range(1, 31)
# The model's own tool syntax (the ChatML family's: grammars/chatml.toml), in any piece of it.
MARKUP = ("<tool_call", "tool_call>", '{"name"', '"arguments"')
ASK = [{"role": "user", "content": "What is the weather in Oslo? Use the tool."}]


def messages_answer(http: httpx.Client, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(texts, tool names) of a Messages answer, streamed or not."""
    if not body.get("stream"):
        response = http.post("/v1/infer/v1/messages", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        texts = [b["text"] for b in answer["content"] if b["type"] == "text"]
        return texts, [b["name"] for b in answer["content"] if b["type"] == "tool_use"]
    texts, names = [], []
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        assert response.status_code == 200, response.read().decode()
        for _, data in events(response):
            if data.get("type") == "content_block_start":
                block = data["content_block"]
                if block["type"] == "text":
                    texts.append("")
                elif block["type"] == "tool_use":
                    names.append(block["name"])
            elif data.get("type") == "content_block_delta" and "text" in data["delta"]:
                texts[-1] += data["delta"]["text"]
    return texts, names


def chat_answer(http: httpx.Client, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(texts, tool names) of a chat answer, streamed or not."""
    if not body.get("stream"):
        response = http.post("/v1/infer/chat/completions", json=body)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]
        content = message["message"].get("content")
        calls = message["message"].get("tool_calls") or []
        return ([content] if content else []), [c["function"]["name"] for c in calls]
    text, names = "", []
    with http.stream("POST", "/v1/infer/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read().decode()
        for _, data in events(response):
            if data == "[DONE]" or not data.get("choices"):
                continue
            delta = data["choices"][0]["delta"]
            text += delta.get("content") or ""
            names += [
                c["function"]["name"]
                for c in delta.get("tool_calls") or []
                if "function" in c and c["function"].get("name")
            ]
    return ([text] if text else []), names


def sweep(server_origin: str, answer: Any, bodies: list[dict[str, Any]]) -> list[Any]:
    def one(body: dict[str, Any]) -> Any:
        with httpx.Client(base_url=server_origin, timeout=600) as http:
            return answer(http, body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(one, bodies))


CHOICES = {
    "messages": [("auto", {"type": "auto"}), ("any", {"type": "any"}),
                 ("named", {"type": "tool", "name": "get_weather"})],
    "chat": [("auto", "auto"), ("required", "required"),
             ("named", {"type": "function", "function": {"name": "get_weather"}})],
}  # fmt: skip


# Calls only, where no text may appear either (any/required streamed and not, named as JSON):
# with auto a cut call takes the same way through the parser.
SWEPT = {
    "messages": [("any", False), ("any", True), ("named", False)],
    "chat": [("required", False), ("required", True), ("named", False)],
}


@pytest.mark.parametrize("protocol", list(SWEPT))
def test_no_cut_of_a_call_is_ever_text(server: Any, model: str, protocol: str) -> None:
    tool = WEATHER_TOOL if protocol == "messages" else CHAT_WEATHER_TOOL
    answer = messages_answer if protocol == "messages" else chat_answer
    cases = [(choice, stream, size) for choice, stream in SWEPT[protocol] for size in SWEEP]
    bodies = [
        {"model": model, "max_tokens": size, "temperature": 0, "messages": ASK,
         "tools": [tool], "tool_choice": dict(CHOICES[protocol])[choice], "stream": stream}
        for choice, stream, size in cases
    ]  # fmt: skip
    for case, (texts, calls) in zip(cases, sweep(server.origin, answer, bodies), strict=True):
        leaked = [t for t in texts if any(piece in t for piece in MARKUP)]
        assert not leaked, (case, texts)
        assert not texts, (case, texts)  # calls only: no text block at all
        if case[0] == "named":
            assert len(calls) <= 1, (case, calls)


@pytest.mark.parametrize("protocol", ["messages", "chat"])
def test_a_named_choice_is_that_call_once_with_parallel_calls_on(
    server: Any, model: str, protocol: str
) -> None:
    """Room for several calls, and parallel calls left on: still exactly one (three sampled
    answers, at once)."""
    tool = WEATHER_TOOL if protocol == "messages" else CHAT_WEATHER_TOOL
    named = CHOICES[protocol][2][1]
    body = {"model": model, "max_tokens": 400, "temperature": 1.0, "messages": ASK,
            "tools": [tool], "tool_choice": named}  # fmt: skip
    answer = messages_answer if protocol == "messages" else chat_answer
    bodies = [{**body, **({"seed": seed} if protocol == "chat" else {})} for seed in range(3)]
    for texts, calls in sweep(server.origin, answer, bodies):
        assert calls == ["get_weather"]
        assert not texts
