"""The model card of a served model: what `GET /v1/infer/models` lists and the limits requests
are checked against."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The APIs every served model answers on: Anthropic Messages, OpenAI Chat Completions and
# OpenAI Responses, named as the request log names their routes.
PROTOCOLS = ("messages", "chat.completions", "responses")


@dataclass(frozen=True, slots=True)
class ModelCard:
    id: str
    context_length: int
    max_request_bytes: int
    created: int  # Unix seconds: when this node started serving it
    owned_by: str  # the node
    capabilities: tuple[str, ...] = ("chat", "streaming")
    # The model's recommended sampling (its generation_config.json), for what a request leaves
    # unset: temperature, top_p, top_k, min_p, repetition_penalty.
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    # The answer's length where a request names none (--default-max-tokens); None: to the
    # window's end.
    default_max_tokens: int | None = None
    # The most tokens of any answer (--max-output-tokens); None: to the window's end.
    max_output_tokens: int | None = None
    # Its chat format (grammars/): the family, the tool-call format it writes (SGLang's parser
    # name; None: no tools), whether it has a reasoning phase a request can turn on.
    family: str = "unknown"
    tool_format: str | None = None
    reasoning: bool = False
    reasoning_parser: str | None = None  # SGLang's reasoning parser that reads it

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": self.owned_by,
            "context_length": self.context_length,
            "max_output_tokens": min(
                self.max_output_tokens or self.context_length, self.context_length
            ),
            "max_request_bytes": self.max_request_bytes,
            "capabilities": list(self.capabilities),
            "family": self.family,
            "tool_format": self.tool_format,
            "reasoning": self.reasoning,
            "reasoning_parser": self.reasoning_parser,
            "protocols": list(PROTOCOLS),
            "route": "local",
        }


def folder_config(model_path: str) -> dict[str, Any] | None:
    """The HF `config.json` of a model folder; None for a hub id or an unreadable one."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


SAMPLING_DEFAULTS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def sampling_defaults(model_path: str) -> dict[str, float]:
    """The sampling a model folder's `generation_config.json` recommends, as SGLang's
    `--sampling-defaults model` and vLLM's `--generation-config auto` read it; none for a hub id
    or a folder without one."""
    try:
        config = json.loads((Path(model_path) / "generation_config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    return {
        name: value
        for name in SAMPLING_DEFAULTS
        if isinstance(value := config.get(name), int | float) and not isinstance(value, bool)
    }


def has_vision(model_path: str) -> bool:
    """The model has a vision part: its HF config has a `vision_config` (Qwen2-VL and others)."""
    if Path(model_path).is_dir():
        config = folder_config(model_path)
        return config is not None and "vision_config" in config
    try:  # a hub id: its config, from the local HF cache or the hub
        from transformers import AutoConfig

        return hasattr(AutoConfig.from_pretrained(model_path), "vision_config")
    except Exception:
        return False
