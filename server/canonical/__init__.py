"""The one canonical request and event model both protocols map into and out of."""

from server.canonical.answer import Answer, fold
from server.canonical.events import Event, Finish, FinishReason, TextDelta, Usage
from server.canonical.request import GenerateRequest, Message, Role, Sampling, Text

__all__ = [
    "Answer",
    "Event",
    "Finish",
    "FinishReason",
    "GenerateRequest",
    "Message",
    "Role",
    "Sampling",
    "Text",
    "TextDelta",
    "Usage",
    "fold",
]
