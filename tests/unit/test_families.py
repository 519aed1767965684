"""Each family as its own template and SGLang's own format define it: the family a template gets,
the prompt its template renders, calls that its grammar accepts and its parser reads back the
same, whatever the pieces they arrive in."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from xgrammar import GrammarCompiler, GrammarMatcher, TokenizerInfo, get_model_structural_tag

from grammars import ModelFamily, UnknownFormat, family, family_for
from server.canonical import (
    Event,
    GenerateRequest,
    Message,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
)
from server.config import default_cache_dir
from server.constraints import constraint_for
from server.models.embedded import ensure_converted
from server.output_parser import OutputParser
from server.prompt import PromptRenderer
from server.tokenizer import load_tokenizer
from tests.families.tiny import HERE, QWEN3_5, make

QWEN = family("qwen3_coder")
XML = QWEN.tools
assert XML is not None
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "options": {"type": "object", "properties": {"hourly": {"type": "boolean"}}},
        "note": {"type": ["string", "null"]},
    },
    "required": ["city"],
}
TOOLS = (Tool("get_weather", "The weather.", SCHEMA), Tool("noop", None, {"type": "object"}))
ARGUMENTS = [
    {"city": "Paris"},
    {"city": 'Rio de\nJaneiro "quoted" <b>', "days": 3, "unit": "celsius"},
    {"city": "", "options": {"hourly": True}, "note": None},
    {"city": "  spaced  ", "note": "a note"},
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    embedded = ensure_converted(default_cache_dir())
    return make(tmp_path_factory.mktemp("qwen3_5"), QWEN3_5, embedded)


@pytest.fixture(scope="module")
def renderer(tiny: Path) -> PromptRenderer:
    tokenizer = load_tokenizer(str(tiny))
    return PromptRenderer(tokenizer, family_for(tokenizer.chat_template))


def test_a_template_decides_its_family() -> None:
    embedded = ensure_converted(default_cache_dir())
    assert family_for((embedded / "chat_template.jinja").read_text()).name == "chatml"
    assert family_for((HERE / "qwen3_5.jinja").read_text()).name == "qwen3_coder"
    assert family_for("{{ messages[0].content }}").name == "unknown"


def test_a_template_whose_tool_format_is_unknown_stops_the_start() -> None:
    template = "{% for tool in tools %}<|im_start|>{{ tool.name }}<fn>{% endfor %}"
    with pytest.raises(UnknownFormat) as raised:
        family_for(template)
    assert "found: <|im_start|>" in str(raised.value)
    assert "qwen3_coder" in str(raised.value)


@pytest.mark.parametrize(
    ("name", "builtin"),
    [("qwen3_coder", "qwen_3_5"), ("hermes", "qwen_3"), ("llama3", "llama"),
     ("deepseek_v31", "deepseek_v3_1")],
)  # fmt: skip
def test_each_format_is_xgrammars_own(name: str, builtin: str) -> None:
    """Our strings for a family's calls are those of xgrammar's structural tag for the format
    (the one SGLang's parser of that name uses): the tag of a forced call, its content's style,
    and the trigger that opens a call in free text."""
    tools = family(name).tools
    assert tools is not None
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
    choice = {"type": "function", "function": {"name": "get_weather"}}
    form = get_model_structural_tag(builtin, [tool], choice, reasoning="disabled").format
    begin = tools.block_begin + tools.call_begin + "get_weather" + tools.arguments_begin
    assert form.begin == begin
    assert form.end == tools.call_end + tools.block_end
    assert form.content.style == tools.arguments
    auto = get_model_structural_tag(builtin, [tool], "auto", reasoning="disabled").format
    [trigger] = auto.triggers
    assert trigger.startswith(tools.trigger) or tools.trigger.startswith(trigger)


def canonical_call(name: str, arguments: dict[str, Any], index: int = 0) -> ToolCall:
    return ToolCall(f"call_{index}", name, json.dumps(arguments))


def template_call(name: str, arguments: dict[str, Any], index: int = 0) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"id": f"call_{index}", "type": "function", "function": function}


def test_the_prompt_is_what_the_template_renders(renderer: PromptRenderer) -> None:
    """Tools, calls with their reasoning, results (an error among them) and the switch: the
    node's prompt is the model's own template's rendering of the same conversation."""
    calls = [canonical_call("get_weather", args, i) for i, args in enumerate(ARGUMENTS[:2])]
    request = GenerateRequest(
        "m",
        (
            Message("system", (Text("Be brief."),)),
            Message("user", (Text("Weather in Paris and Rio?"),)),
            Message("assistant", (Thinking("Two cities.", ""), Text("Checking."), *calls)),
            Message(
                "tool",
                (
                    ToolResult("call_0", (Text("sunny"),)),
                    ToolResult("call_1", (Text("no such city"),), is_error=True),
                ),
            ),
        ),
        tools=TOOLS,
    )
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rio?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Two cities.",
            "tool_calls": [template_call("get_weather", a, i) for i, a in enumerate(ARGUMENTS[:2])],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such city"},
    ]
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description,
                                          "parameters": t.input_schema}}
        if t.description else
        {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
        for t in TOOLS
    ]  # fmt: skip
    tokenizer = renderer._tokenizer
    for mode, switch in ((ThinkingMode.DISABLED, False), (ThinkingMode.ENABLED, True)):
        thinking = ThinkingConfig(mode, 64 if switch else None)
        prompt = renderer.render(GenerateRequest(**{**vars_of(request), "thinking": thinking}))
        expected = tokenizer.apply_chat_template(
            turns, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=switch
        )
        assert prompt.text == expected
        assert prompt.text.endswith("<think>\n" if switch else "<think>\n\n</think>\n\n")
        # The calls went back as the model writes them.
        for args in ARGUMENTS[:2]:
            assert XML.call("get_weather", xml_arguments(args)) in prompt.text


def vars_of(request: GenerateRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}


def xml_arguments(arguments: dict[str, Any]) -> str:
    """As Qwen's template writes them: a string as it is, anything else as JSON."""
    written = {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()}
    return "".join(
        f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in written.items()
    ).removesuffix("\n")


def parse(text: str, size: int, tools: tuple[Tool, ...] = TOOLS) -> list[Event]:
    counter = itertools.count()
    parser = OutputParser(XML, lambda: f"id{next(counter)}", declared=tools)
    events: list[Event] = []
    for start in range(0, len(text), size):
        events += parser.feed(text[start : start + size])
    return events + parser.finish()


def calls_of(events: list[Event]) -> list[tuple[str, str, bool]]:
    calls: dict[int, list[Any]] = {}
    for event in events:
        if isinstance(event, ToolCallStart):
            calls[event.index] = [event.name, "", None]
        elif isinstance(event, ToolCallDelta):
            calls[event.index][1] += event.arguments
        elif isinstance(event, ToolCallEnd):
            calls[event.index][2] = event.complete
    return [tuple(call) for call in calls.values()]  # type: ignore[misc]


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_xml_calls_read_back_as_their_arguments(arguments: dict[str, Any], size: int) -> None:
    text = "Sure.\n\n" + XML.call("get_weather", xml_arguments(arguments))
    text += XML.separator + XML.call("noop", "")
    events = parse(text, size)
    [(name, read, complete), (other, empty, done)] = calls_of(events)
    assert (name, json.loads(read), complete) == ("get_weather", arguments, True)
    assert (other, json.loads(empty), done) == ("noop", {}, True)
    assert "".join(e.text for e in events if hasattr(e, "text")).strip() == "Sure."


def test_a_cut_xml_call_is_closed_incomplete() -> None:
    text = XML.call("get_weather", xml_arguments({"city": "Paris", "days": 2}))
    cut = text[: text.index("Paris") + 3]
    [(name, read, complete)] = calls_of(parse(cut, 2))
    assert (name, read, complete) == ("get_weather", '{"city": "Par', False)


@pytest.mark.parametrize("choice", ["auto", "any", "named"])
def test_the_grammar_takes_the_templates_calls_and_no_other(
    renderer: PromptRenderer, choice: str
) -> None:
    """What the template writes for a call in history is what the grammar accepts from the
    model; a parameter the schema lacks, or a string where it wants a number, is refused."""
    kinds = {"auto": ToolChoiceKind.AUTO, "any": ToolChoiceKind.ANY}
    kind = kinds.get(choice, ToolChoiceKind.NAMED)
    name = "get_weather" if choice == "named" else None
    request = GenerateRequest("m", (Message("user", (Text("Hi"),)),), tools=TOOLS,
                              tool_choice=ToolChoice(kind, name))  # fmt: skip
    constraint = constraint_for(request, QWEN)
    assert constraint is not None
    tokenizer = renderer._tokenizer
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiled = GrammarCompiler(info).compile_structural_tag(constraint.value)
    for arguments in ARGUMENTS:
        text = XML.call("get_weather", xml_arguments(arguments))
        assert GrammarMatcher(compiled).accept_string(text), text
        jsonschema.validate(arguments, SCHEMA)
    for wrong in ({"town": "Paris"}, {"city": "Paris", "days": "three"}):
        text = XML.call("get_weather", xml_arguments(wrong))
        assert not GrammarMatcher(compiled).accept_string(text), text


def test_a_free_form_tool_is_one_input_parameter(renderer: PromptRenderer) -> None:
    """A custom tool's call writes its input as the `input` parameter; it reads back as it is,
    and a function tool with a parameter of that name stays a function call."""
    from server.canonical import FreeForm

    patch = Tool("apply_patch", None, {}, free_form=FreeForm())
    tools = (*TOOLS, patch, Tool("shell", None, {"type": "object",
             "properties": {"input": {"type": "string"}}}))  # fmt: skip
    body = '*** Begin Patch\n+ x = "y"\n*** End Patch'
    text = (
        XML.call("apply_patch", body, free_form=True)
        + "\n"
        + XML.call("shell", xml_arguments({"input": "ls"}))
    )
    for size in (1, 5, 1000):
        assert calls_of(parse(text, size, tools)) == [
            ("apply_patch", body, True),
            ("shell", '{"input": "ls"}', True),
        ]
    prompt = renderer.render(
        GenerateRequest(
            "m",
            (
                Message("user", (Text("Patch it."),)),
                Message("assistant", (ToolCall("c1", "apply_patch", body, free_form=True),)),
                Message("tool", (ToolResult("c1", (Text("done"),)),)),
            ),
            tools=tools,
        )
    )
    assert XML.call("apply_patch", body, free_form=True) in prompt.text


def test_every_family_file_is_whole() -> None:
    from grammars import families

    for found in families():
        assert isinstance(found, ModelFamily) and found.match and found.tool_format
        if found.template_tools:
            assert found.tools is not None and not found.tools.system


@pytest.mark.parametrize("name", ["qwen3", "llama3"])
def test_a_json_call_goes_back_as_the_model_writes_it(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A call in history, as each JSON family's template renders it, is the family's call
    format around the arguments (as the template's tojson writes them)."""
    from tests.families.tiny import FAMILIES

    folder = make(
        tmp_path_factory.mktemp(name), FAMILIES[name], ensure_converted(default_cache_dir())
    )
    tokenizer = load_tokenizer(str(folder))
    renderer = PromptRenderer(tokenizer, family_for(tokenizer.chat_template))
    tools = renderer.family.tools
    assert tools is not None
    arguments = {"city": "Paris", "days": 2}
    prompt = renderer.render(
        GenerateRequest(
            "m",
            (
                Message("user", (Text("Weather?"),)),
                Message("assistant", (canonical_call("get_weather", arguments),)),
                Message("tool", (ToolResult("call_0", (Text("sunny"),)),)),
            ),
            tools=TOOLS,
        )
    )
    assert tools.call("get_weather", json.dumps(arguments)) in prompt.text
    assert "sunny" in prompt.text


@pytest.mark.parametrize("name", ["hermes", "llama3", "deepseek_v31", "chatml", "gpt_oss"])
@pytest.mark.parametrize("size", [1, 4, 1000])
def test_json_calls_read_back_in_each_format(name: str, size: int) -> None:
    """Text, then the calls as the format writes them (in their block where it has one, as many
    as it holds in a turn), whatever the pieces they arrive in."""
    tools = family(name).tools
    assert tools is not None
    arguments = [{"city": "Paris", "days": 2}, {"city": 'Rio "de" Janeiro'}]
    if not tools.parallel:
        arguments = arguments[:1]
    calls = tools.separator.join(tools.call("get_weather", json.dumps(a)) for a in arguments)
    text = "Sure." + tools.block_begin + calls + tools.block_end
    counter = itertools.count()
    parser = OutputParser(tools, lambda: f"id{next(counter)}", declared=TOOLS)
    events: list[Event] = []
    for start in range(0, len(text), size):
        events += parser.feed(text[start : start + size])
    events += parser.finish()
    assert [(n, json.loads(a), c) for n, a, c in calls_of(events)] == [
        ("get_weather", a, True) for a in arguments
    ]
    assert "".join(e.text for e in events if hasattr(e, "text")) == "Sure."


@pytest.mark.parametrize(
    "name", ["qwen3_coder", "hermes", "llama3", "deepseek_v31", "mistral", "gpt_oss"]
)
def test_sglangs_own_parser_reads_our_calls_the_same(name: str) -> None:
    """The family's `tool_format` names SGLang's parser of that format: on the calls the
    grammar makes the model write, it finds the calls our parser finds."""
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    from sglang.srt.entrypoints.openai.protocol import Function
    from sglang.srt.entrypoints.openai.protocol import Tool as SGLangTool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    found = family(name)
    tools = found.tools
    assert tools is not None and found.tool_format is not None
    arguments = [{"city": "Paris", "days": 2}, {"city": "Rio", "unit": "celsius"}]
    if not tools.parallel:
        arguments = arguments[:1]
    written = [
        xml_arguments(a) if tools.arguments == "qwen_xml" else json.dumps(a) for a in arguments
    ]
    calls = tools.separator.join(tools.call("get_weather", w) for w in written)
    # Llama's call is its turn's whole text, and Harmony's its message: SGLang reads them so.
    before = "" if name in ("llama3", "gpt_oss") else "Sure. "
    text = before + tools.block_begin + calls + tools.block_end
    counter = itertools.count()
    parser = OutputParser(tools, lambda: f"id{next(counter)}", declared=TOOLS)
    ours = [(n, json.loads(a)) for n, a, _ in calls_of(parser.feed(text) + parser.finish())]
    detector = FunctionCallParser.ToolCallParserEnum[found.tool_format]()
    declared = [
        SGLangTool(type="function", function=Function(name=t.name, parameters=t.input_schema))
        for t in TOOLS
    ]
    # SGLang's gpt-oss parser reads a call from its message's start, which ends our prompt.
    opened = "<|start|>assistant" if name == "gpt_oss" else ""
    result = detector.detect_and_parse(opened + text, declared)
    theirs = [(call.name, json.loads(call.parameters)) for call in result.calls]
    assert ours == theirs == [("get_weather", a) for a in arguments]


@pytest.mark.parametrize("inside", ["block", "call"])
def test_a_marker_cut_inside_a_character_is_never_text(inside: str) -> None:
    """A detokenizer writes U+FFFD for a character whose bytes are still arriving: cut there,
    inside DeepSeek's fullwidth markup, nothing of the markup is text."""
    tools = family("deepseek_v31").tools
    assert tools is not None
    marker, before = tools.block_begin, ""
    if inside == "call":
        marker, before = tools.call_begin, tools.block_begin
    cut = "Sure." + before + marker[: marker.index("▁")] + "\ufffd\ufffd"  # "▁": 3 bytes
    parser = OutputParser(tools, lambda: "id", declared=TOOLS)
    events = parser.feed(cut) + parser.finish(cut=True)
    assert "".join(e.text for e in events if hasattr(e, "text")) == "Sure."
    assert calls_of(events) == []


@pytest.mark.parametrize("size", [1, 5, 1000])
def test_harmony_channels_read_as_reasoning_text_and_calls(size: int) -> None:
    """gpt-oss's answer: the analysis message is reasoning, the final one text, a commentary
    message to a function a call; the channels' markup is never text."""
    found = family("gpt_oss")
    tools, thinking = found.tools, found.thinking
    assert tools is not None and thinking is not None

    def read(text: str, reasons: bool) -> list[Event]:
        parser = OutputParser(tools, lambda: "id", thinking if reasons else None, declared=TOOLS,
                              answer_begin=found.answer_begin)  # fmt: skip
        events: list[Event] = []
        for start in range(0, len(text), size):
            events += parser.feed(text[start : start + size])
        return events + parser.finish()

    def texts(events: list[Event], kind: type) -> str:
        return "".join(e.text for e in events if isinstance(e, kind))

    from server.canonical import TextDelta, ThinkingDelta

    final = found.answer_begin + "Sunny."
    events = read(final, reasons=False)
    assert texts(events, TextDelta) == "Sunny." and calls_of(events) == []
    events = read("Look it up." + thinking.close + thinking.after + final, reasons=True)
    assert (texts(events, ThinkingDelta), texts(events, TextDelta)) == ("Look it up.", "Sunny.")
    call = tools.call("get_weather", '{"city": "Oslo"}')
    events = read("Look it up." + thinking.close + thinking.after + call, reasons=True)
    assert texts(events, TextDelta) == ""
    assert calls_of(events) == [("get_weather", '{"city": "Oslo"}', True)]
