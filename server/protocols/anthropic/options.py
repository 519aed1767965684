"""What a node takes beyond the Messages contract, set by its operator (`--system-in-messages`,
`--compat claude-code`); the default is the contract exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SystemInMessages = Literal["refuse", "keep"]


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    system_in_messages: SystemInMessages = "refuse"
    # Tool search: `tools[].defer_loading`, and `tool_reference` blocks in tool results that
    # load such a tool (Anthropic's advanced-tool-use beta, which Claude Code sends).
    tool_search: bool = False
    safeguards: bool = False  # a top-level `safeguards` (object or array), accepted and ignored
