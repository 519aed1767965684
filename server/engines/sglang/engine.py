"""The `sglang` engine: an in-process `sglang.Engine`. Its TokenizerManager runs in this process
and event loop, as under SGLang's own HTTP server, so a request costs no extra hop: prompt token
ids in (rendered by this server), incremental text out, RadixAttention prefix caching on.

Supervised: when one of SGLang's subprocesses dies (a scheduler assertion, the OOM killer), the
requests in flight end with 503 or their stream's error event, the engine is not ready, and a new
runtime is started in this process, again until one starts (`supervisor.py`)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from server.config import Settings
from server.engines.base import EngineLimits, EngineLoad, EngineOutput, EngineRequest
from server.engines.sglang import forkserver, pins
from server.engines.sglang.args import (
    logprob_options,
    runtime_env,
    server_args,
    to_sampling_params,
)
from server.engines.sglang.outputs import finish_of, limits, logprobs_of
from server.engines.sglang.supervisor import (
    Supervisor,
    children,
    forget_runtime_metrics,
    no_signal_handlers,
    quits_ignored,
)
from server.errors import BackendUnavailable, ContextLengthExceeded, InvalidRequest
from server.models.embedded import ModelSetupError
from server.models.source import ModelSource

log = logging.getLogger(__name__)

RESTART_BACKOFF_S = (1.0, 5.0, 30.0)  # between failed restarts; the last one repeats
LOST_RETRY_AFTER_S = 5


class SGLangEngine:
    def __init__(self, settings: Settings, source: ModelSource) -> None:
        self._settings = settings
        self._source = source
        self._engine: Any = None
        self._limits = EngineLimits(0, 0, 0)
        self._supervisor: Supervisor | None = None
        self._readers: set[asyncio.Task[Any]] = set()  # tasks reading a request's outputs
        self._lost: set[asyncio.Task[Any]] = set()  # of those, the ones cut by a runtime's death
        self._restarting: asyncio.Task[None] | None = None
        self._restarts = 0
        self._multiproc_dir_was_set = "PROMETHEUS_MULTIPROC_DIR" in os.environ

    @property
    def _keeps_metrics_dir(self) -> bool:
        """The operator's Prometheus folder, or the forkserver's, whose processes write there."""
        return self._multiproc_dir_was_set or os.environ.get(forkserver.STARTED) == "1"

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

    @property
    def restarts(self) -> int:
        return self._restarts

    async def start(self) -> None:
        await self._launch()

    async def _launch(self) -> None:
        args = server_args(self._settings, self._source)
        if not log.isEnabledFor(logging.DEBUG):  # its plugins' load and 400 arguments, at info
            logging.getLogger("sglang").setLevel(logging.WARNING)
        # The kernels' compile, SGLang's import and its plugins' load take seconds: in a worker
        # thread, so this loop keeps answering health checks meanwhile.
        await asyncio.to_thread(self._prepare, args)
        import sglang

        log.info(
            "starting SGLang %s on %s with %s",
            sglang.__version__,
            args["device"],
            args["model_path"],
        )
        # Engine() blocks until its scheduler is ready (tens of seconds on a CPU): build it in a
        # worker thread so this loop keeps answering health checks. SGLang only installs signal
        # handlers from the main thread, so none are installed here.
        root_handlers = logging.getLogger().handlers[:]
        root_level = logging.getLogger().level
        before = children()
        with quits_ignored(asyncio.get_running_loop()):
            engine = await asyncio.to_thread(sglang.Engine, **args)
        spawned = children() - before
        # SGLang's logger setup replaces the root handlers (basicConfig(force=True)): restore ours.
        logging.getLogger().handlers[:] = root_handlers
        logging.getLogger().setLevel(root_level)
        tokenizer_manager = engine.tokenizer_manager
        # Bind the TokenizerManager to this loop now rather than on the first request, without
        # the signal handlers it would add from the main thread (see supervisor.py).
        with no_signal_handlers(asyncio.get_running_loop()):
            tokenizer_manager.auto_create_handle_loop()
        self._limits = limits(
            int(tokenizer_manager.context_len), int(tokenizer_manager.max_req_input_len)
        )
        self._engine = engine
        self._supervisor = Supervisor(spawned, self._died)
        self._supervisor.start()
        log.info(
            "SGLang ready: context %d tokens, prompts up to %d",
            self._limits.context_length,
            self._limits.max_prompt_tokens,
        )

    def _prepare(self, args: Mapping[str, Any]) -> None:
        """What Engine() needs in this process first: the context length checked against the
        model's window; SGLang's versions checked and, on a CPU, the runtime's stand-ins, the
        compiled kernels and the forkserver (`forkserver.start`); its plugins' hooks applied and
        checked."""
        # The server starts the forkserver before it reads the model (`prepare_engine`), to run
        # beside the read: a context length refused here leaves it to end with this process.
        _check_context_length(self._settings.context_length, args["model_path"])
        forkserver.start(self._settings)  # at once where the server started it first
        os.environ.update(runtime_env(self._settings))  # the scheduler inherits it
        from sglang.srt.plugins import load_plugins

        load_plugins()  # as Engine() would: its hooks applied here first, and checked
        pins.check_hooks()

    async def close(self) -> None:
        if self._restarting is not None:
            self._restarting.cancel()
            await asyncio.gather(self._restarting, return_exceptions=True)
        if self._supervisor is not None:
            await self._supervisor.stop()
        engine, self._engine = self._engine, None
        if engine is not None:
            await asyncio.to_thread(engine.shutdown)

    async def _died(self, how: str) -> None:
        """A subprocess of the runtime exited: its requests end now, a new runtime starts."""
        engine, self._engine = self._engine, None  # not ready; new requests get 503
        log.error(
            "the model runtime died: %s; %d requests in flight end, and it restarts",
            how,
            len(self._readers),
        )
        for task in self._readers:
            self._lost.add(task)
            task.cancel()
        self._restarting = asyncio.get_running_loop().create_task(self._restart(engine))

    async def _restart(self, dead: Any) -> None:
        started = time.monotonic()
        for task in dead.tokenizer_manager.asyncio_tasks:  # its loops, on this event loop
            task.cancel()
        await asyncio.to_thread(dead.shutdown)  # what is left of it, and its shared memory
        forget_runtime_metrics(self._keeps_metrics_dir)
        for attempt in itertools.count():
            try:
                await self._launch()
            except Exception:
                wait = RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S) - 1)]
                log.exception("the model runtime did not restart; again in %.0f s", wait)
                if self._engine is not None:
                    await asyncio.to_thread(self._engine.shutdown)
                    self._engine = None
                forget_runtime_metrics(self._keeps_metrics_dir)
                await asyncio.sleep(wait)
            else:
                self._restarts += 1
                log.warning(
                    "the model runtime restarted in %.1f s (restart %d)",
                    time.monotonic() - started,
                    self._restarts,
                )
                return

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if self._engine is None:
            raise BackendUnavailable("the model runtime is starting; retry shortly", retry_after=5)
        from sglang.srt.managers.io_struct import GenerateReqInput

        # What Engine.async_generate builds, with the fields it does not pass on (token texts).
        obj = GenerateReqInput(
            input_ids=request.prompt_ids,
            sampling_params=to_sampling_params(
                request.sampling, request.constraint, request.special_tokens
            ),
            image_data=request.image_data(),
            stream=True,
            rid=request.request_id,
            **logprob_options(request.sampling),
        )
        stream = self._engine.tokenizer_manager.generate_request(obj, None)
        finished = False
        reader = asyncio.current_task()
        assert reader is not None
        self._readers.add(reader)
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
                    int(meta.get("cached_tokens") or 0),
                )
                if finished:
                    return
        except asyncio.CancelledError:
            if reader not in self._lost:
                raise  # the client went away
            reader.uncancel()
            raise BackendUnavailable(
                "the model runtime stopped during this answer and is restarting; retry in "
                f"{LOST_RETRY_AFTER_S} seconds",
                retry_after=LOST_RETRY_AFTER_S,
            ) from None
        finally:
            self._readers.discard(reader)
            self._lost.discard(reader)
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
