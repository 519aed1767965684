"""A request's `input` as the items the response store keeps and `input_items` lists: a string is
one user message, a message's string content its text part, and every item has an id (one the
client gave, else one made of the request's id and the item's place)."""

from __future__ import annotations

from typing import Any

# Item type -> the prefix of the ids this node makes for it.
PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}
_TEXT = {"assistant": "output_text"}  # other roles' text is input_text


def as_items(value: Any) -> list[Any] | None:
    """`input` as a list of items, as sent (None: neither a string nor a list; the decoder says
    what is wrong with it)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else None


def with_ids(items: list[Any], request_id: str) -> list[dict[str, Any]]:
    """Items the decoder took, normalized for keeping."""
    ulid = request_id.removeprefix("req_")
    kept = []
    for index, item in enumerate(items):
        item = dict(item)
        kind = item.setdefault("type", "message")
        if kind == "message" and isinstance(item.get("content"), str):
            part = _TEXT.get(item.get("role", ""), "input_text")
            text: dict[str, Any] = {"type": part, "text": item["content"]}
            if part == "output_text":
                text["annotations"] = []
            item["content"] = [text]
        item.setdefault("id", f"{PREFIXES.get(kind, 'item')}_{ulid}in{index:03d}")
        kept.append(item)
    return kept
