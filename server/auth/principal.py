"""Who a request acts for: the key's organization, project and scopes, from its bearer token
(`Authorization: Bearer b3os_sk_...`, or `x-api-key`, which Anthropic SDKs send for `api_key`).
With no key store the node runs open: every request acts for the organization `open`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from server.auth.keys import PREFIX, KeyFormatError, parse
from server.errors import Forbidden, Unauthorized
from server.store.base import SCOPES, Store

OPEN_ORG = "open"


@dataclass(frozen=True, slots=True)
class Principal:
    org: str
    project: str
    key_id: str | None  # None on an open node
    scopes: frozenset[str]
    spend_cap_tokens: int | None = None


OPEN = Principal(OPEN_ORG, OPEN_ORG, None, frozenset(SCOPES))


class Authenticator:
    def __init__(self, store: Store | None) -> None:
        self._store = store

    @property
    def is_open(self) -> bool:
        return self._store is None

    async def authenticate(self, authorization: str, api_key: str, scope: str) -> Principal:
        """The principal of a request (its `Authorization` and `x-api-key` headers) that may use
        `scope`; 401 or 403 otherwise. The key is read in a worker thread, off the event loop."""
        if self._store is None:
            return OPEN
        text = _credential(authorization, api_key)
        if not text:
            raise _unauthorized(f"no API key: send Authorization: Bearer {PREFIX}...")
        try:
            parsed = parse(text)
        except KeyFormatError as error:
            raise _unauthorized(str(error)) from None
        key = await asyncio.to_thread(self._store.key_by_hash, parsed.hash)
        if key is None:
            raise _unauthorized("API key is not known to this node")
        if key.revoked_at is not None:
            raise _unauthorized(f"API key {key.key_id} was revoked")
        if key.expires_at is not None and key.expires_at <= time.time():
            when = datetime.fromtimestamp(key.expires_at, UTC).isoformat(timespec="seconds")
            raise _unauthorized(f"API key {key.key_id} expired at {when}")
        if scope not in key.scopes:
            raise Forbidden(f"API key {key.key_id} lacks the {scope} scope")
        return Principal(
            key.org, key.project, key.key_id, frozenset(key.scopes), key.spend_cap_tokens
        )


def _credential(authorization: str, api_key: str) -> str:
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return api_key.strip()


def _unauthorized(message: str) -> Unauthorized:
    return Unauthorized(message, headers={"WWW-Authenticate": 'Bearer realm="b3os-infer"'})
