"""The model's entry in GET /v1/infer/models: the most tokens an answer can have, which is the
window where no cap is set and never more than it."""

from __future__ import annotations

from server.models.card import ModelCard


def card(max_output_tokens: int | None) -> ModelCard:
    return ModelCard(
        id="m",
        context_length=32768,
        max_request_bytes=1 << 20,
        created=0,
        owned_by="node",
        max_output_tokens=max_output_tokens,
    )


def test_max_output_tokens_is_the_cap_within_the_window() -> None:
    assert card(None).to_wire()["max_output_tokens"] == 32768
    assert card(256).to_wire()["max_output_tokens"] == 256
    assert card(100_000).to_wire()["max_output_tokens"] == 32768
