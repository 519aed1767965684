"""How the sglang-remote engine reads SGLang's `/generate` chunks, in the forms the tests' real
SGLang servers are not started in: cumulative text (SGLang's default), told apart from deltas by
the stream itself, mixed behind one router, and error chunks. The real servers, through a real
router, are in tests/api/test_router.py."""

from __future__ import annotations

from typing import Any

import pytest

from server.canonical import Sampling
from server.engines.base import EngineRequest, StopKind
from server.engines.sglang.stream import StreamReader
from server.errors import ConstraintRejected, InternalError

REQUEST = EngineRequest("req_" + "0" * 26, [1, 2, 3], Sampling(max_tokens=8))
STOP = {"type": "stop", "matched": 2}


def chunk(
    text: str, ids: list[int] | None, tokens: int, finish: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = {"prompt_tokens": 3, "completion_tokens": tokens, "finish_reason": finish}
    found: dict[str, Any] = {"text": text, "meta_info": meta}
    if ids is not None:
        found["output_ids"] = ids
    return found


def read(chunks: list[dict[str, Any]], said: bool | None = None) -> list[str]:
    reader = StreamReader(REQUEST, said)
    return [reader.read(c).text for c in chunks]


def test_cumulative_text_becomes_deltas_with_no_one_saying_so() -> None:
    chunks = [chunk("He", [10], 1), chunk("Hello", [10, 11], 2), chunk("Hello!", [10, 11, 2], 3)]
    assert read(chunks) == ["He", "llo", "!"]


def test_incremental_text_is_taken_as_is_with_no_one_saying_so() -> None:
    chunks = [chunk("He", [10], 1), chunk("llo", [11], 2), chunk("!", [2], 3, STOP)]
    assert read(chunks) == ["He", "llo", "!"]


def test_the_stream_wins_over_what_the_runtime_said() -> None:
    """Behind a router, the server info of one worker does not speak for another's stream."""
    incremental = [chunk("He", [10], 1), chunk("llo", [11], 2)]
    cumulative = [chunk("He", [10], 1), chunk("Hello", [10, 11], 2)]
    assert read(incremental, said=True) == ["He", "llo"]
    assert read(cumulative, said=False) == ["He", "llo"]


def test_coalesced_chunks_are_told_apart_too() -> None:
    """SGLang may merge several tokens into one chunk, in either mode."""
    incremental = [chunk("One", [1, 2], 2), chunk(" two three", [3, 4, 5], 5)]
    cumulative = [chunk("One", [1, 2], 2), chunk("One two three", [1, 2, 3, 4, 5], 5)]
    assert read(incremental) == read(cumulative) == ["One", " two three"]


def test_a_first_chunk_without_tokens_decides_nothing() -> None:
    chunks = [chunk("", [], 0), chunk("Hi", [7], 1), chunk("Hi!", [7, 8], 2)]
    assert read(chunks) == ["", "Hi", "!"]


def test_the_finish_and_counts_are_read_from_each_chunk() -> None:
    reader = StreamReader(REQUEST)
    first = reader.read(chunk("He", [10], 1))
    last = reader.read(chunk("llo", [11, 2], 3, STOP))
    assert first.finish is None
    assert last.completion_tokens == 3
    assert last.finish is not None and last.finish.kind is StopKind.END_OF_TURN


def test_cumulative_logprobs_are_those_of_the_new_tokens() -> None:
    def entries(count: int) -> list[list[Any]]:
        return [[-0.5, 10 + i, f"t{i}"] for i in range(count)]

    reader = StreamReader(REQUEST)
    first = chunk("t0", [10], 1)
    first["meta_info"]["output_token_logprobs"] = entries(1)
    second = chunk("t0t1t2", [10, 11, 12], 3)
    second["meta_info"]["output_token_logprobs"] = entries(3)
    assert [p.text for p in reader.read(first).logprobs] == ["t0"]
    assert [p.text for p in reader.read(second).logprobs] == ["t1", "t2"]


def test_without_output_ids_what_the_runtime_said_is_used() -> None:
    chunks = [chunk("He", None, 1), chunk("Hello", None, 2)]
    assert read(chunks, said=True) == ["He", "llo"]
    assert read([chunk("He", None, 1), chunk("llo", None, 2)], said=False) == ["He", "llo"]


def test_without_output_ids_or_a_word_from_the_runtime_it_fails_loudly() -> None:
    with pytest.raises(InternalError, match="output_ids"):
        read([chunk("He", None, 1), chunk("Hello", None, 2)])


def test_an_error_chunk_is_mapped_to_the_same_error_as_in_process() -> None:
    error = {"message": "Failed to compile json_schema grammar: bad", "code": 400}
    with pytest.raises(ConstraintRejected, match="bad"):
        read([chunk("He", [1], 1), {"error": error}])
