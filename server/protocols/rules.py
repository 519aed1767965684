"""Rules both contracts share: JSON Schema limits, tool names, image sources."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_DATA_URL = re.compile(r"^data:image/(png|jpeg|jpg|webp|gif);base64,", re.IGNORECASE)


def json_schema(value: Any, path: str) -> dict[str, Any]:
    """A JSON Schema object within the node's limits: at most 64 KiB serialized and 32 levels."""
    if not isinstance(value, dict):
        raise InvalidRequest(f"{path} must be a JSON Schema object", param=path)
    size = len(orjson.dumps(value))
    if size > MAX_SCHEMA_BYTES:
        raise UnsupportedParameter(
            f"{path} is {size} bytes serialized; this node takes JSON Schemas of at most "
            f"{MAX_SCHEMA_BYTES} bytes",
            param=path,
        )
    if depth(value) > MAX_SCHEMA_DEPTH:
        raise UnsupportedParameter(
            f"{path} is nested deeper than {MAX_SCHEMA_DEPTH} levels; this node takes shallower "
            "JSON Schemas",
            param=path,
        )
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as error:
        where = ".".join(str(p) for p in error.absolute_path)
        detail = f" (at {where})" if where else ""
        raise InvalidRequest(f"{path} is not a valid JSON Schema{detail}", param=path) from None
    return value


def depth(value: Any) -> int:
    """Levels of nested objects and arrays: `{}` is 1, `{"a": []}` is 2. Iterative, so a hostile
    document cannot exhaust the interpreter's recursion limit."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def tool_names(names: list[tuple[str, str]], pattern: re.Pattern[str], limit: int) -> None:
    """Each name (with its path) matches the pattern, and no two are the same."""
    seen: set[str] = set()
    for path, name in names:
        if not pattern.fullmatch(name):
            raise InvalidRequest(
                f"{path} must be 1 to {limit} letters, digits, underscores or hyphens", param=path
            )
        if name in seen:
            raise InvalidRequest(f"{path}: tool names must be unique; {name} repeats", param=path)
        seen.add(name)


def direct_callers(fields: Fields) -> None:
    """A tool's `allowed_callers`: only the model itself calls tools here (`direct`); other
    callers (programmatic tool calling) need code execution, which this node does not run."""
    for path, caller in fields.items("allowed_callers"):
        if caller != "direct":
            raise UnsupportedParameter(
                f"{path}: {caller!r} callers need code execution, which this node does not run; "
                "tools are called by the model (direct)",
                param=path,
            )


def https_url(url: str, path: str) -> str:
    if not url.startswith("https://"):
        raise InvalidRequest(f"{path} must be an https:// URL", param=path)
    return url


def base64_bytes(data: str, path: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{path} is not valid base64", param=path) from None


def data_url(url: str, path: str) -> tuple[str, bytes]:
    """`data:image/{png,jpeg,webp,gif};base64,...` -> (media type, bytes)."""
    match = _DATA_URL.match(url)
    if match is None:
        raise InvalidRequest(
            f"{path} must be an https:// URL or a data:image/(png|jpeg|webp|gif);base64, URL",
            param=path,
        )
    kind = match.group(1).lower()
    media_type = "image/jpeg" if kind == "jpg" else f"image/{kind}"
    return media_type, base64_bytes(url[match.end() :], path)
