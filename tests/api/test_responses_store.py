"""Responses the node keeps (`store`, OpenAI's default), through the openai SDK's own helpers:
`previous_response_id` continues one with the same prompt as sending the whole conversation,
`retrieve`, `input_items.list` (its pages), `delete`, `input_tokens.count`; `store: false`
keeps nothing. On the session's server: kept in memory (tests/api/test_node.py: in `--db`,
across a restart, and per organization)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.api.test_responses import ROUTE
from tests.server_process import ServerProcess

ASKS = ("My name is Ada.", "What is my name?", "Say it again.")
SMALL: dict[str, Any] = {"max_output_tokens": 4, "temperature": 0}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def chain(client: openai.OpenAI, model: str) -> list[Any]:
    """Three turns, each continuing the last; the first with instructions, which are not
    carried over."""
    first = client.responses.create(
        model=model, input=ASKS[0], instructions="Answer in one word.", **SMALL
    )
    turns = [first]
    for ask in ASKS[1:]:
        turns.append(
            client.responses.create(
                model=model, input=ask, previous_response_id=turns[-1].id, **SMALL
            )
        )
    return turns


def whole(turns: list[Any]) -> list[Any]:
    """The conversation the last turn answered, sent whole: each ask, then what was answered."""
    items: list[Any] = []
    for ask, turn in zip(ASKS, turns, strict=True):
        items.append(user(ask))
        if turn is not turns[-1]:
            items += [item.model_dump(exclude_none=True) for item in turn.output]
    return items


@pytest.fixture(scope="module")
def turns(server: ServerProcess, model: str) -> list[Any]:
    """One chain for the module's tests."""
    return chain(openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0), model)


def test_a_chain_of_previous_response_ids_is_the_whole_conversation(
    openai_client: openai.OpenAI, model: str, turns: list[Any]
) -> None:
    assert [t.store for t in turns] == [True] * 3
    assert [t.previous_response_id for t in turns] == [None, turns[0].id, turns[1].id]
    sent_whole = openai_client.responses.create(
        model=model, input=whole(turns), store=False, **SMALL
    )
    last = turns[-1]
    assert last.usage is not None and sent_whole.usage is not None
    assert last.usage.input_tokens == sent_whole.usage.input_tokens
    counted = openai_client.responses.input_tokens.count(
        model=model, input=ASKS[-1], previous_response_id=turns[1].id
    )
    assert counted.input_tokens == last.usage.input_tokens
    # The whole conversation is read from the cache but its last turn: it was all computed.
    previous = turns[1].usage
    assert previous is not None
    assert last.usage.input_tokens_details.cached_tokens >= previous.input_tokens - 4
    kept = openai_client.responses.retrieve(last.id)
    assert kept.model_dump(exclude={"b3os"}) == last.model_dump(exclude={"b3os"})


def test_input_items_list_the_conversation_in_pages(
    openai_client: openai.OpenAI, turns: list[Any]
) -> None:
    listed = openai_client.responses.input_items.list(turns[-1].id, order="asc", limit=100)
    texts = [item.content[0].text for item in listed.data if item.type == "message"]
    assert texts[0] == ASKS[0] and texts[-1] == ASKS[-1]
    assert len(listed.data) == len(whole(turns)) and not listed.has_more
    ids = [item.id for item in listed.data]
    assert len(set(ids)) == len(ids) and listed.first_id == ids[0] and listed.last_id == ids[-1]
    newest = openai_client.responses.input_items.list(turns[-1].id, limit=1)
    assert [item.id for item in newest.data] == [ids[-1]] and newest.has_more
    paged = list(openai_client.responses.input_items.list(turns[-1].id, limit=2))  # auto-paging
    assert [item.id for item in paged] == ids[::-1]


def test_a_deleted_or_unstored_response_is_not_found(
    openai_client: openai.OpenAI, http: httpx.Client, model: str
) -> None:
    kept = openai_client.responses.create(model=model, input=ASKS[0], **SMALL)
    deleted = openai_client.responses.delete(kept.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    unstored = openai_client.responses.create(model=model, input=ASKS[0], store=False, **SMALL)
    assert unstored.store is False
    for gone in (kept.id, unstored.id):
        with pytest.raises(openai.NotFoundError):
            openai_client.responses.retrieve(gone)
        # As OpenAI answers it: 400 previous_response_not_found, naming the parameter.
        with pytest.raises(openai.BadRequestError) as raised:
            openai_client.responses.create(
                model=model, input="Hi", previous_response_id=gone, **SMALL
            )
        refused = raised.value
        assert refused.status_code == 400 and refused.code == "previous_response_not_found"
        assert refused.param == "previous_response_id" and gone in refused.message
    assert http.delete(f"{ROUTE}/{kept.id}").status_code == 404
    assert http.get(f"{ROUTE}/{kept.id}/input_items").status_code == 404
