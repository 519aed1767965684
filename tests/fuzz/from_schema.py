"""Hypothesis strategies for the JSON Schema subset the request schemas use (type, const, enum,
properties, required, additionalProperties, anyOf, items, minItems, bounds, lengths, pattern,
propertyNames). Built once per schema node, so drawing a body is cheap."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Strategy = st.SearchStrategy[Any]
SMALL_TEXT = st.text(max_size=12)
ANY_JSON: Strategy = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**31), 2**31)
    | st.floats(allow_nan=False, allow_infinity=False)
    | SMALL_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SMALL_TEXT, inner, max_size=3),
    max_leaves=8,
)


def from_schema(schema: dict[str, Any]) -> Strategy:
    if "anyOf" in schema:
        return st.one_of([from_schema(s) for s in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema.get("type")
    if kinds is None:
        return ANY_JSON
    if isinstance(kinds, list):
        return st.one_of([from_schema({**schema, "type": kind}) for kind in kinds])
    return _BY_TYPE[kinds](schema)


def _string(schema: dict[str, Any]) -> Strategy:
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True)
    return st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 24))


def _integer(schema: dict[str, Any]) -> Strategy:
    return st.integers(schema.get("minimum", -(2**40)), schema.get("maximum", 2**40))


def _number(schema: dict[str, Any]) -> Strategy:
    low, high = schema.get("minimum"), schema.get("maximum")
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False)
    return floats | st.integers(
        int(low) if low is not None else -(2**40), int(high) if high is not None else 2**40
    )


def _array(schema: dict[str, Any]) -> Strategy:
    return st.lists(
        from_schema(schema.get("items", {})), min_size=schema.get("minItems", 0), max_size=3
    )


def _object(schema: dict[str, Any]) -> Strategy:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fixed = {key: from_schema(value) for key, value in properties.items() if key in required}
    optional = {key: from_schema(value) for key, value in properties.items() if key not in required}
    known = st.fixed_dictionaries(fixed, optional=optional)
    extra = schema.get("additionalProperties", True)
    if extra is False:
        return known
    names = _string(schema["propertyNames"]) if "propertyNames" in schema else SMALL_TEXT
    values = ANY_JSON if extra is True else from_schema(extra)
    more = st.dictionaries(names.filter(lambda k: k not in properties), values, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, known, more)


_BY_TYPE = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda schema: st.booleans(),
    "null": lambda schema: st.none(),
}
