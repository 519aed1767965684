"""SGLang's output chunks as this server's engine outputs: the finish of an answer and the errors
SGLang reports, the same for the in-process engine and for SGLang's HTTP API (`sglang-remote`)."""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from server.engines.base import (
    EngineFinish,
    EngineLimits,
    EngineLogprob,
    EngineRequest,
    StopKind,
)
from server.errors import (
    BackendUnavailable,
    ConstraintRejected,
    ContextLengthExceeded,
    InferError,
    InvalidRequest,
)

log = logging.getLogger(__name__)

# What SGLang's scheduler says of a request it dropped at SGLANG_REQ_WAITING_TIMEOUT (args.py).
QUEUE_BOUND_MESSAGE = "Request waiting timeout reached."


def limits(context_length: int, max_req_input_len: int) -> EngineLimits:
    """SGLang's own bounds (0.5.23): the scheduler admits prompts shorter than
    `max_req_input_len` (= max_req_len - 5), and caps an answer at max_req_len - prompt - 1,
    where max_req_len = min(context - 1, KV pool - 1)."""
    return EngineLimits(
        context_length, max_req_input_len - 1, min(context_length, max_req_input_len + 4)
    )


def finish_of(meta: dict[str, Any], request: EngineRequest) -> EngineFinish | None:
    """The finish in a chunk's `meta_info`, None while the answer goes on; raises the error an
    aborted or failed answer stands for."""
    reason = meta.get("finish_reason")
    if reason is None:
        return None

    def finish(kind: StopKind, matched: str | None = None) -> EngineFinish:
        return EngineFinish(
            kind,
            prompt_tokens=int(meta["prompt_tokens"]),
            completion_tokens=int(meta["completion_tokens"]),
            cached_tokens=int(meta.get("cached_tokens") or 0),
            matched=matched,
            queue_ms=_ms(meta.get("queue_time")),
        )

    kind = reason.get("type")
    if kind == "length":
        return finish(StopKind.LENGTH)
    if kind == "stop":
        matched = reason.get("matched")
        if isinstance(matched, str) and matched in request.sampling.stop:
            return finish(StopKind.STOP_STRING, matched)
        if isinstance(matched, int):
            return finish(StopKind.END_OF_TURN)
        log.error("SGLang stopped %s: %s", request.request_id, matched)
        raise InferError("the model runtime failed to produce this answer")
    if kind == "abort":
        raise error_of(reason.get("status_code"), str(reason.get("message") or ""), request)
    log.error("unexpected SGLang finish reason for %s: %r", request.request_id, reason)
    raise InferError("the model runtime failed to produce this answer")


# OpenAI's floor for a token the model gives no chance: JSON has no -inf (SGLang's HTTP server
# sends it as null, and so would the node's encoders).
LOWEST_LOGPROB = -9999.0


def _logprob(value: Any) -> float:
    if value is None:
        return LOWEST_LOGPROB
    number = float(value)
    return number if math.isfinite(number) else LOWEST_LOGPROB


def logprobs_of(
    meta: dict[str, Any], finish: EngineFinish | None, skip: int = 0
) -> tuple[EngineLogprob, ...]:
    """The logprobs of a chunk's tokens (past the first `skip`, where the runtime repeats them
    all), without those of the end-of-turn token or of a stop string, which are not text."""
    entries = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    found = [
        EngineLogprob(
            int(token_id),
            text or "",
            _logprob(logprob),
            tuple(_alternatives(tops[index] if index < len(tops) else None)),
        )
        for index, (logprob, token_id, text) in enumerate(entries)
        if index >= skip
    ]
    if finish is not None and finish.kind is StopKind.END_OF_TURN and found:
        found.pop()
    elif finish is not None and finish.kind is StopKind.STOP_STRING and finish.matched:
        rest = finish.matched
        while found and rest and found[-1].text and rest.endswith(found[-1].text):
            rest = rest[: -len(found.pop().text)]
    return tuple(found)


def _alternatives(top: list[Any] | None) -> list[EngineLogprob]:
    choices = [EngineLogprob(int(i), t or "", _logprob(lp)) for lp, i, t in top or ()]
    return sorted(choices, key=lambda choice: choice.logprob, reverse=True)


def error_of(status: Any, message: str, request: EngineRequest) -> InferError:
    """An error SGLang reported for a request (an abort, an error chunk, an error response)."""
    if status == 400:
        if "grammar" in message:
            return ConstraintRejected(compiler_reason(message))
        if "context length" in message or "length" in message or "exceeds" in message:
            return ContextLengthExceeded(message, param="messages")
        return InvalidRequest(message)
    if status == 503 and message == QUEUE_BOUND_MESSAGE:
        # Dropped from the queue before it started: nothing of it was computed. No Retry-After:
        # the node cannot tell when the work ahead of it ends, and a retry joins the queue's end.
        return BackendUnavailable(
            "the model runtime is busy: this request waited in its queue for the node's bound "
            "(--max-queue-wait) without being started, and was dropped unstarted"
        )
    log.warning("SGLang aborted %s (%s): %s", request.request_id, status, message)
    return BackendUnavailable(
        "the model runtime aborted this request; retry shortly", retry_after=1
    )


def compiler_reason(message: str) -> str:
    """xgrammar's reason without its source location: 'Failed to compile structural_tag
    grammar: [23:19:19] /project/cpp/x.cc:4181: Cannot find field' -> 'Cannot find field'."""
    reason = message.split("grammar:", 1)[-1]
    return re.sub(r"\[[\d:]+\]\s*\S+:\d+:\s*", "", reason).strip()


def _ms(seconds: Any) -> float | None:
    return float(seconds) * 1000 if isinstance(seconds, int | float) else None
