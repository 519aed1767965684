"""The model card of a served model: what `GET /v1/infer/models` lists and the limits requests
are checked against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelCard:
    id: str
    context_length: int
    max_request_bytes: int
    created: int  # Unix seconds: when this node started serving it
    owned_by: str  # the node
    capabilities: tuple[str, ...] = ("chat", "streaming")

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": self.owned_by,
            "context_length": self.context_length,
            "max_request_bytes": self.max_request_bytes,
            "capabilities": list(self.capabilities),
        }
