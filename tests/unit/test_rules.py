"""Rules both contracts share."""

from __future__ import annotations

import re

import pytest

from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.rules import data_url, depth, json_schema, tool_names


def nested(levels: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_depth_counts_objects_and_arrays() -> None:
    assert depth({}) == 1
    assert depth({"a": []}) == 2
    assert depth({"a": [{"b": 1}]}) == 3
    assert depth(nested(32)) == 32


def test_depth_of_a_hostile_document_does_not_recurse() -> None:
    assert depth(nested(100_000)) == 100_000


def test_schema_limits() -> None:
    json_schema(nested(32), "s")
    with pytest.raises(UnsupportedParameter, match="32 levels"):
        json_schema(nested(33), "s")
    with pytest.raises(UnsupportedParameter, match="65536 bytes"):
        json_schema({"description": "x" * 65536}, "s")
    with pytest.raises(InvalidRequest, match="not a valid JSON Schema"):
        json_schema({"type": "strings"}, "s")


def test_tool_names_match_and_are_unique() -> None:
    pattern = re.compile(r"[a-z]{1,3}")
    tool_names([("t.0", "abc"), ("t.1", "ab")], pattern, 3)
    with pytest.raises(InvalidRequest) as raised:
        tool_names([("t.0", "abc"), ("t.1", "abc")], pattern, 3)
    assert raised.value.param == "t.1"
    with pytest.raises(InvalidRequest):
        tool_names([("t.0", "abcd")], pattern, 3)


def test_data_urls() -> None:
    assert data_url("data:image/JPG;base64,/9j/", "u") == ("image/jpeg", b"\xff\xd8\xff")
    for bad in (
        "data:image/svg+xml;base64,AAAA",
        "data:image/png,rawbytes",
        "data:image/png;base64,%%%",
    ):
        with pytest.raises(InvalidRequest):
            data_url(bad, "u")
