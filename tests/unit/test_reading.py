"""The reader on the embedded model's format (ChatML taught Qwen's JSON calls, read by SGLang's
qwen25 detector): calls into start, fragments and end whatever the pieces the text comes in,
free-form calls, reasoning, and what max_tokens cuts."""

from __future__ import annotations

import itertools
import json
from functools import cache

import pytest

from grammars import ModelFormat, format_of
from grammars.prompt import taught_call
from grammars.reading import Markup, Reader
from server.canonical import (
    Event,
    FreeForm,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer

ANY: dict[str, object] = {"type": "object"}
TOOLS = (
    *(Tool(name, None, ANY) for name in ("get_weather", "a", "b", "f", "ns.get")),
    *(Tool(name, None, {}, free_form=FreeForm()) for name in ("apply_patch", "ns.exec", "run")),
)


@cache
def chatml() -> ModelFormat:
    return format_of(load_tokenizer(str(ensure_converted(default_cache_dir()))))


def call(name: str, arguments: str, free_form: bool = False) -> str:
    return taught_call(chatml().family, ToolCall("c", name, arguments, free_form))


def reader(tools: bool = True, reasons: bool = False) -> Reader:
    counter = itertools.count()
    return Reader(
        chatml(), TOOLS, lambda: f"id{next(counter)}", reasons=reasons, opened=reasons,
        calls="format" if tools else None, sign=lambda text: f"sig({text})",
    )  # fmt: skip


def parse(text: str, pieces: int | None = None, tools: bool = True, reasons: bool = False,
          cut: bool = False) -> list[Event]:  # fmt: skip
    read = reader(tools, reasons)
    size = pieces or len(text) or 1
    events: list[Event] = []
    for start in range(0, len(text), size):
        events += read.feed(text[start : start + size])
    return merged(events + read.finish(cut))


def merged(events: list[Event]) -> list[Event]:
    """Adjacent text and argument fragments joined: what a client reassembles."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + event.text)
        elif isinstance(event, ThinkingDelta) and isinstance(last, ThinkingDelta):
            out[-1] = ThinkingDelta(last.text + event.text)
        elif isinstance(event, ToolCallDelta) and isinstance(last, ToolCallDelta):
            out[-1] = ToolCallDelta(event.index, last.arguments + event.arguments)
        else:
            out.append(event)
    return out


SAMPLES = [
    "Plain text, no calls.",
    lambda: call("get_weather", '{"city": "Oslo"}'),
    lambda: "Let me check.\n" + call("get_weather", '{"city": "Oslo"}'),
    lambda: call("a", '{"x": "}{\\"}"}') + "\n" + call("b", '{"n": [1, {"m": 2}]}'),
    "a < b <tool",
    lambda: "Patching.\n" + call("apply_patch", "*** Begin\n+a }\n</tool\n*** End", True),
    lambda: call("ns.exec", 'ls -l "x"', True) + "\n" + call("ns.get", '{"a": "\\"}\\n"}'),
]


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
@pytest.mark.parametrize("pieces", [1, 2, 3, 7, None])
def test_the_same_events_whatever_the_pieces(sample: int, pieces: int | None) -> None:
    found = SAMPLES[sample]
    text = found if isinstance(found, str) else found()
    assert parse(text, pieces) == parse(text)


def test_plain_text_passes_through_without_tools() -> None:
    text = call("get_weather", '{"city": "Oslo"}')
    assert parse(text, 3, tools=False) == [TextDelta(text)]


def test_a_call_becomes_start_fragments_end() -> None:
    events = parse("Let me check.\n" + call("get_weather", '{"city": "Oslo"}'), 2)
    assert events == [
        TextDelta("Let me check.\n"),
        ToolCallStart(0, "id0", "get_weather"),
        ToolCallDelta(0, '{"city": "Oslo"}'),
        ToolCallEnd(0),
    ]


def test_a_calls_arguments_go_out_as_they_are_written() -> None:
    text = call("get_weather", '{"city": "Oslo", "days": 3}')
    read, out = reader(), []
    for char in text[: text.index("3")]:  # the answer so far: the call has not ended
        out += read.feed(char)
    fragments = [e.arguments for e in out if isinstance(e, ToolCallDelta)]
    assert len(fragments) > 1
    assert "".join(fragments).startswith('{"city": "Osl')


def test_two_calls_and_nothing_between_them() -> None:
    events = parse(call("a", '{"x": "}{\\"}"}') + "\n" + call("b", '{"n": [1]}'), 1)
    assert [type(e).__name__ for e in events] == [
        "ToolCallStart", "ToolCallDelta", "ToolCallEnd",
        "ToolCallStart", "ToolCallDelta", "ToolCallEnd",
    ]  # fmt: skip
    assert json.loads(events[1].arguments) == {"x": '}{"}'}  # type: ignore[union-attr]


def test_a_free_form_call_gives_its_input_as_it_is() -> None:
    patch = '*** Begin Patch\n+{"a": 1}\n+</tool_call\n*** End Patch'
    for pieces in (1, 4, None):
        events = parse("Here.\n" + call("apply_patch", patch, True), pieces)
        assert events == [
            TextDelta("Here.\n"),
            ToolCallStart(0, "id0", "apply_patch"),
            ToolCallDelta(0, patch),
            ToolCallEnd(0),
        ]


def test_free_form_and_json_calls_in_one_answer() -> None:
    text = call("ns.exec", "ls", True) + "\n" + call("ns.get", '{"a": "}\\n"}')
    assert parse(text, 1) == [
        ToolCallStart(0, "id0", "ns.exec"),
        ToolCallDelta(0, "ls"),
        ToolCallEnd(0),
        ToolCallStart(1, "id1", "ns.get"),
        ToolCallDelta(1, '{"a": "}\\n"}'),
        ToolCallEnd(1),
    ]


def test_a_free_form_call_cut_short_is_closed_incomplete() -> None:
    text = call("run", "echo hi\n</tool", True)
    cut = text.index("\n</tool_call>") + 4  # max_tokens ends it inside the end tag
    assert parse(text[:cut], 2, cut=True) == [
        ToolCallStart(0, "id0", "run"),
        ToolCallDelta(0, "echo hi\n</tool"),  # the end tag begun is markup, never input
        ToolCallEnd(0, complete=False),
    ]


@pytest.mark.parametrize("pieces", [1, 2, 5, None])
def test_the_answer_opens_inside_its_reasoning(pieces: int | None) -> None:
    assert parse("Let me see.</think>\n\nNo: 17 x 23.", pieces, tools=False, reasons=True) == [
        ThinkingDelta("Let me see."),
        ThinkingEnd("sig(Let me see.)"),
        TextDelta("No: 17 x 23."),
    ]


def test_reasoning_cut_short_still_ends_signed() -> None:
    events = parse("Let me", 2, tools=False, reasons=True, cut=True)
    assert events == [ThinkingDelta("Let me"), ThinkingEnd("sig(Let me)")]


def test_a_call_after_the_reasoning() -> None:
    events = parse("Use the tool.</think>\n\n" + call("f", '{"a": 1}'), 3, reasons=True)
    assert [type(e).__name__ for e in events] == [
        "ThinkingDelta", "ThinkingEnd", "ToolCallStart", "ToolCallDelta", "ToolCallEnd"
    ]  # fmt: skip


def test_no_prefix_of_a_call_cut_short_is_ever_text() -> None:
    """Swept over every cut of a call that follows another: the model's tool syntax never
    comes back as text, however max_tokens falls."""
    first = call("get_weather", '{"city": "Oslo"}')
    text = first + "\n" + call("get_weather", '{"city": "Bergen"}')
    for size in range(len(first), len(text) + 1):
        events = parse(text[:size], cut=True)
        assert not [e for e in events if isinstance(e, TextDelta)], (size, events)
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        ends = [e for e in events if isinstance(e, ToolCallEnd)]
        assert len(starts) == len(ends) in (1, 2), (size, events)


def test_a_call_cut_before_its_arguments_is_dropped() -> None:
    header = '<tool_call>\n{"name": "get_weather", "argu'
    assert parse("Checking. " + header, cut=True) == [TextDelta("Checking. ")]


def test_a_call_cut_inside_its_arguments_is_closed_as_a_call() -> None:
    text = call("get_weather", '{"city": "Os')
    events = parse(text[: len(text) - len("}\n</tool_call>")], cut=True)
    assert events[0] == ToolCallStart(0, "id0", "get_weather")
    assert events[-1] == ToolCallEnd(0, complete=False)
    # what the detector had read of them, as SGLang's server sends it at the end
    arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(arguments) == {"city": "Os"}


def test_text_ending_like_a_trigger_is_text_where_the_model_ended_it() -> None:
    assert parse("a <tool", cut=False) == [TextDelta("a <tool")]
    assert parse("a <tool", cut=True) == [TextDelta("a ")]


def test_markup_is_cut_out_whole_and_waited_for() -> None:
    markup = Markup(["<tool_call>", "</tool_call>", "<|im_end|>"])
    assert markup.split("a<tool_") == ["a"]
    assert markup.split("call>{}</tool_call>b<") == ["<tool_call>", "{}", "</tool_call>", "b"]
    assert markup.flush() == "<"
