"""Building blocks of the wire JSON Schemas (OpenAPI 3.1 dialect): the request schemas each
protocol publishes in /openapi.json, which tests hold in step with the decoders."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(
    properties: dict[str, Schema],
    required: tuple[str, ...] = (),
    *,
    closed: bool = True,
    description: str | None = None,
) -> Schema:
    """An object; `closed` ones refuse members they do not list (`unsupported_parameter`).
    Optional members may be null: the contract's rule that `null` means unset."""
    properties = {
        key: value if key in required or _allows_null(value) else nullable(value)
        for key, value in properties.items()
    }
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def _allows_null(schema: Schema) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    if None in schema.get("enum", ()):
        return True
    return any(_allows_null(option) for option in schema.get("anyOf", ()))


def const(value: str) -> Schema:
    return {"type": "string", "const": value}


def enum(*values: str | None) -> Schema:
    kinds = ["string", "null"] if None in values else ["string"]
    return {"type": kinds if len(kinds) > 1 else kinds[0], "enum": list(values)}


def string(**bounds: Any) -> Schema:
    return {"type": "string", **bounds}


def number(
    minimum: float | None = None, maximum: float | None = None, *, null: bool = True
) -> Schema:
    schema: Schema = {"type": ["number", "null"] if null else "number"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def integer(minimum: int | None = None, maximum: int | None = None, *, null: bool = True) -> Schema:
    schema = number(minimum, maximum, null=null)
    schema["type"] = ["integer", "null"] if null else "integer"
    return schema


BOOLEAN: Schema = {"type": ["boolean", "null"]}
ANY_OBJECT: Schema = {"type": "object"}
JSON_SCHEMA: Schema = {
    "type": "object",
    "description": "A JSON Schema object, at most 64 KiB serialized and 32 levels deep.",
}


def array(items: Schema, *, null: bool = True, min_items: int = 0) -> Schema:
    schema: Schema = {"type": ["array", "null"] if null else "array", "items": items}
    if min_items:
        schema["minItems"] = min_items
    return schema
