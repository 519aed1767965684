"""The node's store, as an interface: API keys (kept as SHA-256 hashes) and metering records.
The embedded SQLite store (`server.store.sqlite`) implements it; a server database can replace it.
The server and the `b3os-infer keys` / `usage` commands share one store through `--db`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

SCOPES = ("infer:run", "infer:read")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    key_hash: str
    org: str
    project: str
    scopes: tuple[str, ...]
    created: float
    expires_at: float | None = None
    spend_cap_tokens: int | None = None  # input and output tokens together, over the key's life
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request's metered tokens (`infer.input_tokens`, `infer.output_tokens`)."""

    request_id: str
    key_id: str | None  # None on an open node
    org: str
    project: str
    model: str
    route: str
    input_tokens: int
    output_tokens: int
    status: str  # running until the request ends
    created: float
    updated: float


@dataclass(frozen=True, slots=True)
class UsageTotal:
    org: str
    project: str
    key_id: str | None
    model: str
    requests: int
    input_tokens: int
    output_tokens: int


class Store(Protocol):
    def add_key(self, key: KeyRecord) -> None: ...

    def key_by_hash(self, key_hash: str) -> KeyRecord | None: ...

    def keys(self, org: str | None = None) -> list[KeyRecord]: ...

    def revoke_key(self, key_id: str) -> bool: ...

    def write_usage(self, records: Sequence[UsageRecord]) -> None:
        """Inserts or replaces each record (by request id), all in one transaction."""
        ...

    def usage(self, org: str | None = None) -> list[UsageRecord]: ...

    def interrupt_running(self) -> int:
        """Records still `running` (their process was killed) become `interrupted`, billed to
        their last written counts; how many."""
        ...

    def usage_totals(self, org: str | None = None) -> list[UsageTotal]: ...

    def key_spend(self, key_id: str) -> int:
        """Input and output tokens metered for the key so far."""
        ...

    def close(self) -> None: ...
