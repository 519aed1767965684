"""The differential test: for every published template's format, random tools and arguments,
the calls written as the template writes them (and every way the grammar allows the whitespace
around them), the text split at random points, one character at a time, or into the
tokenizer's own tokens: the calls the node reads are exactly those SGLang reads in the same
text, as its server reads a whole answer. Where SGLang's stream reads the same answer otherwise
than its whole reading (a string value that holds the format's markup, which the grammar
allows), the node has sent the calls as they streamed: they are SGLang's stream's."""

from __future__ import annotations

import itertools
import json
import keyword
import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grammars import libraries
from grammars.family import families
from grammars.reading import Reader
from server.canonical import (
    Event,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolChoiceKind,
)
from tests.families.formats import Format, prepared, sglang_reads, sglang_streams
from tests.families.published import published
from tests.unit.grammar_check import accepts

ENTRIES = [
    pytest.param(index, id=entry.id)
    for index, entry in enumerate(published())
    if entry.writes_calls and entry.sglang_reads
]
# Drawn per format; DIFFERENTIAL_EXAMPLES=200 for a longer search.
EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "12"))
# The templates whose calls SGLang does not read as they write them (the family's grammar writes
# its own form), or that cannot write them: their calls are written here in the format's form.
# And the formats whose grammar writes JSON calls in a form of the family's own (its `call`:
# Mistral's array with ids).
OWN_FORM = [
    pytest.param(index, id=entry.id)
    for index, entry in enumerate(published())
    if not (entry.writes_calls and entry.sglang_reads)
    or any(
        found.tool_parser == entry.format and found.call and found.call.style == "json"
        for found in families()
    )
]
NAMES = ("get_weather", "read_file", "run_shell", "x", "search.web")
KEYS = ("city", "path", "n", "value", "query", "a_b", "items", "opts")
# What strings hold: the characters a format's markup is made of, quotes, escapes, newlines.
ALPHABET = st.sampled_from([*"ab Z09\n\t<>/=\"'{}[]:,\\|_-.", "é", "中", "😀", "\u2028"])


def schemas(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    scalar = st.sampled_from(
        [{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
         {"type": ["string", "null"]}, {"type": "array", "items": {"type": "string"}},
         {"type": "array", "items": {"type": "integer"}}]
    )  # fmt: skip
    field = scalar if depth == 0 else st.one_of(scalar, scalar, schemas(depth - 1))
    return st.dictionaries(st.sampled_from(KEYS), field, min_size=1, max_size=3).map(
        lambda properties: {
            "type": "object",
            "properties": properties,
            "required": sorted(properties),
        }
    )


def values(schema: dict[str, Any], markup: list[str]) -> st.SearchStrategy[Any]:
    kind = schema["type"]
    if kind == "object":
        keys = list(schema["properties"])  # in the schema's order, as the grammar writes them
        fields = [values(schema["properties"][key], markup) for key in keys]
        return st.tuples(*fields).map(lambda drawn: dict(zip(keys, drawn, strict=True)))
    if kind == "array":
        return st.lists(values(schema["items"], markup), max_size=3)
    if kind == ["string", "null"]:
        return st.one_of(st.none(), values({"type": "string"}, markup))
    if kind == "string":
        words = st.text(ALPHABET, max_size=12)
        pieces = st.lists(st.one_of(words, st.sampled_from(markup)), min_size=1, max_size=3)
        return pieces.map("".join) if markup else words
    if kind == "integer":
        return st.integers(-(10**12), 10**12)
    if kind == "number":
        return st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3))
    if kind == "boolean":
        return st.booleans()
    return st.none()


@st.composite
def answers(draw: st.DrawFn, found: Format) -> tuple[tuple[Tool, ...], list[Any], str]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    tools = tuple(Tool(name, None, draw(schemas())) for name in names)
    markup = markup_of(found)
    count = draw(st.integers(1, 3))
    calls = [
        (tool.name, draw(values(tool.input_schema, markup)))
        for tool in (draw(st.sampled_from(tools)) for _ in range(count))
    ]
    try:
        text = found.answer(calls, tools)
    except Exception:  # the template holds fewer calls a turn (Llama's one)
        calls = calls[:1]
        try:
            text = found.answer(calls, tools)
        except Exception:  # nor these tools (Hermes' fails on a "null" type): no such prompt
            assume(False)
    return tools, calls, text


def markup_of(found: Format) -> list[str]:
    """The format's own markup that a model can write inside a string value: the text of the
    detector's markers and of its calls' tags, less the vocabulary's special tokens (the grammar
    keeps a special token out of a value; its text, spelled in pieces, reads the same)."""
    family = found.form.family
    assert family.tool_parser is not None
    detector = libraries.tool_parsers()[family.tool_parser]()
    named = [getattr(detector, name, "") for name in ("bot_token", "eot_token")]
    tool = Tool("get_weather", None, {"type": "object", "properties": {}})
    found_grammar = grammar(found, (tool,)).constraint
    tags = re.findall(
        r'"(?:begin|end)": ?"((?:[^"\\]|\\.)*)"', found_grammar.value if found_grammar else ""
    )
    strings = [*named, *(json.loads(f'"{tag}"') for tag in tags)]
    special = re.compile("|".join(map(re.escape, found.form.markup)) or "$^")
    pieces = {piece.strip() for text in strings for piece in special.split(text)}
    return sorted(piece for piece in pieces if len(piece) > 1)


def grammar(found: Format, tools: tuple[Tool, ...]) -> Any:
    return found.prepared(tools, ToolChoice(ToolChoiceKind.ANY))[0]


@st.composite
def whitespace(draw: st.DrawFn, text: str) -> str:
    """The text with the whitespace next to its punctuation changed at a few places (kept
    where the grammar takes the change)."""
    places = [i for i, char in enumerate(text) if char in ",:{}[] \n"]
    if not places:
        return text
    for at in sorted(draw(st.lists(st.sampled_from(places), max_size=3, unique=True)),
                     reverse=True):  # fmt: skip
        change = draw(st.sampled_from(["", " ", "\n", "  "]))
        if text[at] in " \n":
            text = text[:at] + change + text[at + 1 :]
        else:
            text = text[: at + 1] + change + text[at + 1 :]
    return text


@st.composite
def splits(draw: st.DrawFn, found: Format, text: str) -> list[str]:
    how = draw(st.sampled_from(["characters", "pieces", "tokens", "whole"]))
    if how == "whole":
        return [text]
    if how == "characters":
        return list(text)
    if how == "tokens":
        encoded = found.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
        cuts = sorted({end for _, end in encoded.offsets if 0 < end < len(text)})
    else:
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def answered(pieces: list[str], before: str, markup: tuple[str, ...]) -> list[str]:
    """The answer's pieces (past `before`, the prompt's end), as a server's detokenizer gives
    them: a special token is never cut."""
    text = "".join(pieces)[len(before) :]
    ends, at = [], -len(before)
    for piece in pieces:
        at += len(piece)
        if 0 < at < len(text):
            ends.append(at)
    inside = {i for s in markup for m in re.finditer(re.escape(s), text) for i in
              range(m.start() + 1, m.end())}  # fmt: skip
    bounds = [0, *(end for end in ends if end not in inside), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def sglang_agrees(found: Format, tools: tuple[Tool, ...], text: str, pieces: list[str],
                  before: str, ours: list[Any]) -> bool:  # fmt: skip
    """The node read what SGLang reads in the whole answer, or, where SGLang's stream of it
    reads otherwise (and loses no call), what that stream reads. Raises where SGLang's whole
    reading fails."""
    theirs = sglang_reads(found.form, tools, text, found.tokenizer)
    if ours == theirs:
        return True
    streamed = sglang_streams(
        found.form, tools, answered(pieces, before, found.form.markup), found.tokenizer
    )
    # A call the stream lost (read as text) is no reading to follow: there the node waits for
    # the whole answer (the family's streams_calls).
    return streamed != theirs and ours == streamed and len(streamed) >= len(theirs)


def reads(reader: Reader, pieces: list[str]) -> list[Any]:
    events: list[Event] = []
    for piece in pieces:
        events += reader.feed(piece)
    events += reader.finish()
    return reads_events(events)


def reads_events(events: list[Event]) -> list[Any]:
    """The calls the events send, each with its arguments parsed (a cut one's as they came)."""
    calls: dict[int, list[Any]] = {}
    for event in events:
        if isinstance(event, ToolCallStart):
            calls[event.index] = [event.name, ""]
        elif isinstance(event, ToolCallDelta):
            calls[event.index][1] += event.arguments
    return [(name, _parsed(arguments)) for name, arguments in calls.values()]


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def read_alike(data: st.DataObject, found: Format, tools: tuple[Tool, ...], reader: Reader,
               before: str, text: str) -> bool:  # fmt: skip
    """The answer in pieces drawn, read by the node and by SGLang: they must agree. False where
    SGLang's parser fails on it (nothing to compare; the node reads on)."""
    pieces = data.draw(splits(found, before + text))
    ours = reads(reader, pieces)
    try:
        agrees = sglang_agrees(found, tools, text, pieces, before, ours)
    except Exception:
        return False
    assert agrees, (text, ours, sglang_reads(found.form, tools, text, found.tokenizer))
    return True


@pytest.mark.parametrize("index", ENTRIES)
def test_the_node_reads_the_calls_sglang_reads(index: int) -> None:
    found = prepared(index)
    slow = [HealthCheck.too_slow, HealthCheck.filter_too_much]

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=slow)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        tools, _, text = data.draw(answers(found))
        # As the node serves a request with these tools: the grammar of `auto`, which the text
        # must hold to (where the format has one), and the reader of its answer.
        try:
            grammar, reader, before = found.prepared(tools, ToolChoice(ToolChoiceKind.AUTO))
        except Exception:  # the template cannot show these tools (Muse's, some schemas)
            assume(False)
        constraint = grammar.constraint
        assume(constraint is None or accepts(found.tokenizer, constraint, before + text))
        varied = data.draw(whitespace(text))
        if constraint is None or accepts(found.tokenizer, constraint, before + varied):
            text = varied
        if read_alike(data, found, tools, reader, before, text):
            compared.append(text)

    compared: list[str] = []
    check()
    assert len(compared) >= EXAMPLES // 2, f"only {len(compared)} answers SGLang reads"


def written(found: Format, calls: list[Any], afters: list[str]) -> str:
    """Calls in the form the family's grammar writes them (its `call`, `afters` what follows
    each one's arguments), or as Python's calls (the pythonic format: a list of calls, each
    argument a Python literal)."""
    family = found.form.family
    if family.call is None:
        assert family.tool_parser == "pythonic"
        shown = ", ".join(
            f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"
            for name, arguments in calls
        )
        return f"[{shown}]"
    call = family.call
    each = [call.opening(name) + json.dumps(arguments) + after + call.end
            for (name, arguments), after in zip(calls, afters, strict=True)]  # fmt: skip
    return call.block_begin + call.separator.join(each) + call.block_end


@pytest.mark.parametrize("index", OWN_FORM)
def test_the_node_reads_the_calls_sglang_reads_in_the_form_the_grammar_writes(index: int) -> None:
    found = prepared(index)
    slow = [HealthCheck.too_slow, HealthCheck.filter_too_much]

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=slow)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        names = data.draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
        tools = tuple(Tool(name, None, data.draw(schemas())) for name in names)
        grammar, reader, before = found.prepared(tools, ToolChoice(ToolChoiceKind.AUTO))
        count = 1 if found.form.family.one_call else data.draw(st.integers(1, 3))
        markup = markup_of(found)
        calls = [(tool.name, data.draw(values(tool.input_schema, markup)))
                 for tool in (data.draw(st.sampled_from(tools)) for _ in range(count))]  # fmt: skip
        after = found.form.family.call and found.form.family.call.after
        afters = [data.draw(st.from_regex(after, fullmatch=True)) if after else "" for _ in calls]
        text = written(found, calls, afters)
        constraint = grammar.constraint
        assume(constraint is None or accepts(found.tokenizer, constraint, before + text))
        if read_alike(data, found, tools, reader, before, text):
            compared.append(text)

    compared: list[str] = []
    check()
    assert len(compared) >= EXAMPLES // 2, f"only {len(compared)} answers SGLang reads"


def test_names_are_not_python_keywords() -> None:
    """The drawn tools' names and keys stay names in every format (Python calls included)."""
    assert not any(keyword.iskeyword(name) for name in (*NAMES, *KEYS))


@pytest.mark.parametrize("index", [param for param in OWN_FORM if "Mistral-Small-3.1" in param.id])
def test_an_array_cut_in_its_second_call_leaves_the_first_whole_and_no_text(index: int) -> None:
    """SGLang's stream of Mistral's array reads the second call as text: the node waits for
    the whole answer, and max_tokens cutting the second call leaves the first a whole call."""
    found = prepared(index)
    tool = Tool("get_time", None, {"type": "object", "properties": {"hours": {"type": "integer"}}})
    _, reader, before = found.prepared((tool,), ToolChoice(ToolChoiceKind.ANY))
    text = written(found, [("get_time", {"hours": 0}), ("get_time", {"hours": 12})],
                   [', "id": "abcdefghi"', ', "id": "bcdefghij"'])  # fmt: skip
    events: list[Event] = []
    for char in before + text[: text.rindex("12")]:
        events += reader.feed(char)
    events += reader.finish(cut=True)
    assert not [event for event in events if isinstance(event, TextDelta)], events
    assert next(event for event in events if isinstance(event, ToolCallEnd)).complete
    assert reads_events(events)[0] == ("get_time", {"hours": 0})


KIMI = [param for param in ENTRIES if param.id == "Kimi-K2-Thinking"]


@pytest.mark.parametrize("index", KIMI)
@pytest.mark.parametrize("split", ["whole", "characters"])
def test_a_raw_control_character_in_a_string_goes_out_escaped(index: int, split: str) -> None:
    """xgrammar lets a raw control character into a string of bounded length
    (test_constraints), and Kimi's detector passes the arguments on as written: the node's
    arguments are JSON of the same value."""
    found = prepared(index)
    tool = Tool("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}})
    _, reader, before = found.prepared((tool,), ToolChoice(ToolChoiceKind.ANY))
    text = found.answer([("get_weather", {"city": "Par-is"})], (tool,)).replace("-", "\x07")
    pieces = [before + text] if split == "whole" else list(before + text)
    assert reads(reader, pieces) == [("get_weather", {"city": "Par\x07is"})]
