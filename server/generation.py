"""One request's way through the model, shared by every protocol: render the prompt, check it
fits, build its constraint, run the engine, parse its text into canonical events."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import time
from collections.abc import AsyncGenerator, Awaitable, Iterator
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from grammars import Reasoning
from grammars.constraints import constraint_for, explain
from grammars.prompt import PromptRenderer
from grammars.reading import Calls, Reader
from server.canonical import (
    Event,
    Finish,
    FinishReason,
    GenerateRequest,
    Logprobs,
    ThinkingEnd,
    ThinkingMode,
    TokenLogprob,
    Usage,
)
from server.engines.base import (
    Engine,
    EngineFinish,
    EngineLogprob,
    EngineRequest,
    StopKind,
)
from server.errors import (
    ConstraintRejected,
    ContextLengthExceeded,
    InferError,
    InternalError,
    InvalidRequest,
    UnsupportedParameter,
)
from server.ids import tool_call_id
from server.images.decode import TOKENS_PER_IMAGE, DecodedImage
from server.models.card import ModelCard
from server.requestlog import RequestRecord
from server.timing import Timing
from server.tokenizer import Prompt, TokenBytes

_FINISH_REASONS = {
    StopKind.END_OF_TURN: FinishReason.END_TURN,
    StopKind.STOP_STRING: FinishReason.STOP_SEQUENCE,
    StopKind.LENGTH: FinishReason.MAX_TOKENS,
}


class Tracker(Protocol):
    """Hears of an answer's outputs and of its end (see server.node.tracker)."""

    def output(self, completion_tokens: int) -> Awaitable[None] | None:
        """None, or what to await before the output goes on (metering is written ahead)."""
        ...

    async def settle(self) -> None:
        """The answer finished: its accounting is written before the finish goes on."""
        ...

    def end(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Prepared:
    request: GenerateRequest
    prompt: Prompt
    engine_request: EngineRequest
    calls: Calls | None  # how the answer's calls are written; None: all of it is text
    reasoning: Reasoning | None  # the answer reasons first

    @property
    def estimated_prompt_tokens(self) -> int:
        """The rendered prompt, with about 1,024 tokens for each image it places."""
        return self.prompt.num_tokens + len(self.request.images()) * TOKENS_PER_IMAGE

    def with_images(self, images: tuple[DecodedImage, ...]) -> Prepared:
        engine_request = dataclasses.replace(
            self.engine_request, images=tuple(image.png for image in images)
        )
        return dataclasses.replace(self, engine_request=engine_request)


@contextmanager
def accounted(record: RequestRecord, tracker: Tracker) -> Iterator[None]:
    """Around an answer's events: however it ends, `record` says how (a client gone is
    canceled, and its engine request aborted by the closing), and `tracker` hears of the end."""
    try:
        yield
    except (asyncio.CancelledError, GeneratorExit):
        if record.status == "running":
            record.status = "canceled"
        raise
    except InferError as error:
        record.failed(error.code)
        raise
    except Exception:
        record.failed(InternalError.code)
        raise
    finally:
        tracker.end()


class Service(Protocol):
    """What the request flow answers with: the local model's generation, or the gateway's."""

    route: str  # where its answers run: local, or gateway (the b3os extension says it)
    fetches_images: bool  # the request's images are fetched and decoded here first

    def prepare(self, request: GenerateRequest, request_id: str, timing: Timing) -> Prepared: ...

    def events(
        self, prepared: Prepared, record: RequestRecord, tracker: Tracker
    ) -> AsyncGenerator[Event, None]: ...


class Generation:
    route = "local"
    fetches_images = True

    def __init__(
        self,
        engine: Engine,
        renderer: PromptRenderer,
        card: ModelCard,
        signing_key: bytes,
    ) -> None:
        self.engine = engine
        self.renderer = renderer
        self.card = card
        self.token_bytes = TokenBytes(renderer.tokenizer)
        self._signing_key = signing_key

    def sign(self, reasoning: str) -> str:
        """The opaque signature of a reasoning block: an HMAC of its text. This node does not
        check the signatures clients send back."""
        digest = hmac.new(self._signing_key, reasoning.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def count_tokens(self, request: GenerateRequest) -> int:
        """The rendered prompt's tokens, and about 1,024 for each image (not fetched here)."""
        self._check_supported(request)
        images = len(request.images())
        return self.renderer.render(request).num_tokens + images * TOKENS_PER_IMAGE

    def prepare(self, request: GenerateRequest, request_id: str, timing: Timing) -> Prepared:
        """Renders the prompt, sizes the answer, builds the constraint; raises before anything
        reaches the engine."""
        self._check_supported(request)
        started = time.perf_counter()
        prompt = self.renderer.render(request)
        timing.record("template", started)
        limits = self.engine.limits
        room = limits.room(prompt.num_tokens)
        if room <= 0:
            # The wording agents match to trigger compaction.
            maximum = min(limits.max_prompt_tokens, limits.max_total_tokens - 1)
            raise ContextLengthExceeded(
                f"prompt is too long: {prompt.num_tokens} tokens > {maximum} maximum",
                param="messages",
            )
        started = time.perf_counter()
        reasoning = self.renderer.reasoning_for(request, prompt)
        grammar = constraint_for(request, self.renderer.format, reasoning, prompt.opened)
        timing.record("grammar", started)
        # A max_tokens beyond the context, or beyond the node's --max-output-tokens, is clamped
        # to it: the answer then ends with max_tokens, as it would at its own maximum (agents
        # send their own large defaults). A request that names none gets the node's default.
        wanted = request.sampling.max_tokens or self.card.default_max_tokens
        max_tokens = min(wanted or room, self.card.max_output_tokens or room, room)
        unset: dict[str, Any] = {
            name: value
            for name, value in self.card.sampling_defaults.items()
            if getattr(request.sampling, name) is None
        }  # the model's recommended sampling, where the request leaves it to the server
        sampling = dataclasses.replace(request.sampling, max_tokens=max_tokens, **unset)
        special_tokens = self.renderer.family.special_tokens
        engine_request = EngineRequest(
            request_id, prompt.ids, sampling, grammar.constraint, special_tokens=special_tokens
        )
        return Prepared(request, prompt, engine_request, grammar.calls, reasoning)

    def _token_logprob(self, token: EngineLogprob) -> TokenLogprob:
        top = tuple(self._token_logprob(choice) for choice in token.top)
        return TokenLogprob(token.text, token.logprob, self.token_bytes(token.token_id), top)

    def _check_supported(self, request: GenerateRequest) -> None:
        for image in request.images():
            if "image_input" not in self.card.capabilities:
                raise InvalidRequest(
                    f"{image.path}: {self.card.id} does not take images (its capabilities lack "
                    "image_input)",
                    param=image.path,
                )
        family = self.renderer.family
        if request.tools and not family.has_tools:
            raise UnsupportedParameter(
                f"{self.card.id} has no known tool-call format", param="tools"
            )
        if family.has_tools and family.free_form is None:
            for tool in request.tools:
                if tool.free_form is not None:
                    raise UnsupportedParameter(
                        f"{tool.schema_path.removesuffix('.format')}: {self.card.id} calls tools "
                        f"in the {family.tool_parser} format, which has no call of "
                        "free-form input: give the tool JSON parameters",
                        param="tools",
                    )
        for name, reason in self.engine.unsupported_sampling.items():
            if getattr(request.sampling, name, None) not in (None, {}, ()):
                raise UnsupportedParameter(f"{name}: {reason}", param=name)
        reasons = self.renderer.format.reasoning is not None
        if request.thinking.mode is not ThinkingMode.DISABLED and not reasons:
            raise UnsupportedParameter(
                f"{self.card.id} has no known reasoning format", param="thinking"
            )

    async def events(
        self, prepared: Prepared, record: RequestRecord, tracker: Tracker
    ) -> AsyncGenerator[Event, None]:
        """The answer's events; `record` follows it (tokens so far, then how it ended), and
        `tracker` hears of each output and of the end, however it ends."""
        timing = record.timing
        record.prompt_tokens = prepared.prompt.num_tokens
        parser = Reader(
            self.renderer.format,
            prepared.request.tools,
            tool_call_id,
            reasons=prepared.reasoning is not None,
            opened=prepared.prompt.opened,
            calls=prepared.calls,
            sign=self.sign,
            tokenizer=self.renderer.tokenizer,
        )
        submitted = time.perf_counter()
        reasoning_tokens = 0  # the completion tokens once the reasoning ended
        with accounted(record, tracker):
            try:
                # Closed explicitly (not left to the garbage collector): closing aborts it.
                async with aclosing(self.engine.generate(prepared.engine_request)) as outputs:
                    async for output in outputs:
                        if "ttft" not in timing.phases:
                            timing.mark("ttft")
                            record.cached_tokens = output.cached_tokens
                        record.completion_tokens = output.completion_tokens
                        metered = tracker.output(output.completion_tokens)
                        if metered is not None:
                            await metered
                        if output.logprobs and prepared.request.sampling.logprobs:
                            yield Logprobs(tuple(map(self._token_logprob, output.logprobs)))
                        for event in parser.feed(output.text):
                            if isinstance(event, ThinkingEnd):
                                reasoning_tokens = output.completion_tokens
                            yield event
                        if output.finish is not None:
                            timing.record("model", submitted)
                            if output.finish.queue_ms is not None:
                                timing.phases["queue"] = output.finish.queue_ms
                            cut = output.finish.kind is StopKind.LENGTH
                            for event in parser.finish(cut):
                                if isinstance(event, ThinkingEnd):  # cut while reasoning
                                    reasoning_tokens = output.completion_tokens
                                yield event
                            finish = _finish(output.finish, parser.num_calls, reasoning_tokens)
                            record.finished(finish)
                            await tracker.settle()
                            yield finish
                            return
                raise InternalError("the model runtime ended the answer without a finish")
            except ConstraintRejected as error:
                raise explain(prepared.request, error) from None


def _finish(finish: EngineFinish, num_calls: int, reasoning_tokens: int = 0) -> Finish:
    usage = Usage(
        finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens, reasoning_tokens
    )
    reason = _FINISH_REASONS[finish.kind]
    if reason is FinishReason.END_TURN and num_calls:
        reason = FinishReason.TOOL_USE
    return Finish(reason, usage, finish.matched)
