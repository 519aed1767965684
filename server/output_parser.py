"""The output parser: the model's raw text, as it arrives, into canonical events. With a family's
thinking format, the answer opens inside the reasoning, which ends at its close tag; with its tool
format, calls written in it (`<tool_call>\\n{"name": "X", "arguments": {...}}\\n</tool_call>` for
ChatML) become call start, argument fragments and call end; everything else is text. The model's
tool syntax is never text: a call cut before its arguments begin is dropped, one cut inside them
is closed as a call (as Anthropic and OpenAI end a call max_tokens cuts). A free-form tool's call
(`<tool_call>\n{"name": "X"}\n...input...\n</tool_call>`) gives its input as it is, in fragments
like arguments."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum, auto

from grammars import ThinkingFormat, ToolFormat
from server.canonical import (
    Event,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

MAX_NAME = 256  # a "name" longer than this is not a call header: it is text


class _State(Enum):
    THINKING = auto()
    TEXT = auto()
    HEADER = auto()  # after the trigger, until the arguments begin
    ARGUMENTS = auto()
    INPUT = auto()  # a free-form call's input, until the call's end
    TAIL = auto()  # after the arguments' closing brace, until the call's end


class OutputParser:
    """Text that could still turn into a call (a prefix of the trigger) is held back until it
    cannot. In tool mode, whitespace between calls is not text."""

    def __init__(
        self,
        tools: ToolFormat | None,
        new_id: Callable[[], str],
        thinking: ThinkingFormat | None = None,
        sign: Callable[[str], str] = lambda text: "",
    ) -> None:
        self._format = tools
        self._new_id = new_id
        self._thinking = thinking
        self._sign = sign
        self._state = _State.THINKING if thinking else _State.TEXT
        self._buffer = ""
        self._reasoning: list[str] = []
        self._calls = 0
        self._after_block = False  # a call or the reasoning came before: text starts visibly
        self._in_text = False
        self._blank = ""  # whitespace at the start of a text block, held back
        self._arguments = _ObjectEnd()

    @property
    def num_calls(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Event]:
        if self._format is None and self._state == _State.TEXT and not self._after_block:
            return [TextDelta(text)] if text else []  # plain text: nothing to look for
        self._buffer += text
        events: list[Event] = []
        while self._step(events):
            pass
        return events

    def finish(self, cut: bool = False) -> list[Event]:
        """The answer ended (`cut`: by max_tokens): release what was held back, close a call
        cut inside its arguments, drop one cut before them. Held-back text that begins the
        call trigger is text where the model ended it, and the start of a call where it was
        cut."""
        events: list[Event] = []
        if self._state == _State.THINKING:
            self._think(self._buffer, events)
            events.append(ThinkingEnd(self._sign("".join(self._reasoning))))
        elif self._state == _State.TEXT:
            if not (cut and self._format is not None):
                self._text(self._buffer, events)
            if self._blank and not self._after_block:
                events.append(TextDelta(self._blank))
        elif self._state == _State.HEADER:
            pass  # the trigger and part of a header: not a call yet, never text
        elif self._state in (_State.ARGUMENTS, _State.INPUT):
            if self._buffer:
                events.append(ToolCallDelta(self._calls, self._buffer))
            events.append(ToolCallEnd(self._calls, complete=False))
        else:
            events.append(ToolCallEnd(self._calls))
        self._buffer = self._blank = ""
        return events

    def _step(self, events: list[Event]) -> bool:
        """One move of the state machine; False when it needs more text."""
        if self._state == _State.THINKING:
            assert self._thinking is not None
            return self._read_thinking(self._thinking, events)
        tools = self._format
        if self._state == _State.TEXT or tools is None:
            return self._read_text(tools, events)
        if self._state == _State.HEADER:
            return self._read_header(tools, events)
        if self._state == _State.ARGUMENTS:
            return self._read_arguments(events)
        if self._state == _State.INPUT:
            return self._read_input(tools, events)
        return self._read_tail(tools, events)

    def _read_thinking(self, thinking: ThinkingFormat, events: list[Event]) -> bool:
        end = self._buffer.find(thinking.close)
        if end < 0:
            held = _partial_suffix(self._buffer, thinking.close)
            self._think(self._buffer[: len(self._buffer) - held], events)
            self._buffer = self._buffer[len(self._buffer) - held :]
            return False
        self._think(self._buffer[:end], events)
        events.append(ThinkingEnd(self._sign("".join(self._reasoning))))
        self._buffer = self._buffer[end + len(thinking.close) :]
        self._after_block = True
        self._state = _State.TEXT
        return True

    def _think(self, text: str, events: list[Event]) -> None:
        if text:
            self._reasoning.append(text)
            events.append(ThinkingDelta(text))

    def _read_text(self, tools: ToolFormat | None, events: list[Event]) -> bool:
        if tools is None:
            self._text(self._buffer, events)
            self._buffer = ""
            return False
        start = self._buffer.find(tools.trigger)
        if start >= 0:
            self._text(self._buffer[:start], events)
            self._buffer = self._buffer[start:]
            self._state = _State.HEADER
            return True
        held = _partial_suffix(self._buffer, tools.trigger)
        self._text(self._buffer[: len(self._buffer) - held], events)
        self._buffer = self._buffer[len(self._buffer) - held :]
        return False

    def _read_header(self, tools: ToolFormat, events: list[Event]) -> bool:
        begin = tools.call_begin
        if len(self._buffer) < len(begin) and begin.startswith(self._buffer):
            return False
        ends = [
            (at, marker)
            for marker in (tools.arguments_begin, tools.input_begin)
            if (at := self._buffer.find(marker, len(begin))) >= 0
        ]
        if self._buffer.startswith(begin) and not ends and len(self._buffer) < MAX_NAME:
            return False
        if not self._buffer.startswith(begin) or not ends:
            # Not a call after all (the grammar makes this impossible when it is on): text.
            self._text(tools.trigger, events)
            self._buffer = self._buffer[len(tools.trigger) :]
            self._state = _State.TEXT
            return True
        end, marker = min(ends)
        name = self._buffer[len(begin) : end]
        events.append(ToolCallStart(self._calls, self._new_id(), name))
        self._in_text = False
        self._blank = ""
        self._buffer = self._buffer[end + len(marker) :]
        self._arguments = _ObjectEnd()
        self._state = _State.ARGUMENTS if marker == tools.arguments_begin else _State.INPUT
        return True

    def _read_arguments(self, events: list[Event]) -> bool:
        end = self._arguments.scan(self._buffer)
        fragment = self._buffer if end is None else self._buffer[:end]
        if fragment:
            events.append(ToolCallDelta(self._calls, fragment))
        self._buffer = "" if end is None else self._buffer[end:]
        if end is None:
            return False
        self._state = _State.TAIL
        return True

    def _read_input(self, tools: ToolFormat, events: list[Event]) -> bool:
        end = self._buffer.find(tools.input_end)
        if end < 0:
            held = _partial_suffix(self._buffer, tools.input_end)
            fragment = self._buffer[: len(self._buffer) - held]
            if fragment:
                events.append(ToolCallDelta(self._calls, fragment))
            self._buffer = self._buffer[len(fragment) :]
            return False
        if end:
            events.append(ToolCallDelta(self._calls, self._buffer[:end]))
        self._buffer = self._buffer[end + len(tools.input_end) :]
        self._end_call(events)
        return True

    def _read_tail(self, tools: ToolFormat, events: list[Event]) -> bool:
        end = tools.call_end
        if len(self._buffer) < len(end) and end.startswith(self._buffer):
            return False
        if self._buffer.startswith(end):
            self._buffer = self._buffer[len(end) :]
        self._end_call(events)
        return True

    def _end_call(self, events: list[Event]) -> None:
        events.append(ToolCallEnd(self._calls))
        self._calls += 1
        self._after_block = True
        self._state = _State.TEXT

    def _text(self, text: str, events: list[Event]) -> None:
        if not text:
            return
        if not self._in_text:
            # A text block does not open on whitespace alone: that is what separates calls.
            if not text.strip():
                self._blank += text
                return
            # Text after a call or the reasoning starts at its first visible character; text
            # before them keeps all of it.
            text = text.lstrip() if self._after_block else self._blank + text
            self._blank = ""
            self._in_text = True
        events.append(TextDelta(text))


class _ObjectEnd:
    """Finds where a JSON object ends in text arriving in pieces (strings and escapes aware)."""

    def __init__(self) -> None:
        self._depth = 0
        self._opened = False
        self._in_string = False
        self._escaped = False

    def scan(self, text: str) -> int | None:
        """The index just past the closing brace in `text`, or None if it has not come yet."""
        for index, char in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
                self._opened = True
            elif char in "}]":
                self._depth -= 1
                if self._opened and self._depth == 0:
                    return index + 1
        return None


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
