"""The decoders and the published request schemas (in /openapi.json) agree: every body the
schema allows is taken or refused only for a rule a schema cannot state, never as an unknown
parameter and never with an unexpected exception; every body the decoders take, the schema
allows; an unknown member anywhere closed is unsupported_parameter."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from server.errors import InferError, UnsupportedParameter
from server.protocols.anthropic.decode import decode_messages
from server.protocols.anthropic.schema import MESSAGES_REQUEST
from server.protocols.openai.decode import decode_chat
from server.protocols.openai.schema import CHAT_REQUEST
from server.protocols.responses.decode import decode_responses
from server.protocols.responses.schema import RESPONSES_REQUEST
from tests.conftest import AGENTS_AND_FAMILIES
from tests.fuzz.strategies import chat_bodies, messages_bodies, mutated, responses_bodies

pytestmark = pytest.mark.shard(AGENTS_AND_FAMILIES)  # no server: the shard with room for it

# B3OS_FUZZ_EXAMPLES runs more cases than CI's 250 per property. No shrinking: a failure
# prints its (unshrunk) example; shrinking these bodies takes minutes.
FUZZ = settings(
    max_examples=int(os.environ.get("B3OS_FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
# Refusals a JSON Schema cannot state: limits on embedded schemas, cross-member rules.
SCHEMA_LIMIT_PARAMS = ("input_schema", "parameters", "schema")


def refusal(protocol: str, body: dict[str, Any]) -> InferError | None:
    """How the decoder refuses the body, or None when it takes it. Anything but an InferError
    propagates and fails the test."""
    try:
        if protocol == "messages":
            decode_messages(body)
        elif protocol == "chat":
            decode_chat(body)
        else:
            decode_responses(body)
    except InferError as error:
        return error
    return None


PROTOCOLS = [
    ("messages", messages_bodies(), MESSAGES_REQUEST),
    ("chat", chat_bodies(), CHAT_REQUEST),
    ("responses", responses_bodies(), RESPONSES_REQUEST),
]
BODIES = [(protocol, bodies) for protocol, bodies, _ in PROTOCOLS]
SCHEMAS = {protocol: schema for protocol, _, schema in PROTOCOLS}


@pytest.mark.parametrize(("protocol", "bodies"), BODIES)
def test_schema_valid_bodies_are_never_unknown_parameters(
    protocol: str, bodies: st.SearchStrategy[dict[str, Any]]
) -> None:
    @FUZZ
    @given(bodies)
    def check(body: dict[str, Any]) -> None:
        error = refusal(protocol, body)
        if isinstance(error, UnsupportedParameter):
            assert (error.param or "").endswith(SCHEMA_LIMIT_PARAMS), error.message
        elif error is not None:
            assert error.status == 400, error.message

    check()


@pytest.mark.parametrize(("protocol", "bodies", "schema"), PROTOCOLS)
def test_bodies_the_decoders_take_are_schema_valid(
    protocol: str, bodies: st.SearchStrategy[dict[str, Any]], schema: dict[str, Any]
) -> None:
    validator = Draft202012Validator(schema)

    @FUZZ
    @given(mutated(bodies))
    def check(body: dict[str, Any]) -> None:
        error = refusal(protocol, body)
        if error is not None:
            assert error.status == 400, error.message
            return
        errors = [e.message for e in validator.iter_errors(body)]
        assert errors == [], errors

    check()


@pytest.mark.parametrize(("protocol", "bodies"), BODIES)
def test_an_unknown_top_level_member_is_unsupported(
    protocol: str, bodies: st.SearchStrategy[dict[str, Any]]
) -> None:
    known = set(SCHEMAS[protocol]["properties"])

    @FUZZ
    @given(bodies, st.text(min_size=1, max_size=12).filter(lambda k: k not in known))
    def check(body: dict[str, Any], key: str) -> None:
        body[key] = 1
        error = refusal(protocol, body)
        assert error is not None
        # Another refusal may come first; either way it is a 400.
        assert error.status == 400
        if isinstance(error, UnsupportedParameter) and error.param == key:
            return
        del body[key]
        assert refusal(protocol, body) is not None, "refused only for another member"

    check()
