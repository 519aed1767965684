"""Fixed prompt sets, so runs compare: the same questions in the same order every time."""

from __future__ import annotations

import random
from typing import Any

TOPICS = (
    "a lighthouse keeper", "the first rain of autumn", "a train that is always late", "bread",
    "a chess club", "the moon landing", "a lost umbrella", "bees in winter", "a night market",
    "an old bridge", "learning to swim", "a quiet library", "tomatoes", "a paper boat",
    "a mountain village", "the last bus home",
)  # fmt: skip
SEED = 20261129


def questions(count: int) -> list[str]:
    rng = random.Random(SEED)
    return [f"Write two sentences about {rng.choice(TOPICS)}." for _ in range(count)]


def body(protocol: str, model: str, text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """Greedy, so the same prompt gives the same answer length on every run."""
    if protocol == "responses":
        return {"model": model, "input": text, "max_output_tokens": max_tokens, "temperature": 0}
    common: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    messages = [{"role": "user", "content": text}]
    if protocol == "chat":
        return {**common, "messages": messages, "stream_options": {"include_usage": True}, **extra}
    return {**common, "messages": messages, **extra}
