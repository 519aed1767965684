"""What a router carries to its workers, tried at start with one-token answers rather than assumed:
sglang-router (0.3.2) re-encodes the sampling parameters it forwards through a fixed set of
fields, and drops the others. Measured there: `structural_tag` and `logit_bias` are dropped (the
engine then sends grammars as EBNF, and refuses `logit_bias`); every other parameter this server
sends arrives. Each probe's answer is forced, so the model's own preference cannot decide it."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from server.tokenizer import Tokenizer

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0
FORCED = "ok"


@dataclass(frozen=True, slots=True)
class Carriage:
    structural_tag: bool
    logit_bias: bool


async def probe_router(
    client: httpx.AsyncClient, prompt_ids: list[int], tokenizer: Tokenizer
) -> Carriage:
    """Raises `httpx.HTTPError` where the router does not answer."""
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": FORCED}}
    structural = await _answer(client, prompt_ids, {"structural_tag": json.dumps(tag)}) == FORCED
    return Carriage(structural, await _carries_logit_bias(client, prompt_ids, tokenizer))


async def _carries_logit_bias(
    client: httpx.AsyncClient, prompt_ids: list[int], tokenizer: Tokenizer
) -> bool:
    """Between two one-token answers a regex allows, a -100 bias on either must give the other;
    a router that drops the bias gives the model's preference both times."""
    ids = [tokenizer.encode(letter, add_special_tokens=False) for letter in ("A", "B")]
    if any(len(found) != 1 for found in ids):
        log.warning("logit_bias not probed (no one-token A and B here): taken as not carried")
        return False
    for banned, expected in ((ids[0][0], "B"), (ids[1][0], "A")):
        params = {"regex": "(A|B)", "logit_bias": {str(banned): -100.0}}
        if await _answer(client, prompt_ids, params) != expected:
            return False
    return True


async def _answer(client: httpx.AsyncClient, prompt_ids: list[int], params: dict[str, Any]) -> str:
    body = {
        "input_ids": prompt_ids,
        "sampling_params": {"max_new_tokens": 4, "temperature": 0, **params},
    }
    response = await client.post("/generate", json=body, timeout=PROBE_TIMEOUT_S)
    response.raise_for_status()
    answer = response.json()
    return str(answer.get("text", "") if isinstance(answer, dict) else "")
