"""How the sglang-remote engine reads SGLang's `/generate` stream in the forms the tests' real
SGLang server is not started in: cumulative text (SGLang's default), an error chunk, and error
statuses. The real server, crash and restart included, is in tests/api/test_remote_engine.py."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from server.canonical import Sampling
from server.config import Settings
from server.engines.base import EngineOutput, EngineRequest, StopKind
from server.engines.sglang.remote import SGLangRemoteEngine
from server.errors import BackendUnavailable, ConstraintRejected, InferError
from server.models.source import ModelSource

REQUEST = EngineRequest("req_" + "0" * 26, [1, 2, 3], Sampling(max_tokens=8))


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def chunk(text: str, tokens: int, finish: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"prompt_tokens": 3, "completion_tokens": tokens, "finish_reason": finish}
    return {"text": text, "meta_info": meta}


def run(
    handler: Callable[[httpx.Request], httpx.Response], *, cumulative: bool
) -> tuple[list[EngineOutput], list[str]]:
    """The outputs of one request, and the paths the engine called."""
    calls: list[str] = []

    def recording(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return handler(request)

    async def main() -> list[EngineOutput]:
        settings = Settings(engine="sglang-remote", engine_url="http://remote:30000")
        engine = SGLangRemoteEngine(settings, ModelSource("/m", "m"))
        transport = httpx.MockTransport(recording)
        engine._client = httpx.AsyncClient(transport=transport, base_url="http://remote:30000")
        engine._cumulative_text = cumulative
        try:
            return [output async for output in engine.generate(REQUEST)]
        finally:
            await engine.close()

    return asyncio.run(main()), calls


def test_cumulative_text_becomes_deltas() -> None:
    body = sse(
        chunk("He", 1), chunk("Hello", 2), chunk("Hello!", 3, {"type": "stop", "matched": 2})
    )
    outputs, calls = run(lambda r: httpx.Response(200, content=body), cumulative=True)
    assert [o.text for o in outputs] == ["He", "llo", "!"]
    assert outputs[-1].finish is not None
    assert outputs[-1].finish.kind is StopKind.END_OF_TURN
    assert calls == ["/generate"]  # finished: nothing to abort


def test_incremental_text_is_taken_as_is() -> None:
    body = sse(chunk("He", 1), chunk("llo", 2, {"type": "length", "length": 2}))
    outputs, _ = run(lambda r: httpx.Response(200, content=body), cumulative=False)
    assert [o.text for o in outputs] == ["He", "llo"]


def test_an_error_chunk_is_mapped_to_the_same_error_as_in_process() -> None:
    error = {"message": "Failed to compile json_schema grammar: bad", "code": 400}
    body = sse(chunk("He", 1), {"error": error})
    with pytest.raises(ConstraintRejected, match="bad"):
        run(lambda r: httpx.Response(200, content=body), cumulative=False)


def test_a_stream_that_ends_without_a_finish_is_a_503() -> None:
    body = sse(chunk("He", 1))
    with pytest.raises(BackendUnavailable) as raised:
        run(lambda r: httpx.Response(200, content=body), cumulative=False)
    assert raised.value.retry_after == 1


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [(503, {}, 5), (500, {}, 5), (429, {"retry-after": "7"}, 7)],
)
def test_error_statuses_are_503_with_retry_after(
    status: int, headers: dict[str, str], retry_after: int
) -> None:
    with pytest.raises(BackendUnavailable) as raised:
        run(lambda r: httpx.Response(status, headers=headers, json={}), cumulative=False)
    assert raised.value.retry_after == retry_after
    assert raised.value.status == 503


def test_a_refusal_by_the_remote_keeps_its_reason() -> None:
    body = {"error": {"message": "sampling_params.top_k must be -1 or >= 1"}}
    with pytest.raises(InferError, match="top_k") as raised:
        run(lambda r: httpx.Response(400, json=body), cumulative=False)
    assert raised.value.status == 400


def test_images_go_to_the_remote_as_image_data() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=sse(chunk("A", 1, {"type": "length", "length": 1})))

    async def main() -> None:
        settings = Settings(engine="sglang-remote", engine_url="http://remote:30000")
        engine = SGLangRemoteEngine(settings, ModelSource("/m", "m"))
        transport = httpx.MockTransport(handler)
        engine._client = httpx.AsyncClient(transport=transport, base_url="http://remote:30000")
        with_image = dataclasses.replace(REQUEST, images=(b"\x89PNG one", b"\x89PNG two"))
        try:
            async for _ in engine.generate(with_image):
                pass
            async for _ in engine.generate(REQUEST):
                pass
        finally:
            await engine.close()

    asyncio.run(main())
    expected = [
        "data:image/png;base64," + base64.b64encode(data).decode()
        for data in (b"\x89PNG one", b"\x89PNG two")
    ]
    assert seen[0]["image_data"] == expected
    assert "image_data" not in seen[1]  # text only: none sent
