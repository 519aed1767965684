"""Request ids: `req_` + 26 lowercase Crockford base32 characters, time-ordered."""

from __future__ import annotations

import re

from server.ids import RequestIds, completion_id, encode_crockford, message_id

REQUEST_ID = re.compile(r"^req_[0-9a-hjkmnp-tv-z]{26}$")


def test_request_ids_match_the_contract_pattern() -> None:
    ids = RequestIds()
    assert all(REQUEST_ID.match(ids.new()) for _ in range(1000))


def test_request_ids_sort_in_issue_order() -> None:
    ids = RequestIds()
    issued = [ids.new() for _ in range(5000)]
    assert issued == sorted(issued)
    assert len(set(issued)) == len(issued)


def test_crockford_encoding_is_big_endian_and_fixed_width() -> None:
    assert encode_crockford(0, 4) == "0000"
    assert encode_crockford(31, 2) == "0z"
    assert encode_crockford(32, 2) == "10"


def test_message_and_completion_ids_carry_the_request_ulid() -> None:
    request_id = RequestIds().new()
    ulid = request_id.removeprefix("req_")
    assert message_id(request_id) == f"msg_{ulid}"
    assert completion_id(request_id) == f"chatcmpl-{ulid}"
