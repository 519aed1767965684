"""The one canonical request and event model both protocols map into and out of."""

from server.canonical.answer import Answer, fold
from server.canonical.events import Event, Finish, FinishReason, TextDelta, Usage
from server.canonical.request import (
    GenerateRequest,
    Image,
    Message,
    Part,
    ResponseFormat,
    Role,
    Sampling,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
)

__all__ = [
    "Answer",
    "Event",
    "Finish",
    "FinishReason",
    "GenerateRequest",
    "Image",
    "Message",
    "Part",
    "ResponseFormat",
    "Role",
    "Sampling",
    "Text",
    "TextDelta",
    "Thinking",
    "ThinkingConfig",
    "ThinkingMode",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolChoiceKind",
    "ToolResult",
    "Usage",
    "fold",
]
