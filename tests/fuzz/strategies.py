"""Request bodies for property tests: valid by the published schemas, then mutated."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import assume
from hypothesis import strategies as st

from server.protocols.anthropic.schema import MESSAGES_REQUEST
from server.protocols.openai.schema import CHAT_REQUEST
from server.protocols.responses.schema import RESPONSES_REQUEST
from tests.fuzz.from_schema import ANY_JSON, from_schema

HOSTILE = st.one_of(
    ANY_JSON,
    st.builds(lambda c, n: c * n, st.characters(), st.integers(10_000, 100_000)),
    st.integers(min_value=2**53, max_value=2**63 - 1),
    st.integers(min_value=-(2**63), max_value=-1),
    st.floats(allow_nan=False),
    st.integers(min_value=1, max_value=400).map(lambda n: _nest(n)),
)


def _nest(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": [value]}
    return value


def valid(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return from_schema(copy.deepcopy(schema)).map(as_received).filter(lambda b: b is not None)


def as_received(body: Any) -> Any:
    """The body as the server would parse it off the wire (integers past 64 bits and the like
    cannot be sent), or None when it cannot be sent at all."""
    try:
        return orjson.loads(orjson.dumps(body))
    except (TypeError, orjson.JSONEncodeError, orjson.JSONDecodeError):
        return None


def messages_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return valid(MESSAGES_REQUEST)


def chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return valid(CHAT_REQUEST)


def responses_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return valid(RESPONSES_REQUEST)


@st.composite
def mutated(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A valid body with one member, anywhere in it, replaced or added with a hostile value."""
    body = draw(bodies)
    containers: list[Any] = []
    stack: list[Any] = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            containers.append(item)
            stack.extend(item.values())
        elif isinstance(item, list) and item:
            containers.append(item)
            stack.extend(item)
    target = draw(st.sampled_from(containers))
    value = draw(HOSTILE)
    if isinstance(target, dict):
        keys = [*target, draw(st.text(max_size=12))]
        target[draw(st.sampled_from(keys))] = value
    else:
        target[draw(st.integers(0, len(target) - 1))] = value
    received = as_received(body)
    assume(received is not None)
    return dict(received)
