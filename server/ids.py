"""Identifiers: request ids (`req_` + a ULID in lowercase Crockford base32), and the ids derived
from them."""

from __future__ import annotations

import secrets
import threading
import time

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1


def encode_crockford(value: int, length: int) -> str:
    """`value` as exactly `length` base32 characters, most significant first."""
    chars = []
    for _ in range(length):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


class RequestIds:
    """Time-ordered request ids: 48 bits of Unix milliseconds, then 80 bits that are random for the
    first id of a millisecond and incremented for the next ones, so ids sort in issue order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def ulid(self) -> str:
        with self._lock:
            now_ms = time.time_ns() // 1_000_000
            if now_ms > self._last_ms:
                self._last_ms, self._last_random = now_ms, secrets.randbits(_RANDOM_BITS - 1)
            elif self._last_random < _RANDOM_MAX:
                self._last_random += 1
            else:  # 2^80 ids in one millisecond: borrow the next one
                self._last_ms, self._last_random = self._last_ms + 1, 0
            value = (self._last_ms << _RANDOM_BITS) | self._last_random
        return encode_crockford(value, 26)

    def new(self) -> str:
        return "req_" + self.ulid()


def message_id(request_id: str) -> str:
    """The Anthropic message id of a request: `msg_` and the request's ULID."""
    return "msg_" + request_id.removeprefix("req_")


def completion_id(request_id: str) -> str:
    """The OpenAI completion id of a request: `chatcmpl-` and the request's ULID."""
    return "chatcmpl-" + request_id.removeprefix("req_")


def response_id(request_id: str) -> str:
    """The OpenAI Responses id of a request: `resp_` and the request's ULID."""
    return "resp_" + request_id.removeprefix("req_")


def output_item_id(prefix: str, request_id: str, index: int) -> str:
    """The id of a Responses output item (`msg`, `fc`, `rs`): its kind, the request's ULID and
    its place in the output, so that every item id of a response is its own and says whose."""
    return f"{prefix}_{request_id.removeprefix('req_')}{index:03d}"


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def tool_call_id() -> str:
    """A protocol-neutral call id (24 base62 characters); the encoders add `toolu_` or `call_`."""
    return "".join(secrets.choice(_BASE62) for _ in range(24))
