"""The output parser: raw text in any pieces -> the same canonical events."""

from __future__ import annotations

import itertools
import json

import pytest

from grammars import families
from server.canonical import (
    Event,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from server.output_parser import OutputParser

CHATML = families()[0].tools
assert CHATML is not None


def call(name: str, arguments: str) -> str:
    assert CHATML is not None
    return CHATML.call(name, arguments)


def parse(text: str, pieces: int | None = None, tools: bool = True) -> list[Event]:
    counter = itertools.count()
    parser = OutputParser(CHATML if tools else None, lambda: f"id{next(counter)}")
    size = pieces or len(text) or 1
    events: list[Event] = []
    for start in range(0, len(text), size):
        events += parser.feed(text[start : start + size])
    return events + parser.finish()


def merged(events: list[Event]) -> list[object]:
    """Adjacent text and argument fragments joined: what a client reassembles."""
    out: list[object] = []
    for event in events:
        if isinstance(event, TextDelta) and out and isinstance(out[-1], TextDelta):
            out[-1] = TextDelta(out[-1].text + event.text)
        elif isinstance(event, ThinkingDelta) and out and isinstance(out[-1], ThinkingDelta):
            out[-1] = ThinkingDelta(out[-1].text + event.text)
        elif isinstance(event, ToolCallDelta) and out and isinstance(out[-1], ToolCallDelta):
            out[-1] = ToolCallDelta(event.index, out[-1].arguments + event.arguments)
        else:
            out.append(event)
    return out


SAMPLES = [
    "Plain text, no calls.",
    call("get_weather", '{"city": "Oslo"}'),
    "Let me check.\n" + call("get_weather", '{"city": "Oslo"}'),
    call("a", '{"x": "}{\\"}"}') + "\n" + call("b", '{"n": [1, {"m": 2}]}'),
    "<tool_call> is how I would call, but not now.",
    "a < b <tool",
    "Patching.\n" + CHATML.call("apply_patch", "*** Begin\n+a }\n</tool\n*** End", True),
    CHATML.call("ns.exec", 'ls -l "x"', True) + "\n" + call("ns.get", '{"a": "\\"}\\n"}'),
]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("pieces", [1, 2, 3, 7, None])
def test_the_same_events_whatever_the_pieces(text: str, pieces: int | None) -> None:
    assert merged(parse(text, pieces)) == merged(parse(text))


def test_plain_text_passes_through_without_tools() -> None:
    text = call("get_weather", '{"city": "Oslo"}')
    assert merged(parse(text, 3, tools=False)) == [TextDelta(text)]


def test_a_call_becomes_start_fragments_end() -> None:
    events = merged(parse("Let me check.\n" + call("get_weather", '{"city": "Oslo"}'), 2))
    assert events == [
        TextDelta("Let me check.\n"),
        ToolCallStart(0, "id0", "get_weather"),
        ToolCallDelta(0, '{"city": "Oslo"}'),
        ToolCallEnd(0),
    ]


def test_two_calls_and_nothing_between_them() -> None:
    events = merged(parse(call("a", '{"x": "}{\\"}"}') + "\n" + call("b", '{"n": [1]}'), 1))
    assert [type(e).__name__ for e in events] == [
        "ToolCallStart", "ToolCallDelta", "ToolCallEnd",
        "ToolCallStart", "ToolCallDelta", "ToolCallEnd",
    ]  # fmt: skip
    assert json.loads(events[1].arguments) == {"x": '}{"}'}  # type: ignore[union-attr]


def test_text_that_only_looks_like_a_trigger_is_text() -> None:
    assert merged(parse("<tool_call> is how I would call", 4)) == [
        TextDelta("<tool_call> is how I would call")
    ]
    assert merged(parse("a < b <tool", 1)) == [TextDelta("a < b <tool")]


def test_a_call_cut_short_still_closes() -> None:
    cut = call("f", '{"a": 1}').index("}")  # max_tokens ends it inside the arguments
    events = merged(parse(call("f", '{"a": 1}')[:cut], 5))
    assert events == [
        ToolCallStart(0, "id0", "f"),
        ToolCallDelta(0, '{"a": 1'),
        ToolCallEnd(0, complete=False),
    ]


def test_text_after_a_call_starts_at_its_first_visible_character() -> None:
    events = merged(parse(call("f", "{}") + "\n\nDone.", 3))
    assert events[-1] == TextDelta("Done.")


def test_a_free_form_call_gives_its_input_as_it_is() -> None:
    patch = '*** Begin Patch\n+{"a": 1}\n+</tool_call\n*** End Patch'
    for pieces in (1, 4, None):
        events = merged(parse("Here.\n" + CHATML.call("apply_patch", patch, True), pieces))
        assert events == [
            TextDelta("Here.\n"),
            ToolCallStart(0, "id0", "apply_patch"),
            ToolCallDelta(0, patch),
            ToolCallEnd(0),
        ]


def test_free_form_and_json_calls_in_one_answer() -> None:
    text = CHATML.call("ns.exec", "ls", True) + "\n" + call("ns.get", '{"a": "}\\n"}')
    events = merged(parse(text, 1))
    assert events == [
        ToolCallStart(0, "id0", "ns.exec"),
        ToolCallDelta(0, "ls"),
        ToolCallEnd(0),
        ToolCallStart(1, "id1", "ns.get"),
        ToolCallDelta(1, '{"a": "}\\n"}'),
        ToolCallEnd(1),
    ]


def test_a_free_form_call_cut_short_is_closed_incomplete() -> None:
    text = CHATML.call("run", "echo hi\n</tool", True)
    cut = text.index("\n</tool_call>") + 4  # max_tokens ends it inside the end tag
    events = merged(parse(text[:cut], 2))
    assert events == [
        ToolCallStart(0, "id0", "run"),
        ToolCallDelta(0, "echo hi\n</tool\n</t"),
        ToolCallEnd(0, complete=False),
    ]


THINKING = families()[0].thinking


def think(text: str, pieces: int | None = None, tools: bool = False) -> list[Event]:
    counter = itertools.count()
    parser = OutputParser(
        CHATML if tools else None, lambda: f"id{next(counter)}", THINKING, lambda t: f"sig({t})"
    )
    size = pieces or len(text) or 1
    events: list[Event] = []
    for start in range(0, len(text), size):
        events += parser.feed(text[start : start + size])
    return merged(events + parser.finish())


@pytest.mark.parametrize("pieces", [1, 2, 5, None])
def test_the_answer_opens_inside_its_reasoning(pieces: int | None) -> None:
    assert think("Let me see.</think>\n\nNo: 17 x 23.", pieces) == [
        ThinkingDelta("Let me see."),
        ThinkingEnd("sig(Let me see.)"),
        TextDelta("No: 17 x 23."),
    ]


def test_reasoning_cut_short_still_ends_signed() -> None:
    assert think("Let me", 2) == [ThinkingDelta("Let me"), ThinkingEnd("sig(Let me)")]


def test_a_call_after_the_reasoning() -> None:
    events = think("Use the tool.</think>\n\n" + call("f", '{"a": 1}'), 3, tools=True)
    assert [type(e).__name__ for e in events] == [
        "ThinkingDelta", "ThinkingEnd", "ToolCallStart", "ToolCallDelta", "ToolCallEnd"
    ]  # fmt: skip


def cut_at(text: str, size: int, cut: bool = True) -> list[object]:
    """What a client sees of `text` ended after `size` characters (by max_tokens, `cut`)."""
    counter = itertools.count()
    parser = OutputParser(CHATML, lambda: f"id{next(counter)}")
    return merged(parser.feed(text[:size]) + parser.finish(cut))


def test_no_prefix_of_a_call_cut_short_is_ever_text() -> None:
    """Swept over every cut of a call that follows another: the model's tool syntax never
    comes back as text, however max_tokens falls."""
    first = call("get_weather", '{"city": "Oslo"}')
    text = first + "\n" + call("get_weather", '{"city": "Bergen"}')
    for size in range(len(first), len(text) + 1):
        events = cut_at(text, size)
        assert not [e for e in events if isinstance(e, TextDelta)], (size, events)
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        ends = [e for e in events if isinstance(e, ToolCallEnd)]
        assert len(starts) == len(ends) in (1, 2), (size, events)


def test_a_call_cut_before_its_arguments_is_dropped() -> None:
    header = '<tool_call>\n{"name": "get_weather", "argu'
    assert cut_at("Checking. " + header, 10 + len(header)) == [TextDelta("Checking. ")]


def test_a_call_cut_inside_its_arguments_is_closed_as_a_call() -> None:
    text = call("get_weather", '{"city": "Os')
    events = cut_at(text, len(text) - len("}\n</tool_call>"))
    assert events == [
        ToolCallStart(0, "id0", "get_weather"),
        ToolCallDelta(0, '{"city": "Os'),
        ToolCallEnd(0, complete=False),  # its arguments are not whole JSON
    ]


def test_text_ending_like_a_trigger_is_text_where_the_model_ended_it() -> None:
    assert cut_at("a <tool", 7, cut=False) == [TextDelta("a <tool")]
    assert cut_at("a <tool", 7, cut=True) == [TextDelta("a ")]
