"""What a node takes beyond the Messages contract, set by its operator (`--system-in-messages`,
`--compat claude-code`); the default is the contract exactly."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

SystemInMessages = Literal["refuse", "keep"]
# Claude Code's first system block: its version with a hash of the first user message, its entry
# point. It changes between sessions and means nothing to the model; at the prompt's very start it
# would keep each session from sharing the prefix cache with any other.
ATTRIBUTION = re.compile(r"x-anthropic-billing-header: [^\n]*")


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    system_in_messages: SystemInMessages = "refuse"
    # Tool search: `tools[].defer_loading`, and `tool_reference` blocks in tool results that
    # load such a tool (Anthropic's advanced-tool-use beta, which Claude Code sends).
    tool_search: bool = False
    safeguards: bool = False  # a top-level `safeguards` (object or array), accepted and ignored
    # System blocks that are a client's attribution (`ATTRIBUTION`), left out of the prompt.
    attribution: bool = False
