"""SGLang's `/generate` event stream read into engine outputs. SGLang streams either each chunk's
new text (`--incremental-streaming-output`) or the whole text so far (its default), and nothing
in a chunk names which: a router in front of several servers may even mix them. The stream
tells: from the second chunk on, a cumulative chunk's `output_ids` hold every token generated so
far (as many as its `completion_tokens`), an incremental one's only the new ones."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from server.engines.base import EngineOutput, EngineRequest
from server.engines.sglang.outputs import error_of, finish_of, logprobs_of
from server.errors import InternalError


class StreamReader:
    """One answer's chunks, in order, as outputs of new text only. `cumulative` is what the
    runtime said of itself (its server info), for chunks that carry no `output_ids`."""

    def __init__(self, request: EngineRequest, cumulative: bool | None = None) -> None:
        self._request = request
        self._said = cumulative
        self._cumulative_seen: bool | None = None  # what this stream has shown
        self._text = ""  # cumulative streams: the text so far
        self._tokens = 0  # completion tokens so far
        self._logprobs = 0  # cumulative streams: logprob entries so far

    def read(self, chunk: dict[str, Any]) -> EngineOutput:
        """Raises the error an error chunk or an abnormal finish stands for."""
        if "error" in chunk:
            error = chunk["error"]
            raise error_of(error.get("code"), str(error.get("message")), self._request)
        meta = chunk["meta_info"]
        tokens = int(meta["completion_tokens"])
        text = chunk.get("text") or ""
        skip = 0
        if self._is_cumulative(chunk.get("output_ids"), tokens):
            text, self._text = text[len(self._text) :], text
            skip = self._logprobs
            self._logprobs = len(meta.get("output_token_logprobs") or ())
        self._tokens = tokens
        finish = finish_of(meta, self._request)
        cached = int(meta.get("cached_tokens") or 0)
        return EngineOutput(text, tokens, finish, logprobs_of(meta, finish, skip), cached)

    def _is_cumulative(self, ids: Any, tokens: int) -> bool:
        """Until a chunk follows one with tokens, either reading gives the same text: such a
        chunk is read as cumulative, which keeps what a cumulative stream needs next."""
        if self._cumulative_seen is None and self._tokens > 0:
            if isinstance(ids, list):
                self._cumulative_seen = len(ids) == tokens
            elif self._said is not None:
                self._cumulative_seen = self._said
            else:
                raise InternalError(
                    "the model runtime streams chunks without output_ids and does not say "
                    "whether its text is incremental"
                )
        return True if self._cumulative_seen is None else self._cumulative_seen


async def sse_chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of SGLang's event stream (`data: {...}` lines, then `data: [DONE]`)."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        chunk = json.loads(data)
        if isinstance(chunk, dict):
            yield chunk
