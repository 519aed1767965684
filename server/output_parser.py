"""The output parser: the model's raw text, as it arrives, into canonical events. With a family's
thinking format, the answer opens inside the reasoning, which ends at its close tag; with its tool
format, calls written in it (`<tool_call>\\n{"name": "X", "arguments": {...}}\\n</tool_call>` for
ChatML) become call start, argument fragments and call end; everything else is text. The model's
tool syntax is never text: a call cut before its arguments begin is dropped, one cut inside them
is closed as a call (as Anthropic and OpenAI end a call max_tokens cuts). A free-form tool's call
(`<tool_call>\n{"name": "X"}\n...input...\n</tool_call>`) gives its input as it is, in fragments
like arguments."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum, auto
from typing import Any, Protocol

import orjson

from grammars import ThinkingFormat, ToolFormat
from server.canonical import (
    Event,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    Tool,
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
    BLOCK = auto()  # inside a block of calls (a format with one), between calls


class OutputParser:
    """Text that could still turn into a call (a prefix of the trigger) is held back until it
    cannot. In tool mode, whitespace between calls is not text."""

    def __init__(
        self,
        tools: ToolFormat | None,
        new_id: Callable[[], str],
        thinking: ThinkingFormat | None = None,
        sign: Callable[[str], str] = lambda text: "",
        declared: Sequence[Tool] = (),
        answer_begin: str = "",
    ) -> None:
        """`declared`: the request's tools (which take free-form input, their schemas);
        `answer_begin`: the markup a text answer opens with (Harmony's final channel)."""
        self._format = tools
        self._answer_begin = answer_begin
        # Markup expected next, in order, each never text: after reasoning what separates it
        # from the answer, then the answer's opening.
        self._skips = [answer_begin] if answer_begin and not thinking else []
        self._declared = {tool.name: tool for tool in declared}
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
        self._arguments: _Arguments = _ObjectEnd()

    @property
    def num_calls(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Event]:
        if (
            self._format is None
            and self._state == _State.TEXT
            and not self._after_block
            and not self._skips
        ):
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
        if self._skips and _may_begin(self._buffer, self._skips[0]):
            self._buffer = ""  # markup begun, never text
        if self._state == _State.THINKING:
            self._think(self._buffer, events)
            events.append(ThinkingEnd(self._sign("".join(self._reasoning))))
        elif self._state == _State.TEXT:
            if not (cut and self._format is not None):
                self._text(self._buffer, events)
            if self._blank and not self._after_block:
                events.append(TextDelta(self._blank))
        elif self._state in (_State.HEADER, _State.BLOCK):
            pass  # the trigger and part of a header: not a call yet, never text
        elif self._state in (_State.ARGUMENTS, _State.INPUT):
            held = self._arguments.flush() if self._state == _State.ARGUMENTS else self._buffer
            if held:
                events.append(ToolCallDelta(self._calls, held))
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
        if self._skips:
            return self._read_skip()
        tools = self._format
        if self._state == _State.TEXT or tools is None:
            return self._read_text(tools, events)
        if self._state == _State.HEADER:
            return self._read_header(tools, events)
        if self._state == _State.BLOCK:
            return self._read_block(tools)
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
        self._skips = [m for m in (thinking.after.strip(), self._answer_begin) if m]
        self._state = _State.TEXT
        return True

    def _read_skip(self) -> bool:
        """The markup expected next, dropped where it comes; where it does not, nothing."""
        marker = self._skips[0]
        rest = self._buffer.lstrip() if self._after_block else self._buffer
        if rest.startswith(marker):
            self._buffer = rest[len(marker) :]
        elif _may_begin(rest, marker):
            return False  # arriving
        self._skips.pop(0)
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
            if tools.block_begin:
                self._buffer = self._buffer[len(tools.block_begin) :]
                self._state = _State.BLOCK
            return True
        held = _partial_suffix(self._buffer, tools.trigger)
        self._text(self._buffer[: len(self._buffer) - held], events)
        self._buffer = self._buffer[len(self._buffer) - held :]
        return False

    def _read_header(self, tools: ToolFormat, events: list[Event]) -> bool:
        begin = tools.call_begin
        if len(self._buffer) < len(begin) and _may_begin(self._buffer, begin):
            return False
        ends = [
            (at, marker)
            for marker in (tools.arguments_begin, tools.input_begin)
            if marker and (at := self._buffer.find(marker, len(begin))) >= 0
        ]
        if self._buffer.startswith(begin) and not ends and len(self._buffer) < MAX_NAME:
            return False
        if not self._buffer.startswith(begin) or not ends:
            # Not a call after all (the grammar makes this impossible when it is on): text.
            if not tools.block_begin:
                self._text(tools.trigger, events)
                self._buffer = self._buffer[len(tools.trigger) :]
            self._state = _State.TEXT
            return True
        end, marker = min(ends)
        name = self._buffer[len(begin) : end]
        tool = self._declared.get(name)
        if tool is not None:  # the tool decides which marker follows its name
            wanted = tools.input_begin if tool.free_form is not None else tools.arguments_begin
            after = self._buffer[end:]
            if after.startswith(wanted):
                marker = wanted
            elif _may_begin(after, wanted):
                return False  # it is arriving
        free_form = marker == tools.input_begin
        events.append(ToolCallStart(self._calls, self._new_id(), name))
        self._in_text = False
        self._blank = ""
        self._buffer = self._buffer[end + len(marker) :]
        self._arguments = _ObjectEnd()
        if tools.arguments == "qwen_xml":
            self._arguments = _XmlArguments(tool.input_schema if tool is not None else {})
        self._state = _State.INPUT if free_form else _State.ARGUMENTS
        return True

    def _read_block(self, tools: ToolFormat) -> bool:
        """Between the calls of a block: the next call, or the block's end."""
        rest = self._buffer.removeprefix(tools.separator).lstrip()
        if rest.startswith(tools.call_begin):
            self._buffer = rest
            self._state = _State.HEADER
            return True
        if rest.startswith(tools.block_end):
            self._buffer = rest[len(tools.block_end) :]
            self._after_block = True
            self._state = _State.TEXT
            return True
        if any(_may_begin(rest, marker) for marker in (tools.call_begin, tools.block_end)):
            return False  # arriving
        self._buffer = rest  # not the format (the grammar makes this impossible): text again
        self._state = _State.TEXT
        return True

    def _read_arguments(self, events: list[Event]) -> bool:
        fragment, rest = self._arguments.feed(self._buffer)
        if fragment:
            events.append(ToolCallDelta(self._calls, fragment))
        self._buffer = rest or ""
        if rest is None:
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
        end = tools.tail
        if len(self._buffer) < len(end) and _may_begin(self._buffer, end):
            return False
        if self._buffer.startswith(end):
            self._buffer = self._buffer[len(end) :]
        self._end_call(events)
        return True

    def _end_call(self, events: list[Event]) -> None:
        events.append(ToolCallEnd(self._calls))
        self._calls += 1
        self._after_block = True
        in_block = self._format is not None and self._format.block_begin
        self._state = _State.BLOCK if in_block else _State.TEXT

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


class _Arguments(Protocol):
    def feed(self, text: str) -> tuple[str, str | None]:
        """The arguments' JSON text this text adds, and the text after the arguments once they
        end (None: they go on; what may still be markup is held)."""
        ...

    def flush(self) -> str:
        """What is held, as arguments text: the call was cut."""
        ...


class _ObjectEnd:
    """Finds where a JSON object ends in text arriving in pieces (strings and escapes aware)."""

    def __init__(self) -> None:
        self._depth = 0
        self._opened = False
        self._in_string = False
        self._escaped = False

    def feed(self, text: str) -> tuple[str, str | None]:
        end = self.scan(text)
        return (text, None) if end is None else (text[:end], text[end:])

    def flush(self) -> str:
        return ""

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


PARAMETER, PARAMETER_END, FUNCTION_END = "<parameter=", "</parameter>", "</function>"


class _XmlArguments:
    """Qwen's XML parameters, `<parameter=KEY>\\nVALUE\\n</parameter>` each, as the JSON object
    they stand for, in fragments: a plain string's value streams as it comes (the newline the
    format puts on each side of it is not part of it); any other value follows whole at its end
    tag, as the schema types it (`_kind`). The arguments end at `</function>`."""

    def __init__(self, schema: dict[str, Any]) -> None:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        self._properties: dict[str, Any] = properties if isinstance(properties, dict) else {}
        self._held = ""
        self._count = 0
        self._kind: str | None = None  # inside a parameter's value, of this kind
        self._opened = False  # a streamed value's first newline is dealt with

    def feed(self, text: str) -> tuple[str, str | None]:
        self._held += text
        out: list[str] = []
        while True:
            if self._kind is not None:
                if not self._value(self._kind, out):
                    return "".join(out), None
                continue
            rest = self._held.lstrip()
            if rest.startswith(PARAMETER):
                close = rest.find(">", len(PARAMETER))
                if close < 0:
                    self._held = rest
                    return "".join(out), None
                key = rest[len(PARAMETER) : close]
                out.append(("{" if not self._count else ", ") + _json_string(key) + ": ")
                self._count += 1
                self._kind = _kind(self._properties.get(key))
                self._opened = False
                self._held = rest[close + 1 :]
                if self._kind == "text":
                    out.append('"')
                continue
            if not rest.startswith(FUNCTION_END) and (
                PARAMETER.startswith(rest) or FUNCTION_END.startswith(rest)
            ):
                self._held = rest  # markup may be arriving
                return "".join(out), None
            out.append("}" if self._count else "{}")
            self._held = ""
            return "".join(out), rest

    def flush(self) -> str:
        held, self._held = self._held, ""
        return _escaped(held) if self._kind == "text" else ""

    def _value(self, kind: str, out: list[str]) -> bool:
        """Reads the current value on; False when it needs more text."""
        if kind == "text":
            if not self._opened:
                if not self._held:
                    return False
                self._held = self._held.removeprefix("\n")
                self._opened = True
            end = self._held.find(PARAMETER_END)
            if end < 0:
                held = _partial_suffix(self._held, "\n" + PARAMETER_END)
                out.append(_escaped(self._held[: len(self._held) - held]))
                self._held = self._held[len(self._held) - held :]
                return False
            out.append(_escaped(self._held[:end].removesuffix("\n")) + '"')
        else:
            end = self._held.find(PARAMETER_END)
            if end < 0:
                return False
            out.append(_typed(self._held[:end], kind))
        self._held = self._held[end + len(PARAMETER_END) :]
        self._kind = None
        return True


def _kind(schema: Any) -> str:
    """How a parameter's value is written: `text`, a plain string, as it is; `word`, a string
    held to an enum, a pattern or a length, as it is between any whitespace; `json`, a value of
    no string type; `mixed`, a string or another type (JSON where it reads as JSON)."""
    if not isinstance(schema, dict) or not schema:
        return "mixed"
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return "word" if all(isinstance(value, str) for value in values) else "mixed"
    kind = schema.get("type")
    if kind == "string":
        held = ("pattern", "format", "minLength", "maxLength")
        return "word" if any(key in schema for key in held) else "text"
    if isinstance(kind, str):
        return "json"
    return "mixed"


def _typed(value: str, kind: str) -> str:
    if kind == "word":
        return _json_string(value.strip())
    text = value.removeprefix("\n").removesuffix("\n")
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _json_string(text)
    if kind == "mixed" and isinstance(parsed, str):
        return _json_string(text)  # a quoted string is a string with its quotes
    return orjson.dumps(parsed).decode()


def _json_string(text: str) -> str:
    return orjson.dumps(text).decode()


def _escaped(text: str) -> str:
    return _json_string(text)[1:-1]


def _may_begin(text: str, marker: str) -> bool:
    """All of `text` may be the start of `marker` (the empty text too)."""
    return len(text) < len(marker) and _partial_suffix(text, marker) == len(text)


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`. Text ending in U+FFFD ends
    in a character whose bytes are still arriving (a detokenizer writes that for the bytes so
    far): it may begin the marker's next character where that is not ASCII (DeepSeek's
    fullwidth bars)."""
    known = text.rstrip("\ufffd")
    arriving = len(text) - len(known)
    for size in range(min(len(known), len(marker) - 1), -1, -1):
        if arriving and not (size < len(marker) and not marker[size].isascii()):
            continue
        if size and known.endswith(marker[:size]):
            return size + arriving
        if not size and arriving:
            return arriving
    return 0
