"""The model's text, as it arrives, into canonical events, read by SGLang's own parsers: its
reasoning parser splits off the reasoning, its tool-call detector (the family's `tool_parser`)
reads the calls. The node adds what arriving text needs and the libraries leave to their
serving layer:

- markup arrives whole: the model's vocabulary writes each of its added tokens at once, so a
  piece of text is cut before and after each one, and a partial one at a piece's end waits for
  the rest (`Markup`);
- a detector sends a call's name before its arguments, one step at a time: after each piece it
  is asked again until it has nothing more;
- a call is announced with its first argument fragment and ends when the next call, text, or
  the answer's end comes; one cut by max_tokens inside its arguments is closed as incomplete, one
  cut before them is dropped, and no markup is ever text;
- a free-form call (OpenAI's custom tools), where no library has one, is read here from the
  family's own `free_form` strings, its input as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from grammars import libraries
from grammars.family import FreeFormCall
from grammars.recognize import ModelFormat
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

log = logging.getLogger(__name__)
# How many times a detector is asked again after one piece before it is deemed stuck.
MAX_DRAIN = 64
ARRIVING = "\ufffd"  # what a detokenizer writes for a character whose bytes are still to come
Calls = Literal["format", "json_array"]


class Markup:
    """Cuts text so that each markup string is a piece of its own; a piece that may be the
    start of one waits until it is whole or cannot be."""

    def __init__(self, strings: Sequence[str]) -> None:
        self._strings = sorted({s for s in strings if len(s) > 1}, key=len, reverse=True)
        self._prefixes = {s[:size] for s in self._strings for size in range(1, len(s))}
        self._longest = max(map(len, self._strings), default=0)
        self._held = ""

    def split(self, text: str) -> list[str]:
        text = self._held + text
        held = self._partial_end(text)
        self._held = text[len(text) - held :]
        return self.cut(text[: len(text) - held])

    def flush(self) -> str:
        """What waits, the answer having ended: the start of a marker (or plain text)."""
        held, self._held = self._held, ""
        return held

    def _partial_end(self, text: str) -> int:
        known = text.rstrip(ARRIVING)
        arriving = len(text) - len(known)
        for size in range(min(len(known), self._longest - 1), 0, -1):
            if known[len(known) - size :] in self._prefixes:
                return size + arriving
        return arriving

    def cut(self, text: str) -> list[str]:
        """`text` in pieces, each markup string one of its own."""
        pieces: list[str] = []
        start = index = 0
        while index < len(text):
            found = next((s for s in self._strings if text.startswith(s, index)), None)
            if found is None:
                index += 1
                continue
            if start < index:
                pieces.append(text[start:index])
            pieces.append(found)
            index = start = index + len(found)
        if start < len(text):
            pieces.append(text[start:])
        return pieces


_STRING_MARKS = re.compile(r'["\\\x00-\x1f]')


@dataclass(slots=True)
class _Strings:
    """Where a call's JSON arguments stand, fragment after fragment: in a string or not. A raw
    control character in a string goes out escaped, the same value in valid JSON: xgrammar
    (0.2.7) lets one into a string of bounded length (minLength, maxLength)."""

    inside: bool = False
    escaped: bool = False

    def escape(self, fragment: str) -> str:
        if not self.escaped and _STRING_MARKS.search(fragment) is None:
            return fragment  # no quote, backslash or control character: the state holds
        out = []
        for char in fragment:
            if self.inside and not self.escaped and char < " ":
                out.append(f"\\u{ord(char):04x}")
                continue
            out.append(char)
            if not self.inside:
                self.inside = char == '"'
            elif self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == '"':
                self.inside = False
        return "".join(out)


@dataclass(slots=True)
class _Call:
    index: int  # the answer's call number
    id: str
    name: str
    free_form: bool
    arguments: str = ""
    announced: bool = False
    detected: int | None = None  # the detector's index of it
    strings: _Strings = field(default_factory=_Strings)


class _Events:
    """The canonical events of one answer, text normalised as the protocols expect it."""

    def __init__(self, sign: Callable[[str], str]) -> None:
        self.out: list[Event] = []
        self._sign = sign
        self._reasoning: list[str] = []
        self.reasoning_open = False
        self._after_block = False  # reasoning or a call came before: text starts visibly
        self._in_text = False
        self._blank = ""  # whitespace that may open a text block, held back

    def think(self, text: str) -> None:
        if text:
            self.reasoning_open = True
            self._reasoning.append(text)
            self.out.append(ThinkingDelta(text))

    def end_thinking(self) -> None:
        if self.reasoning_open:
            self.reasoning_open = False
            self.out.append(ThinkingEnd(self._sign("".join(self._reasoning))))
            self._block()

    def text(self, text: str) -> None:
        if not text:
            return
        if not self._in_text:
            if not text.strip():  # whitespace alone separates blocks
                self._blank += text
                return
            text = text.lstrip() if self._after_block else self._blank + text
            self._blank = ""
            self._in_text = True
        self.out.append(TextDelta(text))

    def finish_text(self, keep: bool = True) -> None:
        """The answer ended: whitespace alone is its text where nothing else came (`keep`)."""
        if keep and self._blank and not self._after_block:
            self.out.append(TextDelta(self._blank))
        self._blank = ""

    def _block(self) -> None:
        self._after_block = True
        self._in_text = False
        self._blank = ""

    def call_event(self, event: Event) -> None:
        self._block()
        self.out.append(event)


class Reader:
    """One answer's reader. `reasons`: the answer has a reasoning phase; `opened`: the prompt
    ends inside it; `calls`: how its calls are written (the family's format, or SGLang's JSON
    array), None where the answer has none.

    Calls go out as SGLang's detector streams them, the arguments fragment by fragment; when
    the answer ends, SGLang's reading of the whole answer (`detect_and_parse`, as its server
    reads a non-streamed one) completes what the stream held back or missed."""

    def __init__(
        self,
        form: ModelFormat,
        tools: Sequence[Tool],
        new_id: Callable[[], str],
        *,
        reasons: bool = False,
        opened: bool = False,
        calls: Calls | None = None,
        sign: Callable[[str], str] = lambda text: "",
        tokenizer: Any = None,
    ) -> None:
        """`tokenizer`: the model's, for the parsers that read its vocabulary."""
        family = form.family
        self._tokenizer = tokenizer
        self._new_id = new_id
        self._events = _Events(sign)
        self._reasoning = None
        # Harmony's answer is framed in channels whether it reasons or not: its reasoning
        # parser reads the frames.
        if (reasons or family.answer_begin) and form.reasoning is not None:
            self._reasoning = libraries.reasoning_parser(
                form.reasoning.parser, opened, calls is not None, tokenizer
            )
            if opened:  # the prompt ends with the opening tag: the parser reads on from it
                self._reasoning.parse_stream_chunk(form.reasoning.open)
        self._calls_as = calls
        self._detector: Any = None
        self._tools = libraries.sglang_tools(tuple(tools)) if calls is not None else []
        self._schemas = {tool.name: tool.input_schema for tool in tools}
        # The tools with a string held to a set of values, whose streamed pairs `_held_pairs`
        # checks (every other fragment passes as it is).
        self._held_schemas = {
            name: schema for name, schema in self._schemas.items() if _holds_values(schema)
        }
        self._reads_after = family.reads_after
        self._tool_parser = family.tool_parser
        if calls == "json_array":
            self._detector = libraries.json_array_parser()
        elif calls is not None:
            assert family.tool_parser is not None
            parser = libraries.function_call_parser(family.tool_parser, self._tools, tokenizer)
            self._detector = parser.detector
            if family.reads_after:  # the prompt's end, which the detector reads on from
                self._detector.parse_streaming_increment(family.reads_after, self._tools)
        # The vocabulary's markup, and the parsers' own (a marker the vocabulary spells in
        # several tokens still reaches them whole).
        marked = [*form.markup, *_markers(self._detector), *_markers(self._reasoning)]
        self._markup = Markup(marked)
        free = [tool.name for tool in tools if tool.free_form is not None]
        self._free_form = _FreeFormCalls(family.free_form, free) if calls and free else None
        self._seen: list[str] = []  # the text the detector was given
        self._shown: list[str] = []  # the text it read of it that went out
        # Calls go out as the stream reads them, or (`streams_calls` false) when the answer
        # ends, from its whole reading; `_held` has the stream's calls then: name, arguments.
        self._live = calls == "json_array" or family.streams_calls
        self._held: dict[int, list[str]] = {}
        self._calls: list[_Call] = []
        self._by_detector: dict[int, _Call] = {}
        self._open: _Call | None = None

    @property
    def num_calls(self) -> int:
        return len(self._calls)

    def feed(self, text: str) -> list[Event]:
        for piece in self._markup.split(text):
            self._read(piece)
        return self._take()

    def finish(self, cut: bool = False) -> list[Event]:
        """The answer ended (`cut`: by max_tokens). What the parsers held back is text where the
        model ended the answer, and begun markup, never text, where it was cut."""
        held = self._markup.flush()
        if held and not cut:
            self._read(held, last=True)
        if self._reasoning is not None:
            reasoning, normal = self._reasoning.parse_stream_end()
            self._events.think(reasoning or "")
            if normal:
                self._answer(normal, last=True)
        self._events.end_thinking()
        if self._free_form is not None:
            for kind, text in self._free_form.finish(cut):
                self._route(kind, text, last=True)
        if self._detector is not None:
            result = self._detector.finish(self._tools)
            if not cut:
                self._plain(result.normal_text)
            self._take_calls([call for call in result.calls if call.name or call.parameters])
            self._unstreamed()
            if self._calls_as == "format":
                self._read_whole(cut)
            self._end_call(complete=not cut or self._past_open_call())
        self._end_call(complete=not cut)
        # Whitespace before a call max_tokens cut is not text either.
        self._events.finish_text(keep=not (cut and (self._calls or self._held)))
        return self._take()

    def _take(self) -> list[Event]:
        out, self._events.out = self._events.out, []
        return out

    def _read(self, piece: str, last: bool = False) -> None:
        """`last`: nothing follows it (the answer ended), so no marker it begins can come."""
        if self._reasoning is None:
            self._answer(piece, last)
            return
        reasoning, normal = self._reasoning.parse_stream_chunk(piece)
        self._events.think(reasoning or "")
        if normal:
            self._events.end_thinking()
            self._answer(normal, last)

    def _answer(self, text: str, last: bool = False) -> None:
        if self._free_form is None:
            self._route("text", text, last)
            return
        for kind, part in self._free_form.feed(text):
            self._route(kind, part, last)

    def _route(self, kind: str, text: str, last: bool = False) -> None:
        """`kind`: text, a free-form call's start (`text` its tool), its `input`, or its `end`."""
        if kind == "text":
            if self._detector is None:
                self._plain(text)
            else:
                for piece in self._markup.cut(text):
                    self._detect(piece)
        elif kind == "start":
            self._end_call(complete=True)
            self._open = self._new_call(text, free_form=True)
        elif kind == "input":
            self._arguments(self._open, text)
        else:
            self._end_call(complete=kind == "end")

    def _detect(self, text: str) -> None:
        """The stream's reading of one more piece: its text and its calls go out as they come."""
        self._seen.append(text)
        result = self._detector.parse_streaming_increment(text, self._tools)
        for _ in range(MAX_DRAIN):
            progress = [call for call in result.calls if call.name or call.parameters]
            if self._live:
                self._shown.append(result.normal_text)
                self._plain(result.normal_text)
                self._take_calls(progress)
            else:
                self._hold(progress, result.normal_text)
            if not progress and not result.normal_text:
                return
            result = self._detector.parse_streaming_increment("", self._tools)

    def _hold(self, items: Sequence[Any], text: str) -> None:
        """The stream's reading where calls wait for the whole one: its text goes out until a
        call begins; its calls are kept for a cut answer's last one."""
        if not self._held and text:
            self._shown.append(text)
            self._plain(text)
        for item in items:
            if item.name:
                self._held[item.tool_index] = [item.name, ""]
            elif item.tool_index in self._held:
                self._held[item.tool_index][1] += item.parameters

    def _read_whole(self, cut: bool) -> None:
        """SGLang's server reads a whole answer with `detect_and_parse`, which can read it
        otherwise than the stream (a call it took in one piece, what it held back): the calls
        it reads past those the stream sent go out, the open call's arguments are completed to
        its reading, and the text it reads past what went out follows. A call sent cannot be
        taken back: one read otherwise is logged."""
        if not self._seen:
            return
        assert self._tool_parser is not None
        parser = libraries.function_call_parser(self._tool_parser, self._tools, self._tokenizer)
        try:
            read = parser.detector.detect_and_parse(
                self._reads_after + "".join(self._seen), self._tools
            )
        except Exception:  # the library's reading failed on this text: the stream's stands
            log.exception("SGLang's %s parser failed on an answer", self._tool_parser)
            return
        sent = [call for call in self._calls if not call.free_form]
        ended = int(getattr(self._detector, "current_tool_id", len(read.calls)))
        for position, item in enumerate(read.calls):
            arguments = _held_to(item.parameters, self._schemas.get(item.name))
            if position >= len(sent):
                if not cut or not self._live:  # a call the stream did not send
                    self._whole_call(item.name, arguments, not cut or position < ended)
                continue
            call = sent[position]
            opened = call is self._open and call.name == item.name
            if opened and arguments.startswith(call.arguments):
                self._arguments(call, arguments[len(call.arguments) :])
                continue
            if call.name != item.name or not _same_json(call.arguments, arguments):
                log.warning(
                    "SGLang's %s parser reads call %d of an answer as %s %s, its stream as %s %s",
                    self._tool_parser, position, item.name, arguments, call.name, call.arguments,
                )  # fmt: skip
        held = list(self._held.values())
        # The calls the whole reading of a cut answer lacks, as the stream read them: whole
        # where the stream read past their end, and the one max_tokens cut.
        for position in range(len(read.calls), len(held) if cut else 0):
            name, arguments = held[position]
            arguments += self._unread(position, arguments)
            if arguments:  # cut inside its arguments (before them, it is no call)
                self._whole_call(name, arguments, position < ended)
        if not cut and len(sent) > len(read.calls):
            log.warning(
                "SGLang's %s parser reads %d calls in an answer, its stream %d",
                self._tool_parser, len(read.calls), len(sent),
            )  # fmt: skip
        if not cut:
            self._plain(_after(read.normal_text, "".join(self._shown)))

    def _whole_call(self, name: str, arguments: str, complete: bool) -> None:
        self._end_call(complete=True)
        self._open = self._new_call(name)
        self._arguments(self._open, arguments or "{}")
        self._end_call(complete)

    def _unread(self, index: int, sent: str) -> str:
        """What the stream had read of a call's arguments but not sent (it sends a difference
        once the next piece changes them), from the detector's own record of both."""
        read = getattr(self._detector, "prev_tool_call_arr", [])
        if index >= len(read) or "arguments" not in read[index]:
            return ""
        whole = json.dumps(read[index]["arguments"], ensure_ascii=False)
        return whole[len(sent) :] if whole.startswith(sent) else ""

    def _plain(self, text: str) -> None:
        if text.strip() and self._open is not None:
            self._end_call(complete=True)
        self._events.text(text)

    def _take_calls(self, items: Sequence[Any]) -> None:
        """Calls as the stream reads them."""
        for item in items:
            call = self._by_detector.get(item.tool_index)
            if item.name and (call is None or call.announced or call is not self._open):
                self._end_call(complete=True)
                call = self._by_detector[item.tool_index] = self._new_call(item.name)
                call.detected = item.tool_index
                self._open = call
            if item.parameters and call is not None:
                held = self._held_schemas.get(call.name)
                fragment = item.parameters if held is None else _held_pairs(item.parameters, held)
                self._arguments(call, fragment)

    def _unstreamed(self) -> None:
        call = self._open
        if call is not None and call.detected is not None:
            self._arguments(call, self._unread(call.detected, call.arguments))

    def _past_open_call(self) -> bool:
        """The detector had read the open call to its end when the answer was cut."""
        call = self._open
        if call is None or call.free_form or call.detected is None:
            return False
        return int(getattr(self._detector, "current_tool_id", -1)) > call.detected

    def _new_call(self, name: str, free_form: bool = False) -> _Call:
        call = _Call(len(self._calls), self._new_id(), name, free_form)
        self._calls.append(call)
        return call

    def _arguments(self, call: _Call | None, fragment: str) -> None:
        if call is None or not fragment:
            return
        if not call.free_form:
            fragment = call.strings.escape(fragment)
        if not call.announced:
            call.announced = True
            self._events.call_event(ToolCallStart(call.index, call.id, call.name))
        call.arguments += fragment
        self._events.out.append(ToolCallDelta(call.index, fragment))

    def _end_call(self, complete: bool) -> None:
        call, self._open = self._open, None
        if call is None:
            return
        if not call.announced:  # cut before its arguments began: not a call
            if complete and not call.free_form:  # a call of no arguments at all
                self._arguments(call, "{}")
            else:
                self._calls.remove(call)
                return
        self._events.call_event(ToolCallEnd(call.index, complete))


def _held_to(arguments: str, schema: dict[str, Any] | None) -> str:
    """The arguments with each string the schema holds to a set of values (an enum or const)
    taken without the whitespace around it, where only that whitespace kept it out of the set.
    xgrammar's XML styles let whitespace stand around such a value, and SGLang's XML detectors
    keep it in the value: the call the grammar allowed would not validate."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return arguments
    try:
        read = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(read, dict):
        return arguments
    changed = False
    for key, value in read.items():
        spec = properties.get(key)
        if not isinstance(value, str) or not isinstance(spec, dict):
            continue
        allowed = spec.get("enum", [spec["const"]] if "const" in spec else None)
        if isinstance(allowed, list) and value not in allowed and value.strip() in allowed:
            read[key], changed = value.strip(), True
    return json.dumps(read, ensure_ascii=False) if changed else arguments


def _holds_values(schema: dict[str, Any]) -> bool:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(properties, dict) and any(
        isinstance(spec, dict) and ("enum" in spec or "const" in spec)
        for spec in properties.values()
    )


def _held_pairs(fragment: str, schema: dict[str, Any] | None) -> str:
    """`_held_to` on a streamed fragment that holds whole pairs of an object (`"key": value`,
    as SGLang's XML detectors stream them, each parameter once it has ended)."""
    start = len(fragment) - len(fragment.lstrip(" ,{"))
    end = len(fragment.rstrip(" }"))
    pairs = fragment[start:end]
    if not pairs or schema is None:
        return fragment
    whole = "{" + pairs + "}"
    held = _held_to(whole, schema)
    return fragment if held == whole else fragment[:start] + held[1:-1] + fragment[end:]


def _same_json(one: str, other: str) -> bool:
    try:
        return bool(json.loads(one) == json.loads(other))
    except ValueError:
        return one == other


def _after(text: str, shown: str) -> str:
    """What `text` holds past `shown`, its beginning already out (however the two differ in
    the whitespace around them); nothing where it does not begin so."""
    if text.startswith(shown):
        return text[len(shown) :]
    kept, shown = text.strip(), shown.strip()
    return kept[len(shown) :] if kept.startswith(shown) else ""


def _markers(parser: Any) -> list[str]:
    """The markers a parser names: a tool-call detector's bot and eot tokens, a reasoning
    parser's think tokens."""
    parser = getattr(parser, "detector", parser)
    names = ("bot_token", "eot_token", "think_start_token", "think_end_token")
    return [found for name in names if isinstance(found := getattr(parser, name, None), str)]


@dataclass(slots=True)
class _FreeFormCalls:
    """Free-form calls in the family's own strings, taken out of the text before the tool-call
    detector sees it: `start` (the tool's name), `input` as it is, then `end` (or `cut`)."""

    form: FreeFormCall | None
    names: list[str]
    _held: str = ""
    _inside: bool = False
    _openings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.form is not None:
            self._openings = {self.form.opening(name): name for name in self.names}

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self.form is None:
            return [("text", text)]
        self._held += text
        out: list[tuple[str, str]] = []
        while self._step(self.form, out):
            pass
        return out

    def finish(self, cut: bool) -> list[tuple[str, str]]:
        held, self._held = self._held, ""
        if self._inside:
            return [("input", held), ("end" if not cut else "cut", "")]
        return [("text", held)] if held and not cut else []

    def _step(self, form: FreeFormCall, out: list[tuple[str, str]]) -> bool:
        if self._inside:
            end = self._held.find(form.end)
            if end < 0:
                keep = _partial_end(self._held, form.end)
                out.append(("input", self._held[: len(self._held) - keep]))
                self._held = self._held[len(self._held) - keep :]
                return False
            out += [("input", self._held[:end]), ("end", "")]
            self._held = self._held[end + len(form.end) :]
            self._inside = False
            return True
        starts = [(at, o) for o in self._openings if (at := self._held.find(o)) >= 0]
        if starts:
            at, opening = min(starts)
            out += [("text", self._held[:at]), ("start", self._openings[opening])]
            self._held = self._held[at + len(opening) :]
            self._inside = True
            return True
        keep = max((_partial_end(self._held, o) for o in self._openings), default=0)
        out.append(("text", self._held[: len(self._held) - keep]))
        self._held = self._held[len(self._held) - keep :]
        return False


def _partial_end(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
