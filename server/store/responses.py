"""Kept responses (the Responses API's `store`): each response object with the conversation it
answered, as input items, owned by its organization (another is told there is no such response).
In memory, or in the node's store with `--db` (they survive a restart); both bounded by size and
by age, the oldest dropped first."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from server.store.base import Bounds, StoredResponse
from server.store.writer import StoreWriter


class ResponseStore(Protocol):
    def put(self, stored: StoredResponse) -> None:
        """Keeps it (replacing one of the same id): `get` finds it from this call on. On the
        event loop."""
        ...

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        """None for an unknown id, an expired one, or one another organization stored."""
        ...

    async def delete(self, response_id: str, org: str) -> bool:
        """Whether there was one to delete (for this organization)."""
        ...


class MemoryResponses:
    """Implements `ResponseStore` in this process (gone with it)."""

    def __init__(self, bounds: Bounds, clock: Callable[[], float] = time.time) -> None:
        self._bounds = bounds
        self._clock = clock
        self._kept: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()  # oldest first
        self._bytes = 0

    def put(self, stored: StoredResponse) -> None:
        size = len(stored.encode())
        self._drop(stored.response_id)
        self._kept[stored.response_id] = (stored, size)
        self._bytes += size
        self._prune()

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        return self._get(response_id, org)

    async def delete(self, response_id: str, org: str) -> bool:
        if self._get(response_id, org) is None:
            return False
        self._drop(response_id)
        return True

    def _get(self, response_id: str, org: str) -> StoredResponse | None:
        self._prune()
        found = self._kept.get(response_id)
        return found[0] if found is not None and found[0].org == org else None

    def _drop(self, response_id: str) -> None:
        found = self._kept.pop(response_id, None)
        if found is not None:
            self._bytes -= found[1]

    def _prune(self) -> None:
        oldest = self._bounds.oldest(self._clock())
        while self._kept:
            stored, _ = next(iter(self._kept.values()))
            if stored.created >= oldest and self._bytes <= self._bounds.max_bytes:
                return
            self._drop(stored.response_id)


class StoreResponses:
    """Implements `ResponseStore` in the node's store, through its one writer: a response put
    waits in the writer's queue, where reads find it first (the client's next request may
    continue it the moment its answer ends), then in the store, as the request log is read. The
    store drops what is past the bounds as it writes; the age bound holds for reads of both."""

    def __init__(
        self, writer: StoreWriter, bounds: Bounds, clock: Callable[[], float] = time.time
    ) -> None:
        self.writer = writer
        self._bounds = bounds
        self._clock = clock

    def put(self, stored: StoredResponse) -> None:
        self.writer.put_response(stored)

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        waiting = self.writer.waiting_response(response_id)
        if waiting is None:
            return await asyncio.to_thread(self.writer.store.response, response_id, org)
        stored = waiting.stored  # None: deleted
        if stored is None or stored.org != org:
            return None
        return stored if stored.created >= self._bounds.oldest(self._clock()) else None

    async def delete(self, response_id: str, org: str) -> bool:
        if await self.get(response_id, org) is None:
            return False
        waiting = self.writer.waiting_response(response_id)
        if waiting is not None and waiting.stored is None:
            return False  # another request deleted it while this one read the store
        self.writer.delete_response(response_id)
        if not self.writer.is_failing:  # committed before the client hears of it, when it can be
            await self.writer.synced()
        return True
