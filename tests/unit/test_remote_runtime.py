"""What the sglang-remote engine learns of the runtime behind its URL, and how it talks to it, for
the topologies the tests cannot start for real: workers that disagree (windows, seeding, models),
a router whose workers this server cannot reach, error statuses. A fake SGLang (httpx's mock
transport) answers; the real router topology is in tests/api/test_router.py."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pytest

from server.canonical import Sampling
from server.config import Settings
from server.engines.base import Constraint, EngineOutput, EngineRequest
from server.engines.sglang.remote import SGLangRemoteEngine
from server.errors import BackendUnavailable, InferError
from server.models.embedded import ModelSetupError

ROUTER = "http://router:30000"
REQUEST = EngineRequest("req_" + "0" * 26, [1, 2, 3], Sampling(max_tokens=8))
T = TypeVar("T")


class Tokenizer:
    """Renders a chat as its JSON and tokenizes it as code points: enough to compare."""

    chat_template = "{{ messages }}"

    def __init__(self, flavour: str = "") -> None:
        self.flavour = flavour

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> str:
        return self.flavour + json.dumps(conversation)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(char) for char in text]

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(map(chr, ids))


@dataclass
class FakeWorker:
    context: int = 4096
    max_input: int = 4090
    seeded: bool = True
    tokenizer: Tokenizer = field(default_factory=Tokenizer)
    up: bool = True
    generates: bool = True
    breaks: int = 0  # health checks that fail with an error that is not httpx's


@dataclass
class FakeRuntime:
    """A router at ROUTER listing `workers` (or, with `router` off, one server at ROUTER)."""

    workers: dict[str, FakeWorker]
    router: bool = True
    router_says_healthy: bool = True
    carries: bool = False  # sglang-router 0.3.2 drops structural_tag and logit_bias
    generate: Callable[[httpx.Request], httpx.Response] | None = None
    calls: list[str] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        path = request.url.path
        self.calls.append(origin + path)
        if path == "/generate":
            body = json.loads(request.content)
            if not body.get("stream"):  # the engine's probes at start
                return httpx.Response(200, json={"text": self._forced(body["sampling_params"])})
            assert self.generate is not None
            return self.generate(request)
        if origin == ROUTER and self.router:
            if path == "/workers":
                listed = [{"url": u, "is_healthy": self.router_says_healthy} for u in self.workers]
                return httpx.Response(200, json={"workers": listed})
            return httpx.Response(404)
        worker = self.workers.get(origin)
        if worker is None or not worker.up:
            raise httpx.ConnectError("connection refused", request=request)
        return _answer(worker, path, request)

    def _forced(self, params: dict[str, Any]) -> str:
        """What a constrained one-token answer is, with the constraint carried or dropped."""
        carried = self.carries or not self.router
        if "structural_tag" in params:
            return "ok" if carried else "Hello"
        banned = params.get("logit_bias", {}) if carried else {}
        return "B" if str(ord("A")) in banned else "A"


def _answer(worker: FakeWorker, path: str, request: httpx.Request) -> httpx.Response:
    if path == "/server_info":
        info = {
            "max_req_input_len": worker.max_input,
            "context_length": None,
            "enable_deterministic_inference": worker.seeded,
            "incremental_streaming_output": True,
            "version": "0.5.23",
        }
        return httpx.Response(200, json=info)
    if path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": worker.context}]})
    if path == "/health_generate":
        if worker.breaks:
            worker.breaks -= 1
            raise RuntimeError("a fault outside httpx's own errors")
        return httpx.Response(200 if worker.generates else 503)
    if path == "/v1/tokenize":
        body = json.loads(request.content)
        text = worker.tokenizer.apply_chat_template(body["messages"])
        return httpx.Response(200, json={"tokens": worker.tokenizer.encode(text)})
    if path == "/v1/loads":
        return httpx.Response(200, json={"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 1}]})
    if path == "/abort_request":
        return httpx.Response(200)
    return httpx.Response(404)


def two_workers(**second: Any) -> dict[str, FakeWorker]:
    return {"http://w1:30001": FakeWorker(), "http://w2:30002": FakeWorker(**second)}


def with_engine(
    runtime: FakeRuntime,
    use: Callable[[SGLangRemoteEngine], Awaitable[T]],
    **settings: Any,
) -> T:
    """`use` on an engine started against `runtime`, closed afterwards."""

    async def main() -> T:
        engine = SGLangRemoteEngine(
            Settings(engine="sglang-remote", engine_url=ROUTER, **settings),
            Tokenizer(),
            transport=httpx.MockTransport(runtime),
        )
        await asyncio.wait_for(engine.start(), timeout=30)
        try:
            return await use(engine)
        finally:
            await engine.close()

    return asyncio.run(main())


async def nothing(engine: SGLangRemoteEngine) -> SGLangRemoteEngine:
    return engine


def test_the_limits_are_the_narrowest_workers() -> None:
    engine = with_engine(FakeRuntime(two_workers(context=2048, max_input=2042)), nothing)
    assert engine.limits.context_length == 2048
    assert engine.limits.max_prompt_tokens == 2041
    assert "seed" not in engine.unsupported_sampling


def test_context_length_may_narrow_the_workers_window_not_widen_it() -> None:
    narrowed = with_engine(FakeRuntime(two_workers()), nothing, context_length=1024)
    assert narrowed.limits.context_length == 1024
    assert narrowed.limits.max_prompt_tokens < 1024
    with pytest.raises(ModelSetupError, match="beyond the 4096 tokens"):
        with_engine(FakeRuntime(two_workers()), nothing, context_length=8192)


def test_one_unseeded_worker_means_seeds_are_refused() -> None:
    assert (
        "seed" in with_engine(FakeRuntime(two_workers(seeded=False)), nothing).unsupported_sampling
    )
    with pytest.raises(ModelSetupError, match="--enable-deterministic-inference"):
        with_engine(FakeRuntime(two_workers(seeded=False)), nothing, deterministic_sampling=True)
    off = with_engine(FakeRuntime(two_workers()), nothing, deterministic_sampling=False)
    assert "seed" in off.unsupported_sampling


def test_a_worker_on_another_model_is_refused_at_start() -> None:
    runtime = FakeRuntime(two_workers(tokenizer=Tokenizer(flavour="<other>")))
    with pytest.raises(ModelSetupError, match="w2:30002 renders and tokenizes chats unlike"):
        with_engine(runtime, nothing)


def unreachable() -> FakeRuntime:
    workers = two_workers()
    for worker in workers.values():
        worker.up = False
    return FakeRuntime(workers)


def test_workers_out_of_reach_need_the_window_from_the_operator() -> None:
    with pytest.raises(ModelSetupError, match="give --context-length"):
        with_engine(unreachable(), nothing)
    engine = with_engine(unreachable(), nothing, context_length=3000)
    assert engine.limits.context_length == 3000
    assert "seed" in engine.unsupported_sampling  # nothing said the workers seed
    seeded = with_engine(unreachable(), nothing, context_length=3000, deterministic_sampling=True)
    assert "seed" not in seeded.unsupported_sampling


def test_behind_a_router_out_of_reach_readiness_is_the_routers_view() -> None:
    runtime = unreachable()

    async def use(engine: SGLangRemoteEngine) -> tuple[bool, bool, Any]:
        assert engine._topology is not None
        before = await engine._topology.healthy()
        runtime.router_says_healthy = False
        after = await engine._topology.healthy()
        return before, after, await engine.load()

    before, after, load = with_engine(runtime, use, context_length=3000)
    assert before and not after
    assert load is None  # the workers' load cannot be asked


def test_readiness_is_any_worker_generating_and_load_their_sum() -> None:
    runtime = FakeRuntime(two_workers(generates=False))

    async def use(engine: SGLangRemoteEngine) -> tuple[bool, bool, Any]:
        assert engine._topology is not None
        one = await engine._topology.healthy()
        runtime.workers["http://w1:30001"].up = False
        none = await engine._topology.healthy()
        runtime.workers["http://w1:30001"].up = True
        return one, none, await engine.load()

    one, none, load = with_engine(runtime, use)
    assert one and not none
    assert (load.running, load.waiting) == (4, 2)


def test_a_health_check_that_breaks_does_not_end_the_watch() -> None:
    """A check that fails with any error counts as not healthy; the next one still runs, so
    readiness comes back once the runtime answers."""
    runtime = FakeRuntime({ROUTER: FakeWorker()}, router=False)

    async def use(engine: SGLangRemoteEngine) -> tuple[bool, bool]:
        runtime.workers[ROUTER].breaks = 2
        engine._lost("the remote went away")  # as a failed request reports it
        lost = engine.is_ready
        for _ in range(400):  # 20 s at most; the watch checks every second while not ready
            if engine.is_ready:
                break
            await asyncio.sleep(0.05)
        return lost, engine.is_ready and runtime.workers[ROUTER].breaks == 0

    lost, recovered = with_engine(runtime, use)
    assert not lost and recovered


def sse(*chunks: dict[str, Any]) -> bytes:
    lines = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return lines + b"data: [DONE]\n\n"


def chunk(text: str, ids: list[int], finish: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"prompt_tokens": 3, "completion_tokens": len(ids), "finish_reason": finish}
    return {"text": text, "output_ids": ids, "meta_info": meta}


def generated(runtime: FakeRuntime, request: EngineRequest = REQUEST, **settings: Any) -> Any:
    async def use(engine: SGLangRemoteEngine) -> list[EngineOutput]:
        return [output async for output in engine.generate(request)]  # aborts land at close

    return with_engine(runtime, use, **settings)


def test_what_the_router_drops_is_worked_around_or_refused() -> None:
    dropping = with_engine(FakeRuntime(two_workers()), nothing)
    assert dropping._ebnf is not None  # grammars go as EBNF
    assert "logit_bias" in dropping.unsupported_sampling
    carrying = with_engine(FakeRuntime(two_workers(), carries=True), nothing)
    assert carrying._ebnf is None
    assert "logit_bias" not in carrying.unsupported_sampling
    direct = with_engine(FakeRuntime({ROUTER: FakeWorker()}, router=False), nothing)
    assert direct._ebnf is None
    assert not direct.unsupported_sampling


def test_a_grammar_goes_through_a_dropping_router_as_ebnf() -> None:
    seen: list[dict[str, Any]] = []

    def generate(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content)["sampling_params"])
        return httpx.Response(200, content=sse(chunk("{}", [1], {"type": "length", "length": 1})))

    tag = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "x"}})
    constrained = dataclasses.replace(REQUEST, constraint=Constraint("structural_tag", tag))
    generated(FakeRuntime(two_workers(), generate=generate), constrained)
    assert "structural_tag" not in seen[0]
    assert seen[0]["ebnf"] == 'const_string ::= (("x"))\nroot ::= ((const_string))\n'


def test_a_client_that_leaves_is_aborted_at_each_worker() -> None:
    runtime = FakeRuntime(two_workers(), generate=lambda r: httpx.Response(200, content=sse()))
    with pytest.raises(BackendUnavailable):  # the stream ended without a finish
        generated(runtime)
    aborts = [call for call in runtime.calls if call.endswith("/abort_request")]
    assert sorted(aborts) == ["http://w1:30001/abort_request", "http://w2:30002/abort_request"]


def test_a_finished_answer_aborts_nothing() -> None:
    body = sse(chunk("He", [1]), chunk("Hello", [1, 2], {"type": "length", "length": 2}))
    runtime = FakeRuntime(two_workers(), generate=lambda r: httpx.Response(200, content=body))
    assert [o.text for o in generated(runtime)] == ["He", "llo"]  # cumulative, told by the stream
    assert not [call for call in runtime.calls if call.endswith("/abort_request")]


@pytest.mark.parametrize(
    ("router", "status", "headers", "retry_after"),
    [
        (True, 500, {}, 1),  # one worker failed: the router moves on
        (False, 500, {}, 5),  # the one server is down
        (False, 503, {}, 5),
        (True, 429, {"retry-after": "7"}, 7),
    ],
)
def test_error_statuses_are_503_with_retry_after(
    router: bool, status: int, headers: dict[str, str], retry_after: int
) -> None:
    workers = two_workers() if router else {ROUTER: FakeWorker()}
    runtime = FakeRuntime(workers, router=router)
    runtime.generate = lambda r: httpx.Response(status, headers=headers, json={})
    with pytest.raises(BackendUnavailable) as raised:
        generated(runtime)
    assert raised.value.retry_after == retry_after
    assert raised.value.status == 503


def test_a_refusal_by_the_runtime_keeps_its_reason() -> None:
    body = {"error": {"message": "sampling_params.top_k must be -1 or >= 1"}}
    runtime = FakeRuntime(two_workers(), generate=lambda r: httpx.Response(400, json=body))
    with pytest.raises(InferError, match="top_k") as raised:
        generated(runtime)
    assert raised.value.status == 400


def test_images_go_to_the_runtime_as_image_data() -> None:
    seen: list[dict[str, Any]] = []

    def generate(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=sse(chunk("A", [1], {"type": "length", "length": 1})))

    runtime = FakeRuntime(two_workers(), generate=generate)
    generated(runtime, dataclasses.replace(REQUEST, images=(b"\x89PNG one", b"\x89PNG two")))
    generated(runtime)
    expected = [
        "data:image/png;base64," + base64.b64encode(data).decode()
        for data in (b"\x89PNG one", b"\x89PNG two")
    ]
    assert seen[0]["image_data"] == expected
    assert "image_data" not in seen[1]  # text only: none sent
