"""Reading wire JSON into native types once, at the edge. A `Fields` reads one JSON object and
remembers which members were taken; whatever is left at `done()` is `unsupported_parameter`.
Errors name the member by its dotted path (`messages.0.content.1.type`). `null` means unset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, overload

from server.errors import InvalidRequest, UnsupportedParameter

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return _JSON_TYPES.get(type(value), "a value")


def join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


class Fields:
    def __init__(self, value: Any, path: str = "") -> None:
        if not isinstance(value, dict):
            what = path or "the request body"
            raise InvalidRequest(
                f"{what} must be an object, not {describe(value)}", param=path or None
            )
        self.path = path
        self._value: dict[str, Any] = value
        self._taken: set[str] = set()

    @property
    def value(self) -> dict[str, Any]:
        """The object as sent."""
        return self._value

    def __contains__(self, key: str) -> bool:
        return self._value.get(key) is not None

    def raw(self, key: str, *, required: bool = False) -> Any:
        self._taken.add(key)
        value = self._value.get(key)
        if value is None and required:
            raise InvalidRequest(f"{join(self.path, key)} is required", param=join(self.path, key))
        return value

    def ignore(self, *keys: str) -> None:
        """Members the contract accepts and ignores."""
        self._taken.update(keys)

    def _typed(self, key: str, kinds: type | tuple[type, ...], noun: str, required: bool) -> Any:
        value = self.raw(key, required=required)
        if value is None:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
            path = join(self.path, key)
            raise InvalidRequest(f"{path} must be {noun}, not {describe(value)}", param=path)
        return value

    @overload
    def string(
        self,
        key: str,
        *,
        required: Literal[True],
        min_length: int = 0,
        max_length: int | None = None,
    ) -> str: ...

    @overload
    def string(
        self,
        key: str,
        *,
        required: bool = False,
        min_length: int = 0,
        max_length: int | None = None,
    ) -> str | None: ...

    def string(
        self,
        key: str,
        *,
        required: bool = False,
        min_length: int = 0,
        max_length: int | None = None,
    ) -> str | None:
        value: str | None = self._typed(key, str, "a string", required)
        if value is None:
            return None
        path = join(self.path, key)
        if len(value) < min_length:
            raise InvalidRequest(f"{path} must not be empty", param=path)
        if max_length is not None and len(value) > max_length:
            raise InvalidRequest(f"{path} must be at most {max_length} characters", param=path)
        return value

    @overload
    def choice(self, key: str, choices: tuple[str, ...], *, required: Literal[True]) -> str: ...

    @overload
    def choice(
        self, key: str, choices: tuple[str, ...], *, required: bool = False
    ) -> str | None: ...

    def choice(self, key: str, choices: tuple[str, ...], *, required: bool = False) -> str | None:
        value = self.string(key, required=required)
        if value is not None and value not in choices:
            path = join(self.path, key)
            raise InvalidRequest(f"{path} must be one of: {', '.join(choices)}", param=path)
        return value

    def boolean(self, key: str, *, required: bool = False) -> bool | None:
        result: bool | None = self._typed(key, bool, "a boolean", required)
        return result

    @overload
    def integer(
        self,
        key: str,
        *,
        required: Literal[True],
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int: ...

    @overload
    def integer(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None: ...

    def integer(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self._typed(key, (int, float), "an integer", required)
        if value is None:
            return None
        if isinstance(value, float):
            if not value.is_integer():
                path = join(self.path, key)
                raise InvalidRequest(f"{path} must be an integer, not {value}", param=path)
            value = int(value)
        _check_range(join(self.path, key), value, minimum, maximum)
        return int(value)

    @overload
    def number(
        self,
        key: str,
        *,
        required: Literal[True],
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float: ...

    @overload
    def number(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None: ...

    def number(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        value = self._typed(key, (int, float), "a number", required)
        if value is None:
            return None
        _check_range(join(self.path, key), value, minimum, maximum)
        return float(value)

    def array(self, key: str, *, required: bool = False) -> list[Any] | None:
        result: list[Any] | None = self._typed(key, list, "an array", required)
        return result

    def items(self, key: str, *, required: bool = False) -> Iterator[tuple[str, Any]]:
        """Each element of an array member with its dotted path."""
        for index, item in enumerate(self.array(key, required=required) or ()):
            yield join(join(self.path, key), index), item

    @overload
    def object(self, key: str, *, required: Literal[True]) -> Fields: ...

    @overload
    def object(self, key: str, *, required: bool = False) -> Fields | None: ...

    def object(self, key: str, *, required: bool = False) -> Fields | None:
        value = self._typed(key, dict, "an object", required)
        return None if value is None else Fields(value, join(self.path, key))

    def done(self) -> None:
        """Every member not taken is a parameter this node does not take."""
        for key in self._value:
            if key not in self._taken:
                path = join(self.path, key)
                raise UnsupportedParameter(f"{path} is not supported on this node", param=path)


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _check_range(path: str, value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and maximum is not None and not minimum <= value <= maximum:
        raise InvalidRequest(f"{path} must be between {minimum} and {maximum}", param=path)
    if minimum is not None and value < minimum:
        raise InvalidRequest(f"{path} must be at least {minimum}", param=path)
    if maximum is not None and value > maximum:
        raise InvalidRequest(f"{path} must be at most {maximum}", param=path)
