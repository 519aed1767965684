"""The `sglang` engine: an in-process `sglang.Engine`. Its TokenizerManager runs in this process
and event loop, as under SGLang's own HTTP server, so a request costs no extra hop: prompt token
ids in (rendered by this server), incremental text out, RadixAttention prefix caching on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from server.config import Settings
from server.engines.base import EngineLimits, EngineLoad, EngineOutput, EngineRequest
from server.engines.sglang import cpu_compat
from server.engines.sglang.args import logprob_options, server_args, to_sampling_params
from server.engines.sglang.outputs import finish_of, limits, logprobs_of
from server.errors import BackendUnavailable, ContextLengthExceeded, InvalidRequest
from server.models.embedded import ModelSetupError
from server.models.source import ModelSource

log = logging.getLogger(__name__)


class SGLangEngine:
    def __init__(self, settings: Settings, source: ModelSource) -> None:
        self._settings = settings
        self._source = source
        self._engine: Any = None
        self._limits = EngineLimits(0, 0, 0)

    @property
    def limits(self) -> EngineLimits:
        return self._limits

    @property
    def unsupported_sampling(self) -> Mapping[str, str]:
        if self._settings.deterministic_sampling is False:
            return {"seed": "this node samples without seeds (--deterministic-sampling off)"}
        return {}

    @property
    def is_ready(self) -> bool:
        return self._engine is not None

    @property
    def running_requests(self) -> int:
        # A request leaves this map when the scheduler reports it finished or aborted.
        return 0 if self._engine is None else len(self._engine.tokenizer_manager.rid_to_state)

    async def load(self) -> EngineLoad | None:
        """The scheduler's live load report (as SGLang's GET /v1/loads)."""
        if self._engine is None:
            return None
        loads = await self._engine.tokenizer_manager.get_loads(include=["core"])
        return EngineLoad(
            sum(int(load.num_running_reqs) for load in loads),
            sum(int(load.num_waiting_reqs) for load in loads),
        )

    async def start(self) -> None:
        args = server_args(self._settings, self._source)
        if args["device"] == "cpu":
            cpu_compat.prepare_cpu_runtime()
        import sglang

        _check_context_length(self._settings.context_length, args["model_path"])
        log.info(
            "starting SGLang %s on %s with %s",
            sglang.__version__,
            args["device"],
            args["model_path"],
        )
        # Engine() blocks until its scheduler is ready (~30 s on a CPU): build it in a worker
        # thread so this loop keeps answering health checks. SGLang only installs signal handlers
        # from the main thread, so none are installed here.
        root_handlers = logging.getLogger().handlers[:]
        root_level = logging.getLogger().level
        sglang_logger = logging.getLogger("sglang")
        if not log.isEnabledFor(logging.DEBUG):
            sglang_logger.setLevel(logging.WARNING)  # it logs its 400 server arguments at info
        engine = await asyncio.to_thread(sglang.Engine, **args)
        # SGLang's logger setup replaces the root handlers (basicConfig(force=True)): restore ours.
        logging.getLogger().handlers[:] = root_handlers
        logging.getLogger().setLevel(root_level)
        tokenizer_manager = engine.tokenizer_manager
        # Bind the TokenizerManager to this loop now rather than on the first request. From the
        # main thread this also adds SGLang's SIGTERM and SIGQUIT handlers to the loop: the
        # server puts its own SIGTERM handler back after start() (see server.serve).
        tokenizer_manager.auto_create_handle_loop()
        self._limits = limits(
            int(tokenizer_manager.context_len), int(tokenizer_manager.max_req_input_len)
        )
        self._engine = engine
        log.info(
            "SGLang ready: context %d tokens, prompts up to %d",
            self._limits.context_length,
            self._limits.max_prompt_tokens,
        )

    async def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            await asyncio.to_thread(engine.shutdown)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if self._engine is None:
            raise BackendUnavailable("the model runtime is starting; retry shortly", retry_after=5)
        from sglang.srt.managers.io_struct import GenerateReqInput

        # What Engine.async_generate builds, with the fields it does not pass on (token texts).
        obj = GenerateReqInput(
            input_ids=request.prompt_ids,
            sampling_params=to_sampling_params(request.sampling, request.constraint),
            image_data=request.image_data(),
            stream=True,
            rid=request.request_id,
            **logprob_options(request.sampling),
        )
        stream = self._engine.tokenizer_manager.generate_request(obj, None)
        finished = False
        try:
            async for chunk in _mapped_errors(stream):
                meta = chunk["meta_info"]
                finish = finish_of(meta, request)
                finished = finish is not None
                yield EngineOutput(
                    chunk.get("text") or "",
                    meta["completion_tokens"],
                    finish,
                    logprobs_of(meta, finish),
                )
                if finished:
                    return
        finally:
            # Closing SGLang's generator before its finish aborts the request in the scheduler.
            await stream.aclose()
            if not finished:
                log.debug("aborted %s", request.request_id)


def _check_context_length(wanted: int | None, model_path: str) -> None:
    """--context-length may narrow the model's window, never widen it: refused in one line
    rather than with SGLang's traceback (and its environment-variable escape hatch)."""
    if wanted is None:
        return
    from sglang.srt.utils.hf_transformers.common import get_context_length
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    window = get_context_length(config.get_text_config())
    if wanted > window:
        raise ModelSetupError(
            f"--context-length {wanted} is beyond the model's window of {window} tokens; "
            f"give at most {window}, or leave it unset to serve the whole window"
        )


async def _mapped_errors(stream: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """SGLang's exceptions mapped to ours at the boundary, the most specific first."""
    try:
        async for chunk in stream:
            yield chunk
    except ValueError as exc:  # SGLang's request validation
        text = str(exc)
        if "context length" in text or "exceeds" in text:
            raise ContextLengthExceeded(text, param="messages") from exc
        raise InvalidRequest(text) from exc
