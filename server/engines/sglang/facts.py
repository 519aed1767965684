"""What the sglang-remote engine must know of its runtime, learned from what answers behind the
URL (each worker's `/server_info` and `/v1/models`), else from the operator's flags, never from a
guess: the context window and longest prompt, whether seeds are honoured, and whether the
workers render and tokenize prompts as this server does. Each fact names where it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from server.config import Settings
from server.engines.base import EngineLimits
from server.engines.sglang.outputs import limits
from server.models.embedded import ModelSetupError
from server.tokenizer import Tokenizer

T = TypeVar("T")
# SGLang admits prompts up to its window less 6 tokens (max_req_input_len = max_req_len - 5).
PROMPT_MARGIN = 6
# Rendered by this server and by each worker: the same model renders and tokenizes them the same
# (without a system turn, a template may add its own; with one, it places it).
PROBES: tuple[list[dict[str, Any]], ...] = (
    [
        {"role": "user", "content": "Ünïcödé ✓ 12345 <tags> & tabs\tand\nnew lines: 日本語 🙂"},
        {"role": "assistant", "content": "Understood."},
        {"role": "user", "content": 'Again, in JSON: {"key": [1, 2.5, null]}'},
    ],
    [
        {"role": "system", "content": "You compare models."},
        {"role": "user", "content": "Hello"},
    ],
)


@dataclass(frozen=True, slots=True)
class Learned(Generic[T]):
    value: T
    source: str


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What one SGLang server says of itself."""

    url: str
    context_length: int
    max_req_input_len: int
    seeded: bool
    cumulative: bool
    version: str

    @classmethod
    def parse(cls, url: str, info: Mapping[str, Any]) -> WorkerInfo | None:
        """From its `/server_info` (with `/v1/models`' `max_model_len`); None when it lacks
        the limits."""
        max_input = info.get("max_req_input_len")
        if not isinstance(max_input, int):
            return None
        window = info.get("max_model_len") or info.get("context_length")
        return cls(
            url,
            int(window) if isinstance(window, int) else max_input + PROMPT_MARGIN,
            max_input,
            bool(info.get("enable_deterministic_inference", False)),
            not info.get("incremental_streaming_output", False),
            str(info.get("version", "unknown")),
        )


def limits_of(workers: list[WorkerInfo], settings: Settings, url: str) -> Learned[EngineLimits]:
    """The narrowest worker's; `--context-length` may narrow them, never widen them."""
    wanted = settings.context_length
    if not workers:
        if wanted is None:
            raise ModelSetupError(
                f"cannot learn the context window behind {url}: no worker answers this server "
                "directly; give --context-length (at most the workers')"
            )
        return Learned(
            limits(wanted, wanted - PROMPT_MARGIN), "--context-length (the workers not asked)"
        )
    context = min(worker.context_length for worker in workers)
    max_input = min(worker.max_req_input_len for worker in workers)
    source = "the workers' /server_info and /v1/models"
    if wanted is None:
        return Learned(limits(context, max_input), source)
    if wanted > context:
        raise ModelSetupError(
            f"--context-length {wanted} is beyond the {context} tokens the workers behind {url} "
            "serve: give at most that, or start the workers with a longer one"
        )
    narrowed = limits(wanted, min(max_input, wanted - PROMPT_MARGIN))
    return Learned(narrowed, f"--context-length, within {source}")


def seeded_of(workers: list[WorkerInfo], setting: bool | None) -> Learned[bool]:
    """Seeds are honoured where every worker runs SGLang's deterministic inference."""
    if setting is False:
        return Learned(False, "--deterministic-sampling off")
    if not workers:
        if setting:
            return Learned(True, "--deterministic-sampling on (the workers not asked)")
        return Learned(
            False,
            "the workers not asked, and no --deterministic-sampling on to say they run "
            "--enable-deterministic-inference",
        )
    unseeded = [worker.url for worker in workers if not worker.seeded]
    if not unseeded:
        return Learned(True, "the workers' /server_info: deterministic inference")
    if setting:
        raise ModelSetupError(
            f"--deterministic-sampling on, but {', '.join(unseeded)} run without "
            "--enable-deterministic-inference: start them with it, or this server without "
            "the flag (requests with a seed are then refused)"
        )
    return Learned(False, f"{', '.join(unseeded)} run without --enable-deterministic-inference")


def cumulative_of(workers: list[WorkerInfo]) -> bool | None:
    """What the workers say of their streams, where they agree (each stream shows it anyway)."""
    modes = {worker.cumulative for worker in workers}
    return modes.pop() if len(modes) == 1 else None


def probe_ids(tokenizer: Tokenizer, probe: list[dict[str, Any]]) -> list[int]:
    """A probe as this server renders and tokenizes a prompt (see grammars.prompt)."""
    text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def model_mismatch(url: str, ours: list[int], theirs: list[int]) -> str | None:
    """Why a worker that rendered a probe as `theirs` serves another model; None if it does
    not."""
    if ours == theirs:
        return None
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    where = (
        f"token {at} is {ours[at]} here and {theirs[at]} there"
        if at is not None
        else f"{len(ours)} tokens here, {len(theirs)} there"
    )
    return (
        f"the worker at {url} renders and tokenizes chats unlike this server ({where}): its "
        "model or chat template is not this server's --model; start both on the same model"
    )
