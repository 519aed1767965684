"""The family-independent tests of tools, reasoning and free-form calls, run again on a model of
four families that stand for the rest: a tiny model made by tests/families/ (its architecture
at a toy size, random weights, the family's chat template) served by the real engine, one
family at a time. Each speaks its own format, from its model's published template: Qwen3.5's
XML calls, Kimi K2's section of calls in special tokens with their `functions.NAME:INDEX` ids,
Mistral's JSON array with its call ids, gpt-oss's Harmony channels; reasoning has the
template's own switch. The other formats are checked without an engine (tests/unit/
test_formats.py, test_differential.py). Every
guarantee the embedded model's tests check (calls valid against their schema under each
tool_choice, a named choice one call, no call markup in text, streamed calls equal to whole
ones, budgets enforced) must hold on each. Qwen3.5's model has its own hybrid architecture: its
prefix cache, abandoned streams and images are checked on it too."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import Tokenizer
from tests.api import test_responses as responses_tests
from tests.api import test_tools as tools_tests
from tests.api.test_responses import (  # noqa: F401  (collected here, on each family's model)
    test_a_required_tool_is_called_with_valid_arguments,
    test_sdk_function_tool_round_trip,
)
from tests.api.test_responses_tools import (
    test_a_custom_call_streams_its_input,
    test_calls_and_their_outputs_go_back_as_input,
    test_every_sampled_input_holds_to_the_grammar,
)
from tests.api.test_thinking import (
    MINIMAL_BUDGET,
    test_chat_enable_thinking_fills_reasoning_content,
    test_disabled_means_no_reasoning_phase,
    test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows,
)
from tests.api.test_tool_markup import (  # noqa: F401
    test_a_named_choice_is_that_call_once_with_parallel_calls_on,
    test_no_cut_of_a_call_is_ever_text,
)
from tests.api.test_tools import (  # noqa: F401
    test_anthropic_one_call_when_parallel_calls_are_off,
    test_anthropic_streamed_fragments_concatenate_to_the_input,
    test_anthropic_tool_choice,
    test_anthropic_weather_loop_round_trips_history,
    test_openai_one_call_when_parallel_calls_are_off,
    test_openai_streamed_tool_call_deltas,
    test_openai_tool_choice,
    test_openai_tool_messages_round_trip,
)
from tests.conftest import AGENTS_AND_FAMILIES
from tests.families.tiny import FAMILIES, make
from tests.server_process import ServerProcess

pytestmark = pytest.mark.shard(AGENTS_AND_FAMILIES)  # nodes of their own, apart from the core's

# Each tiny model: what the card says of its chat format (family, tool format, reasoning), and
# whether the format has a call of free-form input (custom tools).
CARDS = {
    "qwen3_5": ("qwen3_coder", "qwen3_coder", True),
    "kimi_k2": ("kimi_k2", "kimi_k2", True),
    "mistral": ("mistral", "mistral", False),
    "gpt_oss": ("gpt_oss", "gpt-oss", True),
}
FREE_FORM = {"qwen3_5"}
FREE_FORM_TESTS = {
    test_a_custom_call_streams_its_input.__name__,
    test_calls_and_their_outputs_go_back_as_input.__name__,
    test_every_sampled_input_holds_to_the_grammar.__name__,
}
THINKING_TESTS = {
    test_chat_enable_thinking_fills_reasoning_content.__name__,
    test_disabled_means_no_reasoning_phase.__name__,
    test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows.__name__,
}


# Run on the production model's family only: what they check is the family-independent part of
# the constraints (parallel calls off, a named choice once), run on the embedded model too.
EVERY_CONSTRAINT = {"qwen3_5"}
CONSTRAINT_TESTS = {
    test_anthropic_one_call_when_parallel_calls_are_off.__name__,
    test_openai_one_call_when_parallel_calls_are_off.__name__,
    test_a_named_choice_is_that_call_once_with_parallel_calls_on.__name__,
}
# The Messages twins of the streaming and history tests, and the Messages sweep of cuts: the
# protocols encode the same canonical calls whatever the family, so on the other families these
# run through Chat Completions alone (every tool_choice runs on both protocols on every family).
MESSAGES_TWINS = {
    test_anthropic_streamed_fragments_concatenate_to_the_input.__name__,
    test_anthropic_weather_loop_round_trips_history.__name__,
}
EVERY_PROTOCOL = {"qwen3_5"}
BUDGET_TEST = test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows.__name__
# Qwen3.5's own architecture: Gated DeltaNet layers, whose cache is a recurrent state per prefix,
# and a vision encoder.
HYBRID = {"qwen3_5"}
HYBRID_TESTS = {
    "test_a_tool_loop_prefills_only_what_each_turn_adds",
    "test_abandoned_streams_leave_the_states_to_the_next",
    "test_an_image_stands_as_the_familys_vision_tokens",
    "test_the_reasoning_budget_in_tokens",
}


AHEAD = 1  # the next family's node starts while the tests of one run


@dataclass(frozen=True)
class Node:
    process: ServerProcess
    folder: Path


class Nodes:
    """A node on each family's tiny model, in CARDS' order: the next ones start while the tests
    of the one before them run, and one is stopped once the tests of the next begin (AHEAD + 1
    at most at once: each is an engine, its processes and their memory, beside the shards'
    others on the suite's machine)."""

    def __init__(self, root: pytest.TempPathFactory) -> None:
        self._root = root
        self._embedded = ensure_converted(default_cache_dir())
        self._running: dict[str, Node] = {}

    def ready(self, family: str) -> Node:
        order = list(CARDS)
        for name in [name for name in self._running if order.index(name) < order.index(family)]:
            self._running.pop(name).process.stop()
        node = self._running.get(family) or self._start(family)
        for following in order[order.index(family) + 1 :][:AHEAD]:
            if following not in self._running:
                self._start(following)
        node.process.wait_ready()
        return node

    def _start(self, family: str) -> Node:
        folder = make(self._root.mktemp(family) / "model", FAMILIES[family], self._embedded)
        args = ("--model", str(folder), "--served-model-name", served_name(family))
        node = self._running[family] = Node(
            ServerProcess(folder.parent / "server.log", *args), folder
        )
        node.process.start()
        return node

    def close(self) -> None:
        for node in self._running.values():
            node.process.terminate()
        for node in self._running.values():
            node.process.stop()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    started = Nodes(tmp_path_factory)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module", params=list(CARDS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def where_the_family_has_it(request: pytest.FixtureRequest, family: str) -> None:
    """A family without a reasoning phase refuses reasoning, one without a free-form call
    refuses custom tools (both checked below): the tests of those do not apply to it."""
    name = request.node.originalname
    if name in THINKING_TESTS and not CARDS[family][2]:
        pytest.skip(f"{family} has no reasoning phase: test_reasoning_is_refused_without_one")
    if name in FREE_FORM_TESTS and family not in FREE_FORM:
        pytest.skip(f"{family} has no free-form call: test_custom_tools_are_refused_without_one")
    if name in CONSTRAINT_TESTS and family not in EVERY_CONSTRAINT:
        pytest.skip(f"{family}: the format-independent constraints run on qwen3_5")
    swept = getattr(request.node, "callspec", None)
    messages = swept is not None and swept.params.get("protocol") == "messages"
    if (name in MESSAGES_TWINS or messages) and family not in EVERY_PROTOCOL:
        pytest.skip(f"{family}: its calls are checked through Chat Completions (Messages: qwen3_5)")
    if name in HYBRID_TESTS and family not in HYBRID:
        pytest.skip(f"{family} is not a hybrid (Gated DeltaNet) architecture")
    if name == BUDGET_TEST and family in HYBRID:
        pytest.skip(
            f"{family}: counted by re-encoding its text, a random model's reasoning can come to "
            "more tokens than it was generated in; test_the_reasoning_budget_in_tokens counts "
            "the node's own"
        )


@pytest.fixture(autouse=True)
def room_for_the_markup(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kimi's and gpt-oss's markers are in special tokens: the random model may spell each out
    in pieces (a byte, a few characters), in many tokens where the family's own model writes
    one, so its calls and answers get room for that."""
    if family == "kimi_k2":
        for module in (tools_tests, responses_tests):  # the latter's is the former's, imported
            monkeypatch.setattr(module, "MAX_TOKENS", 3 * tools_tests.MAX_TOKENS)
    if family == "gpt_oss":  # its answer's <|channel|>final<|message|>, 27 characters
        monkeypatch.setattr(responses_tests, "ANSWER_TOKENS", 27 + responses_tests.ANSWER_TOKENS)


@pytest.fixture(scope="module")
def node(nodes: Nodes, family: str) -> Node:
    return nodes.ready(family)


@pytest.fixture(scope="module")
def server(node: Node) -> ServerProcess:
    return node.process


@pytest.fixture(scope="module")
def tokenizer(node: Node) -> Tokenizer:
    """What counts the reasoning's tokens (test_thinking re-encodes its text): the vocabulary's
    own rules, its tokenizer.json. The tiny models' vocabulary is SmolLM2's; for Qwen3.5,
    transformers imposes Qwen's pre-tokenizer, which splits SmolLM2's multi-digit tokens, so the
    text of 256 random tokens can re-encode to more."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(node.folder / "tokenizer.json"))


def served_name(family: str) -> str:
    return f"tests/{family}-tiny"


@pytest.fixture(scope="module")
def model(server: ServerProcess, family: str) -> str:
    return served_name(family)


def test_the_card_names_the_family_and_its_tool_format(
    server: ServerProcess, model: str, family: str
) -> None:
    [card] = httpx.get(f"{server.base_url}/models").json()["data"]
    assert card["id"] == model
    assert (card["family"], card["tool_format"], card["reasoning"]) == CARDS[family]
    assert "tools" in card["capabilities"]
    assert ("thinking" in card["capabilities"]) == CARDS[family][2]


def test_reasoning_is_refused_without_one(http: httpx.Client, model: str, family: str) -> None:
    """Checked before anything runs (count_tokens checks a request as a generation would)."""
    body = {
        "model": model,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Hi"}],
    }
    response = http.post("/v1/infer/v1/messages/count_tokens", json=body)
    if CARDS[family][2]:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 400, response.text
        assert "no known reasoning format" in response.json()["error"]["message"]


def test_custom_tools_are_refused_without_one(
    openai_client: openai.OpenAI, model: str, family: str
) -> None:
    custom = {"type": "custom", "name": "note", "description": "Add a note."}
    if family in FREE_FORM:  # taken: a required call of it is that call
        response = openai_client.responses.create(
            model=model, input="Note it.", tools=[custom], tool_choice="required",
            max_output_tokens=64,  # past the call's opening markup, whatever its input
        )  # fmt: skip
        assert [(item.type, item.name) for item in response.output] == [
            ("custom_tool_call", "note")
        ]
        return
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.responses.create(
            model=model, input="Note it.", tools=[custom], max_output_tokens=16
        )
    assert "no call of free-form input" in str(raised.value)


CITY_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
AGENT_SYSTEM = "You are a coding agent. Use the tools you are given. " * 20


def test_a_tool_loop_prefills_only_what_each_turn_adds(http: httpx.Client, model: str) -> None:
    """An agent's turn is the previous turn's prompt and call plus the call's result: the
    recurrent states at the end of each prompt are cached, so each turn prefills only what it
    adds (the prefix reuse of a hybrid model, whose cache holds states at prefix ends only)."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    previous = 0
    for _ in range(3):
        body = {
            "model": model, "messages": messages, "tools": [CITY_TOOL],
            "tool_choice": "required", "max_tokens": 48, "temperature": 0,
        }  # fmt: skip
        response = http.post("/v1/infer/chat/completions", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        usage = answer["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= previous
        previous = usage["prompt_tokens"]
        message = answer["choices"][0]["message"]
        [call] = message["tool_calls"]
        assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Oslo")
        messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "Sunny"}]
    assert previous > 3 * len(AGENT_SYSTEM) // 16  # the system turn is a large part of each


def test_abandoned_streams_leave_the_states_to_the_next(http: httpx.Client, model: str) -> None:
    """Streams closed mid-answer give their recurrent states back: the prompt they shared is
    still cached, and the next request runs to its end."""
    body = {
        "model": model, "max_tokens": 400, "stream": True,
        "messages": [{"role": "system", "content": AGENT_SYSTEM},
                     {"role": "user", "content": "Write a long story."}],
    }  # fmt: skip
    for _ in range(3):
        with http.stream("POST", "/v1/infer/chat/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert any(line.startswith("data: {") for line in lines)
    follow_up = dict(body, stream=False, max_tokens=8)
    follow_up["messages"] = [*body["messages"], {"role": "assistant", "content": "Once"},
                             {"role": "user", "content": "Go on."}]  # fmt: skip
    response = http.post("/v1/infer/chat/completions", json=follow_up)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_an_image_stands_as_the_familys_vision_tokens(http: httpx.Client, model: str) -> None:
    """The template's <|vision_start|><|image_pad|><|vision_end|>, the pad expanded by the
    runtime into the image's tokens (a 64x64 image: 16-pixel patches merged 2x2, 4 tokens), which
    the vision encoder fills."""
    question = {"type": "text", "text": "What colour is this?"}
    image = {"type": "image_url", "image_url": {"url": _png_data_url(64, 64)}}

    def prompt_tokens(content: list[dict[str, object]]) -> int:
        body = {"model": model, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": content}]}  # fmt: skip
        response = http.post("/v1/infer/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return int(response.json()["usage"]["prompt_tokens"])

    # and the newline the node puts between a turn's parts
    assert prompt_tokens([question, image]) == prompt_tokens([question]) + 1 + 2 + 4


def test_the_reasoning_budget_in_tokens(http: httpx.Client, model: str) -> None:
    """The grammar closes the reasoning when its budget is spent: the node's own count of the
    reasoning's tokens is the budget's at most, and Qwen's </think>: one token as Qwen writes
    it, and up to one a character as a random model may spell it (the grammar takes both)."""
    body = {
        "model": model, "input": "Is 391 prime?", "max_output_tokens": MINIMAL_BUDGET + 64,
        "temperature": 0, "reasoning": {"effort": "minimal"},
    }  # fmt: skip
    response = http.post("/v1/infer/responses", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["type"] for item in answer["output"]] == ["reasoning", "message"]
    reasoning_tokens = answer["usage"]["output_tokens_details"]["reasoning_tokens"]
    assert 0 < reasoning_tokens <= MINIMAL_BUDGET + len("</think>")


def _png_data_url(width: int, height: int) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
